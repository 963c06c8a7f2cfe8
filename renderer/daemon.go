package renderer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fluxcd/pkg/runtime/leaderelection"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	le "k8s.io/client-go/tools/leaderelection"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/notify"
	"github.com/gitbroker/gitbroker/verify"
)

// Metrics are the render daemon's Prometheus metrics.
type Metrics struct {
	renders      *prometheus.CounterVec
	invalid      prometheus.Gauge
	refused      prometheus.Gauge
	heldNodes    prometheus.Gauge
	untrusted    prometheus.Gauge
	unpublished  prometheus.Gauge
	sourceToPush prometheus.Histogram
	duration     prometheus.Histogram
	leader       prometheus.Gauge
	wakes        *prometheus.CounterVec
	triggers     *prometheus.GaugeVec
	told         *prometheus.CounterVec
	budgetWaits  prometheus.Counter
}

func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
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
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitbroker_renderer_wakes_total",
			Help: "Renders started, by what started them: interval, or notification (a push webhook or an agent's nudge; a burst coalesces into one).",
		}, []string{"trigger"}),
		triggers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitbroker_renderer_trigger_active",
			Help: "1 for each way this renderer is woken or tells others: interval, webhook (push notifications in), flux-receiver and argocd-webhook (told after each render that lands).",
		}, []string{"trigger"}),
		told: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitbroker_renderer_gitops_notifications_total",
			Help: "Notifications sent to the GitOps tools after a render landed, by target and result (sent, failed: the tool's own interval picks the render up).",
		}, []string{"target", "result"}),
		budgetWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_renderer_push_budget_waits_total",
			Help: "Renders that waited for the push budget (--push-budget) after a render that pushed; the changes meanwhile land together.",
		}),
	}
	reg.MustRegister(m.renders, m.invalid, m.refused, m.heldNodes, m.untrusted, m.unpublished, m.sourceToPush, m.duration, m.leader,
		m.wakes, m.triggers, m.told, m.budgetWaits)
	return m
}

// Daemon renders the branch while it leads: when woken by a push notification (Wake), and
// every Interval after its last render whatever happens, the safety net.
type Daemon struct {
	Renderer *Renderer
	// Interval is the longest time between renders.
	Interval time.Duration
	// Webhook says the renderer serves push notifications (for the triggers metric and log).
	Webhook bool
	// Targets are the GitOps tools told what each render that lands moved; RepoURL is the
	// repository as they know it, RenderedBranch the branch the renderer commits to.
	Targets        []notify.Target
	RepoURL        string
	RenderedBranch string
	// Endpoint, when set, is pointed at this replica while it leads (Lead).
	Endpoint *WebhookEndpoint
	Log      logr.Logger
	Metrics  *Metrics
	// Timeout bounds one render; 0 means none.
	Timeout time.Duration
	// Pushed, when set, keeps the commit the renderer pushed last where a next leader finds
	// it (the leader election Lease).
	Pushed func(commit string)
	// PushBudget is how many renders that push the daemon makes a minute at most, sustained:
	// the git host's pushes a minute for the repository (GitHub advises 6); 0 for no bound.
	// It is a bucket of a minute's pushes: after a quiet spell a change renders at once, even
	// several in a row; under a churn a render waits for the bucket, and the wakes meanwhile
	// coalesce into it, so the changes land as fewer, larger commits.
	PushBudget float64
	budget     pushBucket

	last          atomic.Int64
	ready         atomic.Bool
	renders       atomic.Int64
	lastBad       string
	lastHeld      string
	lastUntrusted string

	wakeOnce sync.Once
	wake     chan struct{}
	// telling counts notifications to the GitOps tools still being sent.
	telling sync.WaitGroup
}

func (d *Daemon) wakeChan() chan struct{} {
	d.wakeOnce.Do(func() { d.wake = make(chan struct{}, 1) })
	return d.wake
}

// Wake asks for a render as soon as the one under way (if any) ends; it never blocks. Any
// number of wakes during a render coalesce into one more render: a thousand agents' nudges
// cost two renders at most.
func (d *Daemon) Wake(string) {
	select {
	case d.wakeChan() <- struct{}{}:
	default:
	}
}

// Triggers names what wakes this daemon and whom it tells, for the log and metrics.
func (d *Daemon) Triggers() []string {
	t := []string{"interval"}
	if d.Webhook {
		t = append(t, "webhook")
	}
	for _, target := range d.Targets {
		t = append(t, targetLabel(target))
	}
	return t
}

func targetLabel(t notify.Target) string {
	switch t.(type) {
	case *notify.FluxReceiver:
		return "flux-receiver"
	case *notify.ArgoCD:
		return "argocd-webhook"
	}
	return t.String()
}

