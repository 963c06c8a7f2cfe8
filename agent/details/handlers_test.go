package details

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Lookup finds a row by binary search: the table stays sorted, one row per name, each with its
// check.
func TestHandlersTableIsSortedAndComplete(t *testing.T) {
	names := Names()
	require.True(t, slices.IsSorted(names), "details.Handlers is sorted by name: %v", names)
	require.Len(t, slices.Compact(slices.Clone(names)), len(names), "one row per name: %v", names)
	for _, h := range Handlers {
		got, ok := Lookup(h.Name)
		require.True(t, ok, h.Name)
		require.Equal(t, h.Name, got.Name)
		require.NotNil(t, h.Check, "%s has no check", h.Name)
		require.True(t, Checked(h.Name))
	}
	_, ok := Lookup("onvif2")
	require.False(t, ok)
	require.False(t, Builtin(ONVIF))
	require.True(t, Builtin(Udev))
	require.NoError(t, Check("someoneElses", "{{ not YAML"), "a handler outside the table parses its own details")
	require.ErrorContains(t, Check(DebugEcho, "descriptions: 3"), "debugEcho discoveryDetails")
}
