package agent

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent/details"
)

// Every built-in row of details.Handlers has the agent's implementation and no implementation
// is of a name the table does not call built-in: the renderer and review judge a handler by the
// same table the agent serves from.
func TestEveryBuiltinHandlerIsImplemented(t *testing.T) {
	var table []string
	for _, h := range details.Handlers {
		if h.Builtin {
			table = append(table, h.Name)
		}
	}
	require.Equal(t, table, slices.Sorted(maps.Keys(builtins)))
	all := Builtins(BuiltinOptions{DebugEcho: true})
	require.Equal(t, table, slices.Sorted(maps.Keys(all)))
	_, echo := Builtins(BuiltinOptions{})[details.DebugEcho]
	require.False(t, echo, "debugEcho is served only when allowed")
}
