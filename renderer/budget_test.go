package renderer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The push budget is a window of a minute divided by the budget: a change after a quiet window
// pushes at once, one sooner waits for the window's end, so no minute holds more pushes than the
// budget; renders that push nothing cost nothing.
func TestPushBudget(t *testing.T) {
	var w pushWindow
	at := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	require.Zero(t, w.wait(6, at), "the first push")
	w.spend(6, at)
	require.Equal(t, 10*time.Second, w.wait(6, at), "at 6 a minute the window is 10 s")
	require.Equal(t, 4*time.Second, w.wait(6, at.Add(6*time.Second)))
	// A churn that wakes the daemon every second pushes 6 times in any minute.
	var churn pushWindow
	pushes := 0
	for s := range 60 {
		if now := at.Add(time.Duration(s) * time.Second); churn.wait(6, now) == 0 {
			churn.spend(6, now)
			pushes++
		}
	}
	require.Equal(t, 6, pushes, "no minute holds more than the budget")
	require.Zero(t, w.wait(6, at.Add(time.Hour)), "after a quiet spell at once")

	var none pushWindow
	none.spend(0, at)
	require.Zero(t, none.wait(0, at), "0 is no bound")
}
