package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/notify"
)

// The daemon runs the loop with what surrounds it on a node: the devices found are pushed and the
// renderer nudged with that push's commit, Akri's registration socket is served while it runs,
// and everything stops when its context ends.
func TestDaemonNudgesAfterEachPushAndStops(t *testing.T) {
	srv, _ := newGitFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	nudges := make(chan notify.Generic, 10)
	renderer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var g notify.Generic
		if json.Unmarshal(b, &g) == nil && r.Header.Get(notify.HeaderSignature) == notify.SignedHeader([]byte("s3cret"), b) {
			nudges <- g
		}
	}))
	defer renderer.Close()
	sockets := t.TempDir()
	own, err := gitsync.New(srv.URL(), api.InventoryBranch("edge-a"), gitsync.WithBackoff(quick), gitsync.WithCreateBranch())
	require.NoError(t, err)
	var d *agent.Daemon
	d, err = agent.NewDaemon(agent.DaemonOptions{
		Options: agent.Options{Node: "edge-a", Store: own, Configurations: gitStore(t, srv, quick), Interval: time.Hour,
			SharedGracePeriod: time.Minute, Log: logr.Discard()},
		Builtins:        agent.BuiltinOptions{DebugEcho: true},
		RegistrationDir: sockets,
		Nudge:           &notify.Nudge{URL: renderer.URL, Secret: []byte("s3cret")},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	select {
	case g := <-nudges:
		require.Equal(t, []string{"refs/heads/" + api.InventoryBranch("edge-a")}, g.Refs)
		require.Equal(t, srv.On(api.InventoryBranch("edge-a")).Head(), g.Commit, "the nudge names the commit that landed")
	case <-time.After(30 * time.Second):
		t.Fatal("no nudge after the first push")
	}
	_, err = os.Stat(filepath.Join(sockets, agent.RegistrationSocketName))
	require.NoError(t, err, "Akri's registration socket is served while the daemon runs")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "a stop is not an error")
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop")
	}
}

// After a push of its inventory the agent reads its shares again within seconds, not an
// interval later: the render of that push gives the shares of a device it just reported.
func TestAgentReadsItsSharesSoonAfterItsPush(t *testing.T) {
	srv, _ := newGitFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	own, err := gitsync.New(srv.URL(), api.InventoryBranch("edge-a"), gitsync.WithBackoff(quick), gitsync.WithCreateBranch())
	require.NoError(t, err)
	reads := make(chan time.Time, 10)
	a, err := agent.New(agent.Options{Node: "edge-a", Store: own, Configurations: gitStore(t, srv, quick), Interval: time.Hour,
		SharedGracePeriod: time.Minute, Log: logr.Discard(), Devices: &sink{},
		Handlers: agent.Builtin{"debugEcho": agent.DebugEcho{Shared: true}},
		Shares: func(context.Context) (map[string]int, error) {
			reads <- time.Now()
			return map[string]int{}, nil
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	first := <-reads // the first cycle, which pushes
	select {
	case next := <-reads:
		require.Less(t, next.Sub(first), time.Minute, "read again long before the interval")
		require.NotEmpty(t, srv.On(api.InventoryBranch("edge-a")).Head(), "after the push")
	case <-time.After(30 * time.Second):
		t.Fatal("the shares were not read again after the push")
	}
}
