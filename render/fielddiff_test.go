package render

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFieldDiff(t *testing.T) {
	before := []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    gitbroker.dev/inputs-hash: aaa\n  name: p\nspec:\n  containers:\n  - image: nginx:stable-alpine\n    env:\n    - name: A\n      value: \"1\"\n")
	after := []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    gitbroker.dev/inputs-hash: bbb\n  name: p\nspec:\n  containers:\n  - image: nginx:1.27-alpine\n    env:\n    - name: A\n      value: \"1\"\n    - name: B\n      value: two\n")
	require.Equal(t, "spec.containers[0].env[name=B].value: added two; spec.containers[0].image: nginx:stable-alpine → nginx:1.27-alpine",
		diffText(before, after), "the inputs hash is left out when anything else changed")
	require.Equal(t, "metadata.annotations.gitbroker.dev/inputs-hash: aaa → bbb",
		diffText(before, []byte(strings.Replace(string(before), "aaa", "bbb", 1))), "alone, it is said")
	require.Equal(t, "spec.containers[0].env[name=A].value: removed",
		diffText(before, []byte(strings.Replace(string(before), "    env:\n    - name: A\n      value: \"1\"\n", "", 1))))
	// Lists of named entries are keyed by name: a variable added first shifts nothing, and a
	// change says which variable.
	named := func(env string) []byte {
		return []byte("spec:\n  containers:\n  - name: broker\n    env:\n" + env)
	}
	require.Equal(t, "spec.containers[name=broker].env[name=FIRST].value: added 0",
		diffText(named("    - name: A\n      value: \"4\"\n"), named("    - name: FIRST\n      value: \"0\"\n    - name: A\n      value: \"4\"\n")))
	require.Equal(t, "spec.containers[name=broker].env[name=A].value: 4 → 5",
		diffText(named("    - name: A\n      value: \"4\"\n"), named("    - name: A\n      value: \"5\"\n")))
	var many strings.Builder
	many.WriteString("a:\n")
	for i := 0; i < 10; i++ {
		many.WriteString("  k" + string(rune('0'+i)) + ": x\n")
	}
	require.True(t, strings.HasSuffix(diffText([]byte("a: {}\n"), []byte(many.String())), "; and 5 more fields"))
	long := strings.Repeat("é", 80)
	require.Contains(t, diffText([]byte("v: a\n"), []byte("v: "+long+"\n")), strings.Repeat("é", 57)+"...")
}

func diffText(before, after []byte) string { return fieldDiff(fieldChanges(before, after)) }
