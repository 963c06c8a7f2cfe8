package agent_test

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// A quiet agent cycle (nothing discovered changed, no Configuration changed) reads each branch
// it reads with one small listing of that branch and pushes nothing, so it costs the git host
// the same bytes in a repository of 10 refs as in one of 2,000 (protocol v0's advertisement of
// every ref grew with them: 2.6 MB a quiet cycle at 10,260 refs).
func TestAQuietAgentCycleCostsTheSameAtAnyNumberOfRefs(t *testing.T) {
	cycle := map[int]gitsynctest.HostCounts{}
	for _, refs := range []int{10, 2000} {
		srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/echo.yaml": echoConfig}, gitsynctest.WithHostCounts())
		branches := map[string]map[string][]byte{}
		for i := range refs - 2 {
			node := fmt.Sprintf("edge-%04d", i)
			branches[api.InventoryBranch(node)] = map[string][]byte{api.InventoryPath(node): []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: Inventory\n")}
		}
		srv.SeedBranches(branches)
		store, err := gitsync.New(srv.URL(), api.InventoryBranch("edge-a"), gitsync.WithCreateBranch(), gitsync.WithLogger(logr.Discard()))
		require.NoError(t, err)
		source, err := gitsync.New(srv.URL(), "main", gitsync.WithLogger(logr.Discard()))
		require.NoError(t, err)
		a, err := agent.New(agent.Options{Node: "edge-a", Store: store, Configurations: source, Log: logr.Discard(),
			Handlers: agent.Builtins(agent.BuiltinOptions{DebugEcho: true, DebugEchoShared: false})})
		require.NoError(t, err)
		_, err = a.Sync(t.Context()) // the first cycle writes the inventory
		require.NoError(t, err)
		_, err = a.Sync(t.Context())
		require.NoError(t, err)
		before := srv.HostCounts()
		_, err = a.Sync(t.Context())
		require.NoError(t, err)
		after := srv.HostCounts()
		cycle[refs] = gitsynctest.HostCounts{Reads: after.Reads - before.Reads, Pushes: after.Pushes - before.Pushes, BytesServed: after.BytesServed - before.BytesServed}
		t.Logf("%d refs: a quiet cycle made %d reads and %d pushes, %d bytes served", refs, cycle[refs].Reads, cycle[refs].Pushes, cycle[refs].BytesServed)
		require.Zero(t, cycle[refs].Pushes, "a quiet cycle pushes nothing")
		require.Positive(t, cycle[refs].Reads)
	}
	require.Equal(t, cycle[10].Reads, cycle[2000].Reads)
	require.InDelta(t, cycle[10].BytesServed, cycle[2000].BytesServed, 256, "a quiet cycle costs the same bytes whatever the repository holds")
}
