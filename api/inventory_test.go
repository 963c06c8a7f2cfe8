package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An inventory is bounded in lines and flow entries before it is parsed (a parse costs about a
// kilobyte per entry), and lists at most MaxInventoryErrors errors.
func TestInventoryEntriesAndErrorsAreBounded(t *testing.T) {
	head := "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: edge-a\nspec:\n  configurations:\n  - name: c\n    devices:\n"
	var b strings.Builder
	b.WriteString(head + "    - {id: a}, {id: b}, [" + strings.Repeat("{},", MaxInventoryEntries/2) + "]\n")
	_, errs := ParseInventory("inventory/edge-a.yaml", []byte(b.String()), "default")
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), "inventory/edge-a.yaml:1: inventory has 100")
	require.Contains(t, errs[0].Error(), "lines and flow entries, above the limit of 100000")

	b.Reset()
	b.WriteString(head)
	for range 2 * MaxInventoryErrors {
		b.WriteString("    - {id: a}\n")
	}
	_, errs = ParseInventory("inventory/edge-a.yaml", []byte(b.String()), "default")
	require.Len(t, errs, MaxInventoryErrors+1)
	require.Contains(t, errs[0].Error(), "inventory/edge-a.yaml:10: spec.configurations[0].devices[1].id: device \"a\" is listed twice")
	require.Equal(t, "inventory/edge-a.yaml: and 49 more errors", errs[MaxInventoryErrors].Error())

	// A node with a thousand devices of five properties each is far inside the bound.
	b.Reset()
	b.WriteString(head)
	for i := range 1000 {
		b.WriteString("    - id: dev-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "\n      properties:\n")
		for _, p := range []string{"A", "B", "C", "D", "E"} {
			b.WriteString("        UDEV_" + p + ": value\n")
		}
	}
	require.Less(t, yamlEntries([]byte(b.String())), MaxInventoryEntries/10)
}
