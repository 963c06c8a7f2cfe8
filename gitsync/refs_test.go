package gitsync_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/stretchr/testify/require"
)

// Branches reads every named branch and every one under a prefix as the server has them after
// each change: a ref moved, one added, one deleted, a named branch that appears and goes away.
// After the first call it lists the server's refs and asks only for those that moved; what it
// returns must be the server's all the same.
func TestBranchesFollowTheServer(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"README.md": "people\n"})
	srv.SeedBranches(map[string]map[string][]byte{
		"gitbroker/inventory/a": {"inventory/a.yaml": []byte("a: 1\n")},
		"gitbroker/inventory/b": {"inventory/b.yaml": []byte("b: 1\n")},
	})
	r := open(t, srv)
	ctx := context.Background()
	check := func(step string, want map[string]string) {
		t.Helper()
		snaps, err := r.Branches(ctx, "main", "gitbroker/status", "gitbroker/inventory/")
		require.NoError(t, err, step)
		got := map[string]string{}
		for name, snap := range snaps {
			require.Equal(t, srv.On(name).Head(), snap.Commit(), "%s: %s", step, name)
			file := "README.md"
			if strings.HasPrefix(name, "gitbroker/inventory/") {
				files, err := snap.Files("inventory")
				require.NoError(t, err, "%s: %s", step, name)
				require.Len(t, files, 1, "%s: %s", step, name)
				for _, b := range files {
					got[name] = string(b)
				}
				continue
			} else if name == "gitbroker/status" {
				file = "status/jobs/default/j.yaml"
			}
			b, err := snap.ReadFile(file)
			require.NoError(t, err, "%s: %s", step, name)
			got[name] = string(b)
		}
		require.Equal(t, want, got, step)
	}
	check("first", map[string]string{"main": "people\n", "gitbroker/inventory/a": "a: 1\n", "gitbroker/inventory/b": "b: 1\n"})
	check("unchanged", map[string]string{"main": "people\n", "gitbroker/inventory/a": "a: 1\n", "gitbroker/inventory/b": "b: 1\n"})

	srv.On("gitbroker/inventory/a").Commit(map[string]string{"inventory/a.yaml": "a: 2\n"}, nil, "a moves")
	srv.On("gitbroker/inventory/c").Commit(map[string]string{"inventory/c.yaml": "c: 1\n"}, nil, "c is new")
	srv.SetRef("gitbroker/inventory/b", "")
	srv.On("gitbroker/status").Commit(map[string]string{"status/jobs/default/j.yaml": "done\n"}, nil, "a record")
	check("moved, added, deleted", map[string]string{"main": "people\n", "gitbroker/inventory/a": "a: 2\n",
		"gitbroker/inventory/c": "c: 1\n", "gitbroker/status": "done\n"})

	// Refs set back to commits the store holds (a replay, a rollback) need no objects.
	first := srv.On("gitbroker/inventory/a").Log()
	srv.SetRef("gitbroker/inventory/c", srv.On("gitbroker/inventory/a").Head())
	srv.SetRef("gitbroker/inventory/a", first[len(first)-1].Hash)
	srv.SetRef("gitbroker/status", "")
	check("set back", map[string]string{"main": "people\n", "gitbroker/inventory/a": "a: 1\n", "gitbroker/inventory/c": "a: 2\n"})
}

// The later fetches of Branches keep the fetch limit.
func TestBranchesKeepTheFetchLimit(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"README.md": "people\n"})
	srv.On("gitbroker/inventory/a").Commit(map[string]string{"inventory/a.yaml": "a: 1\n"}, nil, "small")
	r := open(t, srv, gitsync.WithLimits(16<<10, 0))
	ctx := context.Background()
	_, err := r.Branches(ctx, "main", "gitbroker/inventory/")
	require.NoError(t, err)
	srv.On("gitbroker/inventory/a").Commit(map[string]string{"inventory/a.yaml": randomText(64 << 10)}, nil, "large")
	// The ref too large to fetch is left out and named; the others are read.
	snaps, err := r.Branches(ctx, "main", "gitbroker/inventory/")
	require.NoError(t, err)
	require.Contains(t, snaps, "main")
	require.ErrorIs(t, r.Oversized()["gitbroker/inventory/a"], gitsync.ErrTooLarge)
}

// OtherBranches lists the people's branches, not the writers' refs, sorted and bounded.
func TestOtherBranches(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"a": "1"})
	for _, b := range []string{"release", "feature/x", "gitbroker/rendered", "gitbroker/inventory/edge-a"} {
		srv.On(b).Commit(map[string]string{"b": b}, nil, b)
	}
	r, err := gitsync.New(srv.URL(), "mian")
	require.NoError(t, err)
	names, more, err := r.OtherBranches(context.Background(), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"feature/x", "main", "release"}, names)
	require.Zero(t, more)
	names, more, err = r.OtherBranches(context.Background(), 2)
	require.NoError(t, err)
	require.Equal(t, []string{"feature/x", "main"}, names)
	require.Equal(t, 1, more)
}
