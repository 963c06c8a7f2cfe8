package agent_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/verify"
)

// Fifty agents in one process each push twenty inventory changes at once, each to its own
// ref gitbroker/inventory/<node>, reading the Configurations from main. Every update must land
// exactly once, no commit may touch another agent's file, and every final file must equal its
// agent's last state. GITBROKER_AGENTS and GITBROKER_UPDATES change the size.
func TestConcurrentAgents(t *testing.T) {
	agents, updates := envInt("GITBROKER_AGENTS", 50), envInt("GITBROKER_UPDATES", 20)
	if testing.Short() {
		agents, updates = 10, 5
	}
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/echo.yaml": echoConfig})
	backoff := gitsync.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second, MaxAttempts: 1000, MaxElapsed: 10 * time.Minute}

	type result struct {
		landed    []time.Duration
		conflicts int
		retries   int
		last      string
		err       error
	}
	results := make([]result, agents)
	var start, wg sync.WaitGroup
	start.Add(1)
	begin := time.Now()
	for i := 0; i < agents; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res := &results[i]
			node := fmt.Sprintf("edge-%02d", i)
			repo, err := gitsync.New(srv.URL(), verify.InventoryBranch(node), gitsync.WithBackoff(backoff), gitsync.WithCreateBranch())
			if err != nil {
				res.err = err
				return
			}
			source, err := gitsync.New(srv.URL(), "main", gitsync.WithBackoff(backoff))
			if err != nil {
				res.err = err
				return
			}
			echo := &scripted{}
			a, err := agent.New(agent.Options{
				Node: node, Store: repo, Configurations: source, Handlers: agent.Builtin{"debugEcho": echo}, Log: logr.Discard(),
				SharedGracePeriod: 0, LocalGracePeriod: 0,
			})
			if err != nil {
				res.err = err
				return
			}
			start.Wait()
			for u := 0; u < updates; u++ {
				// Each update is a new device list: generation u of this node.
				echo.set(device(fmt.Sprintf("%s-gen-%02d", node, u), true))
				t0 := time.Now()
				out, err := a.Sync(context.Background())
				if err != nil {
					res.err = fmt.Errorf("%s update %d: %w", node, u, err)
					return
				}
				if out.Commit == "" {
					res.err = fmt.Errorf("%s update %d: nothing was committed", node, u)
					return
				}
				res.landed = append(res.landed, time.Since(t0))
				res.conflicts += out.Result.Conflicts
				res.retries += out.Result.Retries
			}
			res.last = fmt.Sprintf("%s-gen-%02d", node, updates-1)
		}(i)
	}
	start.Done()
	wg.Wait()
	elapsed := time.Since(begin)

	var all []time.Duration
	conflicts, retries := 0, 0
	for _, r := range results {
		require.NoError(t, r.err)
		all = append(all, r.landed...)
		conflicts += r.conflicts
		retries += r.retries
	}
	require.Len(t, all, agents*updates)

	// Every final file is its agent's last state.
	for i, r := range results {
		node := fmt.Sprintf("edge-%02d", i)
		got, ok := srv.On(verify.InventoryBranch(node)).File(api.InventoryPath(node))
		require.True(t, ok, node)
		require.Equal(t, map[string][]string{"default/akri-debug-echo": {r.last}}, idsOf(t, node, got), node)
	}

	// Every update is one commit on the node's own ref that touches only its file; main is
	// never written.
	require.Len(t, srv.Log(), 1, "only the seed is on main")
	perNode := map[string]int{}
	for i := 0; i < agents; i++ {
		node := fmt.Sprintf("edge-%02d", i)
		for _, e := range srv.On(verify.InventoryBranch(node)).Log() {
			require.Equal(t, []string{api.InventoryPath(node)}, e.Paths, e.Subject)
			require.Contains(t, e.Body, "Gitbroker-Node: "+node, "commit %s", e.Hash)
			perNode[node]++
		}
	}
	landed := 0
	for i := 0; i < agents; i++ {
		node := fmt.Sprintf("edge-%02d", i)
		require.Equal(t, updates, perNode[node], node)
		landed += perNode[node]
	}

	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) time.Duration { return all[int(p*float64(len(all)-1))] }
	t.Logf("%d agents x %d updates: %d/%d landed in %s; time to land p50 %s, p99 %s, max %s; %d conflicts (recomputed), %d retries after errors",
		agents, updates, landed, agents*updates, elapsed.Round(time.Millisecond),
		pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond),
		conflicts, retries)
}

func idsOf(t *testing.T, node, inventory string) map[string][]string {
	t.Helper()
	inv, errs := api.ParseInventory(api.InventoryPath(node), []byte(inventory), "default")
	require.Empty(t, errs)
	out := map[string][]string{}
	for _, ic := range inv.Spec.Configurations {
		for _, d := range ic.Devices {
			out[ic.Namespace+"/"+ic.Name] = append(out[ic.Namespace+"/"+ic.Name], d.ID)
		}
	}
	return out
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
