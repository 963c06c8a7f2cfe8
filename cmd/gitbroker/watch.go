package main

import (
	"errors"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/runtime/leaderelection"
	"github.com/fluxcd/pkg/runtime/logger"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/gitbroker/gitbroker/cmd/internal/cli"
	"github.com/gitbroker/gitbroker/renderer"
)

// Flag names of the render daemon.
const (
	flagWatch                   = "watch"
	flagWatchInterval           = "interval"
	flagPushBudget              = "push-budget"
	flagLeaderElectionNamespace = "leader-election-namespace"
	flagLeaderElectionID        = "leader-election-id"
)

// watchOptions are render's daemon flags.
type watchOptions struct {
	Watch      bool
	Interval   time.Duration
	PushBudget float64
	Endpoints  cli.EndpointOptions
	Log        logger.Options
	Leader     leaderelection.Options
	// CycleTimeout bounds one render of the daemon.
	CycleTimeout time.Duration
	LeaderNS     string
	LeaderID     string
	Kube         kubeOptions
	Notify       notifyOptions
}

func (o *watchOptions) BindFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.BoolVar(&o.Watch, flagWatch, false, "With --git, keep rendering every --interval as a daemon (probes, metrics, leader election).")
	fs.DurationVar(&o.Interval, flagWatchInterval, 30*time.Second, "With --watch, time between renders.")
	fs.Float64Var(&o.PushBudget, flagPushBudget, 6, "With --watch, renders that push a minute at most, sustained (GitHub advises 6 pushes a minute per repository); a change after a quiet spell renders at once, and the changes meanwhile land together. 0 for no bound.")
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
	o.Notify.BindFlags(cmd)
}

// runRenderDaemon renders every interval, behind leader election when it
// is enabled, until SIGTERM.
func runRenderDaemon(cmd *cobra.Command, r *renderer.Renderer, o *watchOptions, repoURL, renderedBranch string) error {
	if o.PushBudget < 0 {
		return exitf(exitInvalid, "--%s must be 0 (no bound) or more pushes a minute, got %g", flagPushBudget, o.PushBudget)
	}
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
	d := &renderer.Daemon{Renderer: r, Interval: o.Interval, Log: log, Metrics: renderer.NewMetrics(reg), Timeout: o.CycleTimeout,
		RenderedBranch: renderedBranch, PushBudget: o.PushBudget}
	targets, repoURL, err := o.Notify.targets(repoURL, renderedBranch)
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	d.Targets, d.RepoURL = targets, repoURL
	hookAddr, err := o.Notify.serveHook(ctx, log, reg, d, renderedBranch)
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	if ip := os.Getenv("POD_IP"); hookAddr != "" && client != nil && o.Notify.Service != "" && ip != "" {
		_, port, err := net.SplitHostPort(hookAddr)
		if err != nil {
			return exitf(exitInvalid, "--%s: %v", flagWebhookAddr, err)
		}
		p, err := strconv.ParseInt(port, 10, 32)
		if err != nil {
			return exitf(exitInvalid, "--%s: %v", flagWebhookAddr, err)
		}
		d.Endpoint = &renderer.WebhookEndpoint{Namespace: o.LeaderNS, Service: o.Notify.Service, PodName: os.Getenv("POD_NAME"), IP: ip, Port: int32(p)}
	}
	metricsAddr, healthAddr, err := cli.ServeEndpoints(ctx, log, o.Endpoints, reg, cli.Probes{
		// A renderer that waits for its Lease renders nothing and is healthy.
		Healthy: cli.Stalled(time.Now(), o.Interval, d.LastCycle, func() bool { return d.Renders() > 0 }, "render"),
		Ready: func() error {
			if d.Renders() > 0 && !d.Ready() {
				return errors.New("the last render failed")
			}
			return nil
		},
	})
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	log.Info("renderer started", "branch", r.Branch, "interval", o.Interval.String(), "leaderElection", o.Leader.Enable,
		"metricsAddr", metricsAddr, "healthAddr", healthAddr, "webhookAddr", hookAddr, "triggers", d.Triggers())
	if client != nil {
		err = d.Lead(ctx, client, renderer.Election{Options: o.Leader, Namespace: o.LeaderNS, Name: o.LeaderID})
	} else {
		d.Run(ctx)
	}
	log.Info("renderer stopped")
	if err != nil {
		return &exitError{Code: exitRefused, Err: err}
	}
	return nil
}
