package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/runtime/logger"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/cmd/internal/cli"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/publication"
	"github.com/gitbroker/gitbroker/recorder"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// Flag names of the cluster-facing daemons.
const (
	flagKubeconfig    = "kubeconfig"
	flagNamespace     = "namespace"
	flagBatch         = "batch"
	flagNodeLossGrace = "node-loss-grace"
	flagCluster       = "cluster"

	flagLogTailMaxBytes = "log-tail-max-bytes"
	flagLogRedact       = "log-redact"
)

// kubeOptions say how to reach the API server.
type kubeOptions struct {
	Kubeconfig string
}

func (o *kubeOptions) BindFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Kubeconfig, flagKubeconfig, "", "Path to a kubeconfig; default $KUBECONFIG, ~/.kube/config, or the in-cluster service account.")
}

func (o *kubeOptions) client() (kubernetes.Interface, error) {
	c, _, err := o.clientAndConfig()
	return c, err
}

func (o *kubeOptions) clientAndConfig() (kubernetes.Interface, *rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "gitbroker"
	c, err := kubernetes.NewForConfig(cfg)
	return c, cfg, err
}

// kubeSecrets are the credentials in a client configuration.
func kubeSecrets(cfg *rest.Config) []string {
	var out []string
	if cfg.BearerToken != "" {
		out = append(out, cfg.BearerToken)
	}
	if cfg.BearerTokenFile != "" {
		if b, err := os.ReadFile(cfg.BearerTokenFile); err == nil && len(b) > 0 {
			out = append(out, strings.TrimSpace(string(b)))
		}
	}
	if cfg.Password != "" {
		out = append(out, cfg.Password)
	}
	return out
}

// recordOptions are the recorder's flags.
type recordOptions struct {
	Git         gitsync.RemoteFlags
	Signing     cli.SigningOptions
	RendererKey string
	Endpoints   cli.EndpointOptions
	Log         logger.Options
	Kube        kubeOptions
	Namespaces  []string
	Batch       time.Duration
	AuthorName  string
	AuthorEmail string
	MaxTail     int
	Redact      []string
	NodeLoss    time.Duration
	Cluster     string
}

func (o *recordOptions) BindFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.Git.BindFlags(fs, "Unused: the recorder writes only "+verify.StatusBranch+" and never reads the people's branch.")
	_ = fs.MarkDeprecated(gitsync.FlagBranch, "the recorder writes only "+verify.StatusBranch+" and never reads the people's branch; drop the flag")
	o.Signing.BindFlags(fs, "OpenSSH private key that signs the recorder's commits, as principal recorder (mounted from the recorder's own Secret).")
	fs.StringVar(&o.RendererKey, cli.FlagRendererKey, "", "The renderer's public key, pinned, as the agents take it (allowed_signers line of principal renderer, or its armored OpenPGP public key). Required with --signing-key: should "+verify.StatusBranch+" be deleted or moved back, the recorder's new line names the commit the renderer accepted last, read only from a commit of its shard of the accepted tips ("+api.AcceptedBranchPrefix+"<shard>) this key signed.")
	o.Endpoints.BindFlags(fs)
	o.Log.BindFlags(fs)
	o.Kube.BindFlags(cmd)
	fs.StringSliceVarP(&o.Namespaces, flagNamespace, "n", nil, "Watch Jobs in these namespaces only (the broker namespaces; repeatable or comma-separated), so a Role in each replaces the ClusterRole; default all namespaces.")
	fs.DurationVar(&o.NodeLoss, flagNodeLossGrace, recorder.DefaultNodeLossGrace, "Record a node lost in status/nodes/<node>.yaml once it has been NotReady, or gone from the cluster, for this long (the renderer then moves the brokers of the shared devices it saw); 0 watches no nodes.")
	fs.DurationVar(&o.Batch, flagBatch, 2*time.Second, "After a Job finishes, wait this long for others, so Jobs finishing together land in one commit.")
	fs.StringVar(&o.AuthorName, cli.FlagAuthorName, "gitbroker-recorder", "Author name of the recorder's commits.")
	fs.StringVar(&o.AuthorEmail, cli.FlagAuthorEmail, "recorder@gitbroker.dev", "Author email of the recorder's commits.")
	fs.IntVar(&o.MaxTail, flagLogTailMaxBytes, api.DefaultLogTailBytes, fmt.Sprintf("Keep at most this many bytes of each container's log tail, whatever a Configuration asks (at most %d); 0 keeps no log at all.", api.MaxLogTailBytes))
	fs.StringVar(&o.Cluster, flagCluster, "", "With gitbroker.yaml spec.clusters: the cluster this recorder watches. It writes status/<cluster>/... on its own ref, "+verify.StatusBranch+"/<cluster>, signed as principal recorder:<cluster>, and the renderer takes that cluster's records from it alone.")
	fs.StringArrayVar(&o.Redact, flagLogRedact, nil, "A regular expression (RE2) replaced by "+api.RedactedText+" in every log tail and termination message, besides each Configuration's own and the recorder's credentials (repeatable).")
}

