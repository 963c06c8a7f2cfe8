package gitsync_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

func randomText(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// A fetch refuses a pack beyond its limit, and a snapshot a file beyond its limit, instead of
// reading either into memory; within the limits the same branch reads as usual.
func TestFetchAndFileLimits(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{
		"inventory/edge-a.yaml": randomText(64 << 10),
		"inventory/edge-b.yaml": "small: 1\n",
	})
	ctx := context.Background()

	r := open(t, srv, gitsync.WithLimits(16<<10, 0))
	_, err := r.Snapshot(ctx)
	require.ErrorIs(t, err, gitsync.ErrTooLarge)
	require.ErrorContains(t, err, "more than 16384 bytes")

	r = open(t, srv, gitsync.WithLimits(0, 32<<10))
	snap, err := r.Snapshot(ctx)
	require.NoError(t, err)
	b, err := snap.ReadFile("inventory/edge-b.yaml")
	require.NoError(t, err)
	require.Equal(t, "small: 1\n", string(b))
	_, err = snap.ReadFile("inventory/edge-a.yaml")
	require.ErrorIs(t, err, gitsync.ErrTooLarge)
	require.ErrorContains(t, err, "inventory/edge-a.yaml")
	_, err = snap.Files("inventory")
	require.ErrorIs(t, err, gitsync.ErrTooLarge)

	snap, err = open(t, srv).Snapshot(ctx)
	require.NoError(t, err)
	files, err := snap.Files("inventory")
	require.NoError(t, err)
	require.Len(t, files, 2)
}
