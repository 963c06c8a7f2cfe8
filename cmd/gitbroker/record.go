package main

import (
	"errors"
	"fmt"
	"github.com/gitbroker/gitbroker/cmd/internal/cli"
	"os/signal"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/runtime/logger"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/recorder"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// Flag names of the cluster-facing daemons.
const (
	flagKubeconfig = "kubeconfig"
	flagNamespace  = "namespace"
	flagBatch      = "batch"
)

// kubeOptions say how to reach the API server.
type kubeOptions struct {
	Kubeconfig string
}

func (o *kubeOptions) BindFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Kubeconfig, flagKubeconfig, "", "Path to a kubeconfig; default $KUBECONFIG, ~/.kube/config, or the in-cluster service account.")
}

func (o *kubeOptions) client() (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "gitbroker"
	return kubernetes.NewForConfig(cfg)
}

// recordOptions are the recorder's flags.
type recordOptions struct {
	Git         gitsync.Options
	Signing     cli.SigningOptions
	Endpoints   cli.EndpointOptions
	Log         logger.Options
	Kube        kubeOptions
	Namespaces  []string
	Batch       time.Duration
	AuthorName  string
	AuthorEmail string
}

func (o *recordOptions) BindFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.Git.BindFlags(fs)
	o.Signing.BindFlags(fs, "OpenSSH private key that signs the recorder's commits, as principal recorder (mounted from the recorder's own Secret).")
	o.Endpoints.BindFlags(fs)
	o.Log.BindFlags(fs)
	o.Kube.BindFlags(cmd)
	fs.StringSliceVar(&o.Namespaces, flagNamespace, nil, "Watch Jobs in these namespaces only (the broker namespaces; repeatable or comma-separated), so a Role in each replaces the ClusterRole; default all namespaces.")
	fs.DurationVar(&o.Batch, flagBatch, 2*time.Second, "After a Job finishes, wait this long for others, so Jobs finishing together land in one commit.")
	fs.StringVar(&o.AuthorName, cli.FlagAuthorName, "gitbroker-recorder", "Author name of the recorder's commits.")
	fs.StringVar(&o.AuthorEmail, cli.FlagAuthorEmail, "recorder@gitbroker.dev", "Author email of the recorder's commits.")
}

func newRecordCommand() *cobra.Command {
	o := &recordOptions{}
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Watch broker Jobs in the cluster and commit each finished Job's JobRecord to git",
		Long: `The recorder runs in the cluster. It watches the Jobs gitbroker rendered (label
app.kubernetes.io/managed-by=gitbroker) and, when one completes or fails, commits its JobRecord
to status/jobs/<namespace>/<job>.yaml, once. That record is what lets the renderer retire the
Job to history/, start the next run, or release a Pod waiting with after:.

It needs get, list and watch on jobs (batch) and nothing else. It serves /healthz and /readyz
(--health-addr) and Prometheus metrics (--metrics-addr), and stops on SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRecord(cmd, o) },
	}
	o.BindFlags(cmd)
	return cmd
}

func runRecord(cmd *cobra.Command, o *recordOptions) error {
	log := logger.NewLogger(o.Log)
	logger.SetLogger(log) // client-go's informers log through klog
	signing, err := o.Signing.Options(log, trust.PrincipalRecorder, false)
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	// The recorder writes only its own ref, which its first write creates; --branch names the
	// people's branch, which it never reads.
	own := o.Git
	own.Branch = verify.StatusBranch
	repo, err := own.Open(append(signing, gitsync.WithLogger(log), gitsync.WithCreateBranch())...)
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	client, err := o.Kube.client()
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	reg := prometheus.NewRegistry()
	r, err := recorder.New(recorder.Options{
		Client:     client,
		Store:      repo,
		Namespaces: o.Namespaces,
		Batch:      o.Batch,
		Timeout:    o.Git.PushTimeout + time.Minute,
		Author:     gitsync.Signature{Name: o.AuthorName, Email: o.AuthorEmail},
		Log:        log,
		Metrics:    recorder.NewMetrics(reg),
	})
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	metricsAddr, healthAddr, err := cli.ServeEndpoints(ctx, log, o.Endpoints, reg, cli.Probes{
		Healthy: func() error { return nil },
		Ready: func() error {
			if !r.Ready() {
				return fmt.Errorf("%d finished Job(s) not recorded yet", r.Pending())
			}
			return nil
		},
	})
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	log.Info("recorder started", "store", fmt.Sprintf("%s (branch %s)", repo.URL(), repo.Branch()),
		"metricsAddr", metricsAddr, "healthAddr", healthAddr)
	if err := r.Run(ctx); err != nil && !errors.Is(err, ctx.Err()) {
		return &exitError{Code: exitRefused, Err: err}
	}
	log.Info("recorder stopped")
	return nil
}