func newRecordCommand() *cobra.Command {
	o := &recordOptions{}
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Watch broker Jobs in the cluster and commit each finished Job's JobRecord to git",
		Example: `  gitbroker record --git https://git.example.com/fleet/edge.git --git-username git \
    --git-password-file /etc/gitbroker/git/password --signing-key /etc/gitbroker/signing/signing-key -n plant,kitchen`,
		Long: `The recorder runs in the cluster. It watches the Jobs gitbroker rendered (label
app.kubernetes.io/managed-by=gitbroker) and, when one completes or fails, commits its JobRecord
to status/jobs/<namespace>/<job>.yaml, once. That record is what lets the renderer retire the
Job to history/, start the next run, or release a Pod broker waiting with after:.

With each record it keeps what the Job's Pods say, for when they are gone: per Pod and
container the node, exit code, reason and termination message, and, when the Configuration asks
for it (spec.jobPolicy.logs), the tail of the log, redacted (--log-redact, the Configuration's own
patterns, and the recorder's credentials) and bounded (--log-tail-max-bytes).

It also records node loss: a node NotReady (from its Ready condition's last transition) or
deleted for longer than --node-loss-grace gets status/nodes/<node>.yaml, removed when the node is
Ready again, and the renderer moves the brokers of the shared devices it saw to other nodes that
report them.

And it records rollouts: for every broker Deployment labelled gitbroker.dev/rollout: staged (a
Configuration with spec.rollout), status/rollouts/<namespace>/<deployment>.yaml says whether what
it runs now is Available, from which the renderer starts a staged rollout's next wave.

It needs get, list and watch on jobs (batch), deployments (apps) and nodes, and list on pods and
get on pods/log in the broker namespaces. It serves /healthz and /readyz
(--health-addr) and Prometheus metrics (--metrics-addr), and stops on SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRecord(cmd, o) },
	}
	o.BindFlags(cmd)
	return cmd
}

func runRecord(cmd *cobra.Command, o *recordOptions) error {
	if o.NodeLoss < 0 {
		return exitf(exitInvalid, "--%s must not be negative (0 watches no nodes), got %s", flagNodeLossGrace, o.NodeLoss)
	}
	// Flags first, before anything global (klog's logger) is set.
	var keys *publication.RendererKeys
	if o.Signing.Key != "" {
		if o.RendererKey == "" {
			return exitf(exitInvalid, "--%s needs --%s: a recorder that signs recovers its ref from what the renderer accepted, read only from a commit of its accepted-tips shard the renderer's pinned key signed (deploy/ mounts it from the gitbroker-renderer-key ConfigMap)",
				cli.FlagSigningKey, cli.FlagRendererKey)
		}
		var err error
		if keys, err = cli.LoadRendererKeys(o.RendererKey); err != nil {
			return exitf(exitInvalid, "%v", err)
		}
	}
	ref := verify.StatusBranch
	if o.Cluster != "" {
		if err := api.CheckClusterName(o.Cluster); err != nil {
			return exitf(exitInvalid, "--%s: %v", flagCluster, err)
		}
		ref = api.ClusterStatusBranch(o.Cluster)
	}
	log := logger.NewLogger(o.Log)
	logger.SetLogger(log) // client-go's informers log through klog
	signing, err := o.Signing.Options(log, trust.RecorderPrincipal(o.Cluster), false)
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	// The recorder writes only its own ref, which its first write creates; --branch names the
	// people's branch, which it never reads.
	own := o.Git
	own.Branch = ref
	limits := gitsync.WithLimits(gitsync.RecorderMaxFetchBytes, gitsync.RecorderMaxFileSize)
	opts := append(signing, gitsync.WithLogger(log), gitsync.WithCreateBranch(), limits)
	if len(signing) > 0 {
		opts = append(opts, cli.OwnRefOptions(o.Git, ref, keys, append(slices.Clip(signing), gitsync.WithLogger(log), limits)...)...)
	}
	repo, err := own.Open(opts...)
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	var store gitsync.Store = repo
	if o.Cluster != "" {
		store = recorder.ForCluster(repo, o.Cluster)
	}
	client, kcfg, err := o.Kube.clientAndConfig()
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	secrets, err := o.Git.Secrets()
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	secrets = append(secrets, kubeSecrets(kcfg)...)
	var redact []*regexp.Regexp
	for _, p := range o.Redact {
		re, err := regexp.Compile(p)
		if err != nil {
			return exitf(exitInvalid, "--%s %q: %v", flagLogRedact, p, err)
		}
		redact = append(redact, re)
	}
	maxTail := o.MaxTail
	switch {
	case maxTail < 0 || maxTail > api.MaxLogTailBytes:
		return exitf(exitInvalid, "--%s must be between 0 and %d", flagLogTailMaxBytes, api.MaxLogTailBytes)
	case maxTail == 0:
		maxTail = -1
	}
	reg := prometheus.NewRegistry()
	r, err := recorder.New(recorder.Options{
		Client:     client,
		Store:      store,
		Namespaces: o.Namespaces,
		Batch:      o.Batch,
		Timeout:    o.Git.PushTimeout + time.Minute,
		Author:     gitsync.Signature{Name: o.AuthorName, Email: o.AuthorEmail},
		Log:        log,
		Metrics:    recorder.NewMetrics(reg),
		// The git credential, the ServiceAccount token and the patterns never reach a record.
		Secrets:       secrets,
		Redact:        redact,
		MaxTailBytes:  maxTail,
		NodeLossGrace: nodeLossGrace(o.NodeLoss),
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

// nodeLossGrace is the recorder's option for --node-loss-grace: 0 (watch no nodes) is negative
// there, its zero being the default.
func nodeLossGrace(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