// Run renders until ctx ends: at once, then whenever woken, and Interval after the last
// render at the latest.
func (d *Daemon) Run(ctx context.Context) {
	d.Metrics.leader.Set(1)
	defer d.Metrics.leader.Set(0)
	for _, t := range d.Triggers() {
		d.Metrics.triggers.WithLabelValues(t).Set(1)
	}
	defer d.telling.Wait()
	wake := d.wakeChan()
	t := time.NewTimer(d.Interval)
	defer t.Stop()
	trigger := "interval"
	for {
		d.Metrics.wakes.WithLabelValues(trigger).Inc()
		if wait := d.budget.wait(d.PushBudget, time.Now()); wait > 0 {
			d.Metrics.budgetWaits.Inc()
			budget := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				budget.Stop()
				return
			case <-budget.C:
			}
		}
		d.cycle(ctx)
		t.Reset(d.Interval)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			trigger = "interval"
		case <-wake:
			trigger = "notification"
		}
	}
}

func (d *Daemon) cycle(ctx context.Context) {
	defer d.last.Store(time.Now().UnixNano())
	start := time.Now()
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	out, err := d.Renderer.Once(ctx)
	// Counted once its readiness is recorded, so a probe never sees a
	// render without its outcome.
	defer d.renders.Add(1)
	d.Metrics.duration.Observe(time.Since(start).Seconds())
	if out.Result != nil {
		d.Metrics.invalid.Set(float64(len(out.Result.Errors)))
		if msg := out.Result.Errors.Error(); len(out.Result.Errors) > 0 && msg != d.lastBad {
			d.Log.Error(out.Result.Errors, "invalid inputs; their previous output is kept", "source", out.Source, "count", len(out.Result.Errors))
			d.lastBad = msg
		} else if len(out.Result.Errors) == 0 {
			d.lastBad = ""
		}
		held := out.Result.Held
		d.Metrics.heldNodes.Set(float64(len(held)))
		if msg := strings.Join(held, "\n"); len(held) > 0 && msg != d.lastHeld {
			d.Log.Error(errors.New(msg), "deletion budget: nodes held as they were; the rest rendered", "source", out.Source, "count", len(held))
		}
		d.lastHeld = strings.Join(held, "\n")
		untrusted := out.Result.Untrusted
		d.Metrics.untrusted.Set(float64(len(untrusted)))
		if msg := strings.Join(untrusted, "\n"); len(untrusted) > 0 && msg != d.lastUntrusted {
			d.Log.Error(errors.New(msg), "untrusted inputs: each writer's previous part is kept", "source", out.Source, "count", len(untrusted))
		}
		d.lastUntrusted = strings.Join(untrusted, "\n")
	}
	if d.Pushed != nil && d.Renderer.Pushed() != "" {
		d.Pushed(d.Renderer.Pushed())
	}
	if out.Published != "" {
		d.Log.Info("published the verified Configurations for the agents", "commit", out.Published, "branch", verify.ConfigurationsBranch, "source", out.Source)
	}
	d.Metrics.unpublished.Set(0)
	if out.PublishErr != nil {
		d.Metrics.unpublished.Set(1)
		d.Log.Error(out.PublishErr, "the agents keep discovering with the Configurations published before; will retry")
	}
	d.Metrics.refused.Set(0)
	switch {
	case IsRefused(err):
		d.Metrics.renders.WithLabelValues("refused").Inc()
		d.Metrics.refused.Set(1)
		d.Log.Error(err, "render refused by a safety rule; nothing was committed", "source", out.Source)
		d.ready.Store(true)
	case errors.Is(err, gitsync.ErrNoChanges):
		d.Metrics.renders.WithLabelValues("unchanged").Inc()
		d.ready.Store(true)
	case err != nil:
		d.Metrics.renders.WithLabelValues("failed").Inc()
		d.Log.Error(err, "render failed; will retry")
		d.ready.Store(false)
	default:
		d.budget.spend(d.PushBudget, time.Now())
		d.Metrics.renders.WithLabelValues("committed").Inc()
		if !out.SourceTime.IsZero() {
			d.Metrics.sourceToPush.Observe(time.Since(out.SourceTime).Seconds())
		}
		d.Log.Info("render committed", "commit", out.Commit, "source", out.Source,
			"summary", out.Result.Plan.Summary.String(), "attempts", out.Push.Attempts, "folderSourcesMoved", out.Push.CompanionsMoved, "duration", time.Since(start).String())
		d.ready.Store(true)
	}
	if err == nil || errors.Is(err, gitsync.ErrNoChanges) {
		d.tell(ctx, out)
	}
}

// pushBucket is the push budget's bucket: it holds up to a minute's pushes, refilled at the
// budget's rate, and a render that pushed takes one out.
type pushBucket struct {
	used float64 // pushes taken and not refilled yet, at at
	at   time.Time
}

