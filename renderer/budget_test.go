package renderer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The push budget holds a minute's pushes: a few changes after a quiet spell push at once, a
// churn pushes at the budget's rate, and renders that push nothing cost nothing.
func TestPushBudget(t *testing.T) {
	var b pushBucket
	at := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	for i := range 6 {
		require.Zero(t, b.wait(6, at), "push %d of a quiet minute", i)
		b.spend(6, at)
	}
	require.Equal(t, 10*time.Second, b.wait(6, at), "the seventh waits a tenth of a minute")
	at = at.Add(10 * time.Second)
	require.Zero(t, b.wait(6, at))
	b.spend(6, at)
	require.Equal(t, 10*time.Second, b.wait(6, at))
	at = at.Add(time.Hour)
	require.Zero(t, b.wait(6, at), "a quiet spell refills it")

	var none pushBucket
	none.spend(0, at)
	require.Zero(t, none.wait(0, at), "0 is no bound")

	var slow pushBucket
	require.Zero(t, slow.wait(0.5, at), "a budget under one a minute still holds a push")
	slow.spend(0.5, at)
	require.Equal(t, 2*time.Minute, slow.wait(0.5, at))
}
