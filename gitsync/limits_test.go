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

	// A file above the file limit is never fetched: the server leaves it out (a partial clone
	// filter), and reading it says why, while the rest of the branch reads.
	r = open(t, srv, gitsync.WithLimits(0, 32<<10))
	snap, err := r.Snapshot(ctx)
	require.NoError(t, err)
	_, err = snap.ReadFile("inventory/edge-a.yaml")
	require.ErrorIs(t, err, gitsync.ErrTooLarge)
	require.ErrorContains(t, err, "the server left it out as larger than 32768 bytes")
	_, err = snap.Files("inventory")
	require.ErrorIs(t, err, gitsync.ErrTooLarge)
	b, err := snap.ReadFile("inventory/edge-b.yaml")
	require.NoError(t, err)
	require.Equal(t, "small: 1\n", string(b))

	// A server that offers no filter sends it: refused before it inflates, the fetch that
	// would bring it.
	gitsynctest.Git(t, srv.Bare(), "config", "uploadpack.allowFilter", "false")
	r = open(t, srv, gitsync.WithLimits(0, 32<<10))
	_, err = r.Snapshot(ctx)
	require.ErrorIs(t, err, gitsync.ErrTooLarge)
	require.ErrorContains(t, err, "inflates to 65536 bytes, above the limit of 32768")

	// Within the limits, a file read is still bounded on its own.
	r = open(t, srv, gitsync.WithLimits(0, 128<<10))
	snap, err = r.Snapshot(ctx)
	require.NoError(t, err)
	b, err = snap.ReadFile("inventory/edge-b.yaml")
	require.NoError(t, err)
	require.Equal(t, "small: 1\n", string(b))

	snap, err = open(t, srv).Snapshot(ctx)
	require.NoError(t, err)
	files, err := snap.Files("inventory")
	require.NoError(t, err)
	require.Len(t, files, 2)
}

// A decompression bomb (zeros that pack to almost nothing) on one node's ref never reaches
// memory, and leaves every other ref readable: a server that filters leaves the blob out (the
// ref reads, its file does not); one that does not sends it, and Branches leaves the ref out
// and says so.
func TestInflationBombIsIsolated(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/a.yaml": "a: 1\n"})
	srv.SeedBranches(map[string]map[string][]byte{
		"gitbroker/inventory/edge-a": {"inventory/edge-a.yaml": []byte("ok: 1\n")},
		"gitbroker/inventory/edge-b": {"inventory/edge-b.yaml": make([]byte, 8<<20)},
		"gitbroker/inventory/edge-c": {"inventory/edge-c.yaml": []byte("ok: 3\n")},
	})
	ctx := context.Background()
	r := open(t, srv, gitsync.WithLimits(4<<20, 1<<20))
	snaps, err := r.Branches(ctx, "main", "gitbroker/inventory/")
	require.NoError(t, err)
	require.Empty(t, r.Oversized())
	_, err = snaps["gitbroker/inventory/edge-b"].ReadFile("inventory/edge-b.yaml")
	require.ErrorIs(t, err, gitsync.ErrTooLarge)
	b, err := snaps["gitbroker/inventory/edge-c"].ReadFile("inventory/edge-c.yaml")
	require.NoError(t, err)
	require.Equal(t, "ok: 3\n", string(b))

	gitsynctest.Git(t, srv.Bare(), "config", "uploadpack.allowFilter", "false")
	for _, first := range []bool{true, false} {
		r := open(t, srv, gitsync.WithLimits(4<<20, 1<<20))
		if !first {
			// A store that has the refs already, when the bomb arrives on one that moves.
			_, err := r.Branches(ctx, "main")
			require.NoError(t, err)
		}
		snaps, err := r.Branches(ctx, "main", "gitbroker/inventory/")
		require.NoError(t, err)
		require.Contains(t, snaps, "gitbroker/inventory/edge-a")
		require.Contains(t, snaps, "gitbroker/inventory/edge-c")
		require.NotContains(t, snaps, "gitbroker/inventory/edge-b")
		over := r.Oversized()
		require.Len(t, over, 1)
		require.ErrorIs(t, over["gitbroker/inventory/edge-b"], gitsync.ErrTooLarge)
		b, err := snaps["gitbroker/inventory/edge-c"].ReadFile("inventory/edge-c.yaml")
		require.NoError(t, err)
		require.Equal(t, "ok: 3\n", string(b))
	}
}

// A branch moved back to a commit older than the reader's shallow store holds: told the newer
// tip is here, the server sent nothing, and every later read failed ("object not found"), an
// agent's own ref replayed to an older commit of its included. Found by the adversary
// (cmd/gitbroker TestAdversary). The reader now fetches the branch afresh.
func TestBranchMovedBackPastTheStore(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"a.yaml": "a: 1\n"})
	older := srv.Head()
	srv.Commit(map[string]string{"a.yaml": "a: 2\n"}, nil, "two")
	ctx := context.Background()
	for _, branches := range []bool{false, true} {
		r := open(t, srv)
		read := func() gitsync.Snapshot {
			t.Helper()
			if branches {
				snaps, err := r.Branches(ctx, "main")
				require.NoError(t, err)
				return snaps["main"]
			}
			snap, err := r.Snapshot(ctx)
			require.NoError(t, err)
			return snap
		}
		newer := srv.Head()
		require.Equal(t, newer, read().Commit())
		srv.SetRef("main", older)
		snap := read()
		require.Equal(t, older, snap.Commit(), "branches=%v", branches)
		b, err := snap.ReadFile("a.yaml")
		require.NoError(t, err)
		require.Equal(t, "a: 1\n", string(b))
		srv.SetRef("main", newer)
	}
}