// refill is what the bucket lacks at now, the budget being perMinute.
func (b *pushBucket) refill(perMinute float64, now time.Time) {
	if !b.at.IsZero() {
		b.used = max(b.used-now.Sub(b.at).Minutes()*perMinute, 0)
	}
	b.at = now
}

// wait is how long a render at now waits for the bucket to hold a push.
func (b *pushBucket) wait(perMinute float64, now time.Time) time.Duration {
	if perMinute <= 0 {
		return 0
	}
	b.refill(perMinute, now)
	if over := b.used + 1 - max(perMinute, 1); over > 0 { // it holds a push at least
		return time.Duration(over / perMinute * float64(time.Minute))
	}
	return 0
}

// spend takes a push out of the bucket at now.
func (b *pushBucket) spend(perMinute float64, now time.Time) {
	if perMinute <= 0 {
		return
	}
	b.refill(perMinute, now)
	b.used++
}

// tell sends the GitOps tools what the render moved: the rendered branch when it committed,
// and the folder sources' branches that moved with it (or alone, when a render repaired
// them). It does not wait for them: a tool that does not answer delays no render.
func (d *Daemon) tell(ctx context.Context, out Outcome) {
	if len(d.Targets) == 0 {
		return
	}
	m := notify.Moved{RepoURL: d.RepoURL, Before: out.Push.Base, After: out.Commit}
	if out.Commit != "" {
		m.Branches = append(m.Branches, d.RenderedBranch)
		if out.Result != nil && len(out.Result.Diff) > 0 && len(out.Result.Diff) <= notify.MaxPaths {
			m.Paths = out.Result.Diff
		}
	}
	for _, b := range out.Push.CompanionBranches {
		if strings.HasPrefix(b, api.FolderBranchPrefix) { // the accepted tips' shards feed no source
			m.Branches = append(m.Branches, b)
		}
	}
	if len(m.Branches) == 0 {
		return
	}
	if m.After == "" {
		m.After = out.Push.Base
	}
	for _, t := range d.Targets {
		d.telling.Add(1)
		go func() {
			defer d.telling.Done()
			label := targetLabel(t)
			if err := t.Notify(context.WithoutCancel(ctx), m); err != nil {
				d.Metrics.told.WithLabelValues(label, "failed").Inc()
				d.Log.Error(err, "telling the GitOps tool about the render failed; its own interval picks it up", "target", t.String(), "commit", m.After)
				return
			}
			d.Metrics.told.WithLabelValues(label, "sent").Inc()
		}()
	}
}

// Election is where the leader election Lease is and how it is held (Flux's flags).
type Election struct {
	leaderelection.Options
	Namespace, Name string
}

// Lead runs the daemon while it holds the leader election Lease, keeping the commit it pushed
// last in the Lease, and starting from the one a previous leader left there: a leader that
// starts holds no render in memory, and the branch must still descend from what was pushed.
// It returns when ctx ends or the Lease is lost (the process should then exit, as Flux's
// controllers do, so two replicas never both push).
func (d *Daemon) Lead(ctx context.Context, client kubernetes.Interface, e Election) error {
	host, _ := os.Hostname()
	lock := &pushedLease{meta: metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace}, client: client.CoordinationV1(),
		identity: host + "_" + rand.String(8)}
	d.Pushed = lock.Pushed
	return lead(ctx, e, d.Log, lock, func(ctx context.Context) {
		if d.Endpoint != nil {
			go d.Endpoint.publish(ctx, client, d.Log, e.RetryPeriod)
		}
		if found := lock.Found(); found != "" {
			d.Renderer.StartFrom(found)
		} else if d.Renderer.Pushed() == "" {
			// No leader of this Lease ever pushed: the repository's first render is this
			// deployment's to make. The Lease is out of every git writer's reach, so deleting
			// the renderer's branches later never makes another start from nothing.
			d.Renderer.Sources.FirstRender = true
		}
		d.Run(ctx)
	})
}

// lead runs f while this process holds the Lease, and returns when ctx ends or the lease is
// lost. The Lease also carries the rendered branch's commit the leader pushed last
// (AnnotationLastPushed): f is given what a previous leader left there.
func lead(ctx context.Context, e Election, log logr.Logger, lock *pushedLease, f func(context.Context)) error {
	identity := lock.identity
	var led, lost atomic.Bool
	elector, err := le.NewLeaderElector(le.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: e.ReleaseOnCancel,
		Name:            e.Name,
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

// LastCycle is when the last render ended; zero before the first.
func (d *Daemon) LastCycle() time.Time {
	n := d.last.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Renders counts the renders done; Ready reports whether the last one succeeded.
func (d *Daemon) Renders() int64 { return d.renders.Load() }

// Ready reports whether the last render succeeded (or was refused by a safety rule, which a
// person must resolve and a restart would not).
func (d *Daemon) Ready() bool { return d.ready.Load() }
