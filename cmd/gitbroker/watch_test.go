package main

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
	"github.com/gitbroker/gitbroker/verify"
)

// nodeTip is the tip of node's ref that the rendered branch's head accepted.
func nodeTip(t *testing.T, srv *gitsynctest.Server, node string) string {
	meta, _ := srv.On(verify.RenderedBranch).File(render.MetadataPath)
	return render.ParseMetadata([]byte(meta)).Writers[verify.InventoryBranch(node)]
}

// countingStore counts the writes in flight across replicas, to prove
// that two never write at once.
type countingStore struct {
	gitsync.Store
	inFlight, maxInFlight *atomic.Int32
	writes                atomic.Int32
}

func (c *countingStore) Update(ctx context.Context, fn gitsync.UpdateFunc) (gitsync.Result, error) {
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for {
		m := c.maxInFlight.Load()
		if n <= m || c.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	c.writes.Add(1)
	return c.Store.Update(ctx, fn)
}

// Two replicas of the render daemon share a Lease: only the leader renders;
// when it stops, the other takes over.
func TestRenderDaemonLeaderElection(t *testing.T) {
	srv := demoServer(t)
	client := fake.NewClientset()
	var inFlight, maxInFlight atomic.Int32
	opts := &watchOptions{LeaderNS: "gitbroker-system", LeaderID: "gitbroker-renderer"}
	opts.Leader.Enable, opts.Leader.ReleaseOnCancel = true, true
	opts.Leader.LeaseDuration, opts.Leader.RenewDeadline, opts.Leader.RetryPeriod = 4*time.Second, 3*time.Second, 100*time.Millisecond

	type replica struct {
		store  *countingStore
		daemon *renderer.Daemon
		cancel context.CancelFunc
		done   chan error
	}
	start := func() *replica {
		r := newLayout(t, srv.URL()).renderer(nil)
		store := &countingStore{Store: r.Store, inFlight: &inFlight, maxInFlight: &maxInFlight}
		r.Store = store
		d := &renderer.Daemon{
			Renderer: r,
			Interval: 50 * time.Millisecond, Log: logr.Discard(), Metrics: renderer.NewMetrics(prometheus.NewRegistry()),
		}
		ctx, cancel := context.WithCancel(context.Background())
		rep := &replica{store: store, daemon: d, cancel: cancel, done: make(chan error, 1)}
		go func() {
			rep.done <- d.Lead(ctx, client, renderer.Election{Options: opts.Leader, Namespace: opts.LeaderNS, Name: opts.LeaderID})
		}()
		return rep
	}
	a := start()
	require.Eventually(t, func() bool { return a.daemon.Renders() > 0 }, 20*time.Second, 10*time.Millisecond)
	b := start()
	// While the leader renders several more times, the standby renders
	// nothing.
	before := a.daemon.Renders()
	require.Eventually(t, func() bool { return a.daemon.Renders() >= before+5 }, 20*time.Second, 10*time.Millisecond)
	require.Zero(t, b.daemon.Renders(), "the standby replica does not render")

	// The leader stops (SIGTERM, releasing the Lease); the standby takes
	// over and renders what comes next, from the commit the leader pushed last, which the Lease
	// kept.
	a.cancel()
	require.NoError(t, <-a.done)
	lease, err := client.CoordinationV1().Leases("gitbroker-system").Get(context.Background(), "gitbroker-renderer", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, srv.On(verify.RenderedBranch).Head(), lease.Annotations[renderer.AnnotationLastPushed])
	change := nodeCommit(t, srv, "edge-b", "foo0", "foo5")
	require.Eventually(t, func() bool {
		return nodeTip(t, srv, "edge-b") == change
	}, 20*time.Second, 10*time.Millisecond, "the new leader renders the change")
	// The render is counted after its push returns, which is after the
	// server has the commit.
	require.Eventually(t, func() bool { return b.daemon.Renders() > 0 }, 20*time.Second, 10*time.Millisecond, "the new leader counts its render")
	b.cancel()
	require.NoError(t, <-b.done)
	require.Equal(t, int32(1), maxInFlight.Load(), "two replicas never wrote at once")
}

// The git server goes away and comes back: the daemon reports not ready,
// then renders again, and no source commit is rendered twice.
func TestRenderDaemonSurvivesServerOutage(t *testing.T) {
	srv := demoServer(t)
	rendered := srv.On(verify.RenderedBranch)
	r := newLayout(t, srv.URL(), gitsync.WithBackoff(gitsync.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 3, MaxElapsed: time.Second})).renderer(nil)
	d := &renderer.Daemon{
		Renderer: r,
		Interval: 30 * time.Millisecond, Log: logr.Discard(), Metrics: renderer.NewMetrics(prometheus.NewRegistry()),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return d.Ready() && len(rendered.Log()) == 1 }, 20*time.Second, 10*time.Millisecond)

	prev := "foo0"
	for i, dev := range []string{"foo1", "foo2", "foo3"} {
		change := nodeCommit(t, srv, "edge-b", prev, dev)
		prev = dev
		if i == 1 {
			srv.SetDown(true)
			require.Eventually(t, func() bool { return !d.Ready() }, 20*time.Second, 5*time.Millisecond, "a failed render shows as not ready")
			srv.SetDown(false)
		}
		require.Eventually(t, func() bool {
			return nodeTip(t, srv, "edge-b") == change
		}, 20*time.Second, 10*time.Millisecond)
	}
	sources := map[string]int{}
	for _, e := range rendered.Log() {
		meta, _ := rendered.FileAt(e.Hash, render.MetadataPath)
		if s := render.ParseMetadata([]byte(meta)).Writers[verify.InventoryBranch("edge-b")]; s != "" {
			sources[s]++
			require.Equal(t, 1, sources[s], "edge-b's tip %s rendered twice", s)
		}
	}
	require.Len(t, sources, 4)
	require.True(t, d.Ready())
}

