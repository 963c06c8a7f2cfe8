package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/runtime/leaderelection"
	"github.com/fluxcd/pkg/runtime/logger"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	le "k8s.io/client-go/tools/leaderelection"

	"github.com/gitbroker/gitbroker/cmd/internal/cli"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/verify"
)

// Flag names of the render daemon.
const (
	flagWatch                   = "watch"
	flagWatchInterval           = "interval"
	flagLeaderElectionNamespace = "leader-election-namespace"
	flagLeaderElectionID        = "leader-election-id"
)

// watchOptions are render's daemon flags.
type watchOptions struct {
	Watch     bool
	Interval  time.Duration
	Endpoints cli.EndpointOptions
	Log       logger.Options
	Leader    leaderelection.Options
	// CycleTimeout bounds one render of the daemon.
	CycleTimeout time.Duration
	LeaderNS     string
	LeaderID     string
	Kube         kubeOptions
}

func (o *watchOptions) BindFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.BoolVar(&o.Watch, flagWatch, false, "With --git, keep rendering every --interval as a daemon (probes, metrics, leader election).")
	fs.DurationVar(&o.Interval, flagWatchInterval, 30*time.Second, "With --watch, time between renders.")
	o.Endpoints.BindFlags(fs)
	o.Log.BindFlags(fs)
	o.Leader.BindFlags(fs)
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "gitbroker-system"
	}
	fs.StringVar(&o.LeaderNS, flagLeaderElectionNamespace, ns, "Namespace of the leader election Lease; $POD_NAMESPACE sets the default.")
	fs.StringVar(&o.LeaderID, flagLeaderElectionID, "gitbroker-renderer", "Name of the leader election Lease.")
	o.Kube.BindFlags(cmd)
}

// renderMetrics are the render daemon's Prometheus metrics.
type renderMetrics struct {
	renders      *prometheus.CounterVec
	invalid      prometheus.Gauge
	refused      prometheus.Gauge
	heldNodes    prometheus.Gauge
	untrusted    prometheus.Gauge
	unpublished  prometheus.Gauge
	sourceToPush prometheus.Histogram
	duration     prometheus.Histogram
	leader       prometheus.Gauge
}

func newRenderMetrics(reg prometheus.Registerer) *renderMetrics {
	m := &renderMetrics{
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitbroker_renderer_renders_total",
			Help: "Renders by result: committed, unchanged, refused (a safety rule) or failed (git).",
		}, []string{"result"}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_renderer_invalid_inputs",
			Help: "Invalid input files in the last render; their previous output is kept.",
		}),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_renderer_refused",
			Help: "1 while the last render was refused by a safety rule (deletion budget, empty output).",
		}),
		heldNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_renderer_held_nodes",
			Help: "Nodes whose part the last render kept as it was, because their inventory alone would have removed more than maxDeletionPercent of their objects.",
		}),
		untrusted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_renderer_untrusted_inputs",
			Help: "Inputs the last render refused for who wrote them (a forged, replayed or rolled-back tip, an unsigned source commit, a record of a Job it never rendered); each froze only its writer's part.",
		}),
		unpublished: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_renderer_unpublished",
			Help: "1 while publishing the last render's verified Configurations on gitbroker/configurations failed (the agents keep discovering with what was published before).",
		}),
		sourceToPush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gitbroker_renderer_source_to_push_seconds",
			Help:    "Time from a source commit to the pushed render of it.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gitbroker_renderer_render_duration_seconds",
			Help:    "Time of one render: fetch, render, commit and push.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_renderer_leader",
			Help: "1 while this replica holds the leader election Lease (or runs without election).",
		}),
	}
	reg.MustRegister(m.renders, m.invalid, m.refused, m.heldNodes, m.untrusted, m.unpublished, m.sourceToPush, m.duration, m.leader)
	return m
}

