package api

import (
	"fmt"
	"strings"
	"testing"
)

// A duplicate key is refused with both its lines, in a document long enough for the fast reader.
func TestDuplicateKeyNamedWithLine(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: n\nspec:\n  configurations:\n  - name: c\n    devices:\n    - id: d\n      properties:\n")
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "        P%d: v\n", i)
	}
	b.WriteString("        P17: again\n")
	_, err := SplitDocuments("inventory/n.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), `key "P17" is given twice`) || !strings.Contains(err.Error(), "inventory/n.yaml:5011:") || !strings.Contains(err.Error(), "first on line 28") {
		t.Fatalf("want the duplicate key named with its line, got %v", err)
	}
}
