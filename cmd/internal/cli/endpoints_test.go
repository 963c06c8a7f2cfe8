package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A loop is unhealthy once no cycle has finished for 3 intervals and 5 minutes, counted from its
// start until the first one does; a loop that has not begun (a renderer waiting for its Lease)
// never is.
func TestStalled(t *testing.T) {
	start := time.Now().Add(-10 * time.Minute)
	never := func() time.Time { return time.Time{} }
	require.ErrorContains(t, Stalled(start, time.Second, never, nil, "cycle")(), "no cycle has finished for 10m0s")
	require.NoError(t, Stalled(start, 2*time.Minute, never, nil, "cycle")(), "11 minutes allowed")
	require.NoError(t, Stalled(start, time.Second, never, func() bool { return false }, "render")())
	recent := func() time.Time { return time.Now().Add(-time.Minute) }
	require.NoError(t, Stalled(start, time.Second, recent, nil, "cycle")())
	old := func() time.Time { return time.Now().Add(-6 * time.Minute) }
	require.ErrorContains(t, Stalled(start, time.Second, old, nil, "render")(), "no render has finished for 6m0s")
	require.NoError(t, Stalled(time.Now(), time.Second, old, nil, "render")(), "a cycle before the start counts from the start")
}