// renderDaemon renders the branch every interval while it leads.
type renderDaemon struct {
	r        *remoteRender
	interval time.Duration
	log      logr.Logger
	metrics  *renderMetrics
	// timeout bounds one render; 0 means none.
	timeout time.Duration
	// pushed, when set, keeps the commit the renderer pushed last where a next leader finds
	// it (the leader election Lease).
	pushed func(commit string)

	last          atomic.Int64
	ready         atomic.Bool
	renders       atomic.Int64
	lastBad       string
	lastHeld      string
	lastUntrusted string
}

// run renders until ctx ends.
func (d *renderDaemon) run(ctx context.Context) {
	d.metrics.leader.Set(1)
	defer d.metrics.leader.Set(0)
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		d.cycle(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *renderDaemon) cycle(ctx context.Context) {
	defer d.last.Store(time.Now().UnixNano())
	start := time.Now()
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	out, err := d.r.once(ctx)
	// Counted once its readiness is recorded, so a probe never sees a
	// render without its outcome.
	defer d.renders.Add(1)
	d.metrics.duration.Observe(time.Since(start).Seconds())
	if out.Result != nil {
		d.metrics.invalid.Set(float64(len(out.Result.Errors)))
		if msg := out.Result.Errors.Error(); len(out.Result.Errors) > 0 && msg != d.lastBad {
			d.log.Error(out.Result.Errors, "invalid inputs; their previous output is kept", "source", out.Source, "count", len(out.Result.Errors))
			d.lastBad = msg
		} else if len(out.Result.Errors) == 0 {
			d.lastBad = ""
		}
		held := out.Result.Held
		d.metrics.heldNodes.Set(float64(len(held)))
		if msg := strings.Join(held, "\n"); len(held) > 0 && msg != d.lastHeld {
			d.log.Error(errors.New(msg), "deletion budget: nodes held as they were; the rest rendered", "source", out.Source, "count", len(held))
		}
		d.lastHeld = strings.Join(held, "\n")
		untrusted := out.Result.Untrusted
		d.metrics.untrusted.Set(float64(len(untrusted)))
		if msg := strings.Join(untrusted, "\n"); len(untrusted) > 0 && msg != d.lastUntrusted {
			d.log.Error(errors.New(msg), "untrusted inputs: each writer's previous part is kept", "source", out.Source, "count", len(untrusted))
		}
		d.lastUntrusted = strings.Join(untrusted, "\n")
	}
	if d.pushed != nil && d.r.pushed != "" {
		d.pushed(d.r.pushed)
	}
	if out.Published != "" {
		d.log.Info("published the verified Configurations for the agents", "commit", out.Published, "branch", verify.ConfigurationsBranch, "source", out.Source)
	}
	d.metrics.unpublished.Set(0)
	if out.PublishErr != nil {
		d.metrics.unpublished.Set(1)
		d.log.Error(out.PublishErr, "the agents keep discovering with the Configurations published before; will retry")
	}
	d.metrics.refused.Set(0)
	switch {
	case isRefused(err):
		d.metrics.renders.WithLabelValues("refused").Inc()
		d.metrics.refused.Set(1)
		d.log.Error(err, "render refused by a safety rule; nothing was committed", "source", out.Source)
		d.ready.Store(true)
	case errors.Is(err, gitsync.ErrNoChanges):
		d.metrics.renders.WithLabelValues("unchanged").Inc()
		d.ready.Store(true)
	case err != nil:
		d.metrics.renders.WithLabelValues("failed").Inc()
		d.log.Error(err, "render failed; will retry")
		d.ready.Store(false)
	default:
		d.metrics.renders.WithLabelValues("committed").Inc()
		if !out.SourceTime.IsZero() {
			d.metrics.sourceToPush.Observe(time.Since(out.SourceTime).Seconds())
		}
		d.log.Info("render committed", "commit", out.Commit, "source", out.Source,
			"summary", out.Result.Plan.Summary.String(), "attempts", out.Push.Attempts, "folderSourcesMoved", out.Push.CompanionsMoved, "duration", time.Since(start).String())
		d.ready.Store(true)
	}
}

// lead runs f while this process holds the Lease, and returns when ctx
// ends or the lease is lost (the process should then exit, as Flux's
// controllers do, so two replicas never both push).
//
// The Lease also carries the rendered branch's commit the leader pushed last
// (AnnotationLastPushed): f is given what a previous leader left there.
func lead(ctx context.Context, client kubernetes.Interface, o *watchOptions, log logr.Logger, lock *pushedLease, f func(context.Context)) error {
	identity := lock.identity
	var led, lost atomic.Bool
	elector, err := le.NewLeaderElector(le.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.Leader.LeaseDuration,
		RenewDeadline:   o.Leader.RenewDeadline,
		RetryPeriod:     o.Leader.RetryPeriod,
		ReleaseOnCancel: o.Leader.ReleaseOnCancel,
		Name:            o.LeaderID,
		Callbacks: le.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				led.Store(true)
				log.Info("leading: rendering", "identity", identity, "lastPushed", lock.Found())
				f(ctx)
			},
			OnStoppedLeading: func() {
				if led.Load() && ctx.Err() == nil {
					lost.Store(true)
				}
			},
			OnNewLeader: func(id string) {
				if id != identity {
					log.Info("another replica leads; standing by", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	elector.Run(ctx)
	if lost.Load() {
		return errors.New("lost the leader election Lease")
	}
	return nil
}

// lead runs the daemon while it holds the leader election Lease, keeping the commit it pushed
// last in the Lease, and starting from the one a previous leader left there: a leader that
// starts holds no render in memory, and the branch must still descend from what was pushed.
func (d *renderDaemon) lead(ctx context.Context, client kubernetes.Interface, o *watchOptions) error {
	host, _ := os.Hostname()
	lock := &pushedLease{meta: metav1.ObjectMeta{Name: o.LeaderID, Namespace: o.LeaderNS}, client: client.CoordinationV1(),
		identity: host + "_" + rand.String(8)}
	d.pushed = lock.Pushed
	return lead(ctx, client, o, d.log, lock, func(ctx context.Context) {
		if d.r.pushed == "" {
			d.r.pushed = lock.Found()
		}
		d.run(ctx)
	})
}

// runRenderDaemon renders every interval, behind leader election when it
// is enabled, until SIGTERM.
func runRenderDaemon(cmd *cobra.Command, r *remoteRender, o *watchOptions) error {
	log := logger.NewLogger(o.Log)
	logger.SetLogger(log) // client-go's leader election logs through klog
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var client kubernetes.Interface
	if o.Leader.Enable {
		c, err := o.Kube.client()
		if err != nil {
			return exitf(exitInvalid, "%v", err)
		}
		client = c
	}
	reg := prometheus.NewRegistry()
	d := &renderDaemon{r: r, interval: o.Interval, log: log, metrics: newRenderMetrics(reg), timeout: o.CycleTimeout}
	started := time.Now()
	stall := 3*o.Interval + 5*time.Minute
	metricsAddr, healthAddr, err := cli.ServeEndpoints(ctx, log, o.Endpoints, reg, cli.Probes{
		Healthy: func() error {
			last := time.Unix(0, d.last.Load())
			if last.Before(started) {
				last = started
			}
			if d.renders.Load() > 0 && time.Since(last) > stall {
				return fmt.Errorf("no render has finished for %s", time.Since(last).Round(time.Second))
			}
			return nil
		},
		Ready: func() error {
			if d.renders.Load() > 0 && !d.ready.Load() {
				return errors.New("the last render failed")
			}
			return nil
		},
	})
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	log.Info("renderer started", "branch", r.branch, "interval", o.Interval.String(), "leaderElection", o.Leader.Enable,
		"metricsAddr", metricsAddr, "healthAddr", healthAddr)
	if client != nil {
		err = d.lead(ctx, client, o)
	} else {
		d.run(ctx)
	}
	log.Info("renderer stopped")
	if err != nil {
		return &exitError{Code: exitRefused, Err: err}
	}
	return nil
}
