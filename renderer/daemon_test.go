package renderer

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/notify"
	"github.com/gitbroker/gitbroker/verify"
)

// daemonFixture is a render daemon of the demo repository on the real git server, waking only
// on notifications (its interval is an hour), told by the server's push webhook as a git host
// tells it, and telling a Flux Receiver (a recording server) what moved.
type daemonFixture struct {
	d      *Daemon
	hook   *notify.Metrics
	told   chan notify.Generic
	cancel context.CancelFunc
	done   chan struct{}
}

func startDaemon(t *testing.T, url string, webhook func(hookURL string)) *daemonFixture {
	t.Helper()
	f := &daemonFixture{told: make(chan notify.Generic, 100), done: make(chan struct{})}
	flux := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var g notify.Generic
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &g) == nil {
			f.told <- g
		}
	}))
	t.Cleanup(flux.Close)
	reg := prometheus.NewRegistry()
	f.d = &Daemon{Renderer: unsigned(t, url), Interval: time.Hour, Log: logr.Discard(), Metrics: NewMetrics(reg),
		Webhook: true, RepoURL: url, RenderedBranch: verify.RenderedBranch,
		Targets: []notify.Target{&notify.FluxReceiver{URL: flux.URL, Name: "gitbroker", Namespace: "flux-system", Token: []byte("t")}}}
	f.hook = notify.NewMetrics(reg)
	hook := httptest.NewServer(&notify.Hook{HostSecret: []byte("host"), Wake: f.d.Wake, Log: logr.Discard(), Metrics: f.hook,
		Own: func(ref string) bool { return api.RendererBranch(ref, verify.RenderedBranch) }})
	t.Cleanup(hook.Close)
	if webhook != nil {
		webhook(hook.URL)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.done)
		f.d.Run(ctx)
	}()
	t.Cleanup(f.stop)
	return f
}

func (f *daemonFixture) stop() {
	f.cancel()
	<-f.done
}

func (f *daemonFixture) waitRenders(t *testing.T, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return f.d.Renders() >= n }, 30*time.Second, 20*time.Millisecond)
}

// A push to a node's ref reaches the rendered branch on the host's webhook, not the interval
// (an hour here), and Flux's Receiver is told the branch that moved; the renderer's own pushes,
// which the host reports too, wake nothing.
func TestDaemonRendersOnAPushWebhook(t *testing.T) {
	srv := demoServer(t)
	f := startDaemon(t, srv.URL(), func(hookURL string) { srv.SendWebhooks(hookURL, []byte("host")) })
	f.waitRenders(t, 1)
	rendered := srv.On(verify.RenderedBranch)
	first := rendered.Head()
	require.NotEmpty(t, first)
	g := <-f.told
	require.Equal(t, []string{verify.RenderedBranch}, g.Branches)
	require.Equal(t, first, g.Commit)

	start := time.Now()
	nodeCommit(t, srv, "edge-b", "foo0", "foo9")
	require.Eventually(t, func() bool { return rendered.Head() != first }, 30*time.Second, 20*time.Millisecond,
		"the node's push renders on the webhook, not the hour's interval")
	t.Logf("node push to rendered commit: %s", time.Since(start).Round(time.Millisecond))
	select {
	case g = <-f.told:
	case <-time.After(10 * time.Second):
		t.Fatal("Flux's Receiver was not told")
	}
	require.Equal(t, rendered.Head(), g.Commit)
	require.Equal(t, []string{"refs/heads/" + verify.RenderedBranch}, g.Refs)
	require.GreaterOrEqual(t, testutil.ToFloat64(f.d.Metrics.wakes.WithLabelValues("notification")), 1.0)
	// The renderer's own pushes came back as webhooks and were ignored, waking nothing more.
	// (The node's render is counted once it has also published: after the rendered head moves.)
	f.waitRenders(t, 2)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(f.hook.Counter(notify.ResultIgnored)) >= 2
	}, 10*time.Second, 20*time.Millisecond)
	renders := f.d.Renders()
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, renders, f.d.Renders(), "no render after the last push: nothing woke the renderer")
	require.Equal(t, 1.0, testutil.ToFloat64(f.d.Metrics.triggers.WithLabelValues("webhook")))
	require.Equal(t, 1.0, testutil.ToFloat64(f.d.Metrics.triggers.WithLabelValues("flux-receiver")))
}

// A burst of notifications (a thousand agents' nudges at once, forged or replayed ones
// among them) during a render costs one more render: the one under way, and one after it. The
// render is held at its push until the whole burst has arrived, so the burst lands inside it
// however slowly a loaded machine starts a thousand goroutines (without the hold, a burst
// that outlasted a render was counted as one, and a third render failed the test).
func TestDaemonCoalescesNotifications(t *testing.T) {
	srv := demoServer(t)
	f := startDaemon(t, srv.URL(), nil)
	f.waitRenders(t, 1)
	before := f.d.Renders()
	entered, release := make(chan struct{}), make(chan struct{})
	srv.BeforeNextPush(func() { close(entered); <-release })
	nodeCommit(t, srv, "edge-b", "foo0", "foo9") // so that the render under way pushes
	f.d.Wake("nudge")
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the woken render never pushed")
	}
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() { f.d.Wake("nudge") })
	}
	wg.Wait()
	close(release)
	f.waitRenders(t, before+2)
	time.Sleep(2 * time.Second)
	require.Equal(t, int64(2), f.d.Renders()-before, "the render under way and one after it")
}

// Without any notification the daemon still renders every interval (a host that sends no
// webhooks works at interval speed).
func TestDaemonRendersOnItsIntervalWithoutNotifications(t *testing.T) {
	srv := demoServer(t)
	reg := prometheus.NewRegistry()
	d := &Daemon{Renderer: unsigned(t, srv.URL()), Interval: 300 * time.Millisecond, Log: logr.Discard(), Metrics: NewMetrics(reg)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return d.Renders() >= 3 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"interval"}, d.Triggers())
	require.Zero(t, testutil.ToFloat64(d.Metrics.wakes.WithLabelValues("notification")))
}
