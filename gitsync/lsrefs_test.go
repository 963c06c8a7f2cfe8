package gitsync_test

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// A read of a branch that has not moved asks for that branch alone (protocol v2 ls-refs) and
// fetches nothing: it costs the same bytes in a repository of 5 refs as in one of 2,000, where
// protocol v0's advertisement of every ref grew with them. A branch that moved is fetched, and
// one that is gone is gone.
func TestAQuietReadCostsTheSameAtAnyNumberOfRefs(t *testing.T) {
	quietBytes := map[int]int64{}
	for _, refs := range []int{5, 2000} {
		srv := gitsynctest.NewServer(t, "main", map[string]string{"README.md": "x\n"}, gitsynctest.WithHostCounts())
		branches := map[string]map[string][]byte{}
		for i := range refs - 1 {
			branches[fmt.Sprintf("gitbroker/inventory/edge-%04d", i)] = map[string][]byte{fmt.Sprintf("inventory/edge-%04d.yaml", i): []byte("devices: []\n")}
		}
		srv.SeedBranches(branches)
		r, err := gitsync.New(srv.URL(), "main", gitsync.WithLogger(logr.Discard()))
		require.NoError(t, err)
		first, err := r.Snapshot(t.Context())
		require.NoError(t, err)
		before := srv.HostCounts()
		again, err := r.Snapshot(t.Context())
		require.NoError(t, err)
		after := srv.HostCounts()
		require.Equal(t, first.Commit(), again.Commit())
		require.EqualValues(t, 1, r.QuietFetches(), "%d refs: the quiet read fetched", refs)
		require.EqualValues(t, 1, after.Reads-before.Reads, "one read")
		quietBytes[refs] = after.BytesServed - before.BytesServed
		t.Logf("%d refs: the first read served %d bytes, a quiet one %d", refs, before.BytesServed, quietBytes[refs])

		moved := srv.Commit(map[string]string{"README.md": "y\n"}, nil, "a change")
		snap, err := r.Snapshot(t.Context())
		require.NoError(t, err)
		require.Equal(t, moved, snap.Commit(), "a moved branch is fetched")
		require.EqualValues(t, 1, r.QuietFetches())

		w, err := gitsync.New(srv.URL(), "gitbroker/inventory/edge-0001", gitsync.WithLogger(logr.Discard()))
		require.NoError(t, err)
		_, err = w.Snapshot(t.Context())
		require.NoError(t, err)
		srv.SetRef("gitbroker/inventory/edge-0001", "")
		_, err = w.Snapshot(t.Context())
		require.ErrorIs(t, err, gitsync.ErrNoBranch, "a branch gone is gone")
		require.EqualValues(t, 1, w.QuietFetches())
	}
	require.InDelta(t, quietBytes[5], quietBytes[2000], 64, "a quiet read costs the same whatever the repository holds")
}