// The daemon as a process: probes, metrics (including the time from a
// source commit to its pushed render), invalid inputs visible, SIGTERM.
func TestRenderDaemonProcess(t *testing.T) {
	srv := demoServer(t)
	d := startDaemon(t, "renderer started", "render", "--git", srv.URL(), "--watch", "--interval", "100ms",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	started, get := d, d.get
	require.Eventually(t, func() bool { return len(srv.On(verify.RenderedBranch).Log()) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { code, _ := get(started.HealthAddr, "/readyz"); return code == http.StatusOK }, 30*time.Second, 10*time.Millisecond)

	// Nodes' commits arrive; each is rendered and pushed.
	var latencies []time.Duration
	prev := "foo0"
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		dev := "foo" + strconv.Itoa(10+i)
		change := nodeCommit(t, srv, "edge-b", prev, dev)
		prev = dev
		require.Eventually(t, func() bool {
			return nodeTip(t, srv, "edge-b") == change
		}, 30*time.Second, 5*time.Millisecond)
		latencies = append(latencies, time.Since(t0))
	}
	// A render is counted after its push returns, which is after the
	// server has the commit.
	committed := regexp.MustCompile(`gitbroker_renderer_renders_total\{result="committed"\} [6-9]`)
	var metrics string
	require.Eventually(t, func() bool {
		_, metrics = get(started.MetricsAddr, "/metrics")
		return committed.MatchString(metrics)
	}, 30*time.Second, 10*time.Millisecond, "six renders committed")
	require.Contains(t, metrics, "gitbroker_renderer_source_to_push_seconds_count")
	sum := regexp.MustCompile(`gitbroker_renderer_source_to_push_seconds_sum ([0-9.e+-]+)`).FindStringSubmatch(metrics)
	count := regexp.MustCompile(`gitbroker_renderer_source_to_push_seconds_count ([0-9]+)`).FindStringSubmatch(metrics)
	require.Len(t, sum, 2)
	total, err := strconv.ParseFloat(sum[1], 64)
	require.NoError(t, err)
	n, err := strconv.Atoi(count[1])
	require.NoError(t, err)
	t.Logf("source commit to pushed render with --interval 100ms: %v (the metric's mean over %d renders, the first including the daemon's start: %.3fs)",
		latencies, n, total/float64(n))

	// An invalid Configuration shows in metrics and logs, not only in an exit code.
	cfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	srv.Commit(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "image:", "imagee:", 1)}, nil, "typo")
	require.Eventually(t, func() bool {
		_, m := get(started.MetricsAddr, "/metrics")
		return strings.Contains(m, "gitbroker_renderer_invalid_inputs 1")
	}, 30*time.Second, 20*time.Millisecond)
	// The gauge is set before the line is logged: wait for the line too.
	require.Eventually(t, func() bool {
		return strings.Contains(d.stderr.String(), "invalid inputs; their previous output is kept")
	}, 30*time.Second, 20*time.Millisecond, "the invalid input logged")
	require.Contains(t, d.stderr.String(), "imagee: unknown field")
	d.stop("renderer stopped")
}
