package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/time/rate"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/cmd/internal/cli"
	"github.com/gitbroker/gitbroker/notify"
	"github.com/gitbroker/gitbroker/renderer"
)

// Flag names of the render daemon's push notifications.
const (
	flagWebhookAddr         = "webhook-addr"
	flagWebhookSecretFile   = "webhook-secret-file"
	flagNudgeSecretFile     = "nudge-secret-file"
	flagWebhookRate         = "webhook-rate"
	flagWebhookBurst        = "webhook-burst"
	flagFluxReceiverURL     = "flux-receiver-url"
	flagFluxReceiver        = "flux-receiver"
	flagFluxReceiverToken   = "flux-receiver-token-file"
	flagArgoCDWebhookURL    = "argocd-webhook-url"
	flagArgoCDWebhookSecret = "argocd-webhook-secret-file"
	flagArgoCDWebhookCA     = "argocd-webhook-ca-file"
	flagGitOpsRepoURL       = "gitops-repo-url"
	flagNotifySecretsDir    = "notify-secrets-dir"
	flagWebhookService      = "webhook-service"
)

// notifyOptions are the render daemon's push notifications, in (the endpoint) and out (the
// GitOps tools told after each render that lands).
type notifyOptions struct {
	Addr            string
	HostSecretFile  string
	NudgeSecretFile string
	Rate            float64
	Burst           int

	FluxURL, FluxReceiver, FluxTokenFile string
	ArgoURL, ArgoSecretFile, ArgoCAFile  string
	RepoURL                              string
	// SecretsDir holds the secrets as files named after notify.SecretFile* (a mounted Secret
	// whose keys are all optional); a --*-file flag wins over its file here.
	SecretsDir string
	// Service is the selector-less Service whose EndpointSlice the leader points at itself.
	Service string
}

func (o *notifyOptions) BindFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&o.Addr, flagWebhookAddr, ":9292", "With --watch, address of the push notification endpoint (POST /hook), served when --webhook-secret-file or --nudge-secret-file is given: a notification wakes the renderer at once; the --interval stays the safety net.")
	fs.StringVar(&o.HostSecretFile, flagWebhookSecretFile, "", "File holding the git host's push webhook secret (GitHub's X-Hub-Signature-256, Gitea's and Forgejo's signature, GitLab's X-Gitlab-Token, or the generic X-Signature: sha256=<HMAC of the body>).")
	fs.StringVar(&o.NudgeSecretFile, flagNudgeSecretFile, "", "File holding the secret of the agents' nudge after each push (agent --nudge-secret-file), in the generic X-Signature form.")
	fs.Float64Var(&o.Rate, flagWebhookRate, notify.DefaultRate, "Authenticated push notifications accepted per second (more are answered 429 and logged; requests without a valid secret never spend it); each costs one fetch at most, and a burst one render.")
	fs.IntVar(&o.Burst, flagWebhookBurst, notify.DefaultBurst, "Push notifications accepted at once above --webhook-rate.")
	fs.StringVar(&o.FluxURL, flagFluxReceiverURL, "", "After each render that lands, tell Flux's notification-controller (its webhook-receiver, e.g. http://webhook-receiver.flux-system.svc) which sources moved, through a generic-hmac Receiver (deploy/flux's receiver.yaml).")
	fs.StringVar(&o.FluxReceiver, flagFluxReceiver, "flux-system/gitbroker", "The Receiver, namespace/name: its webhook path is derived from them and the token.")
	fs.StringVar(&o.FluxTokenFile, flagFluxReceiverToken, "", "File holding the Receiver's token (the key token of its Secret).")
	fs.StringVar(&o.ArgoURL, flagArgoCDWebhookURL, "", "After each render that lands, tell Argo CD's webhook (argocd-server's /api/webhook) in GitHub's push form.")
	fs.StringVar(&o.ArgoSecretFile, flagArgoCDWebhookSecret, "", "File holding the secret argocd-secret keeps as webhook.github.secret.")
	fs.StringVar(&o.ArgoCAFile, flagArgoCDWebhookCA, "", "PEM file of the CA that signed argocd-server's certificate (its own self-signed one: argocd-secret's tls.crt), for an https --argocd-webhook-url; the system's roots when empty.")
	fs.StringVar(&o.RepoURL, flagGitOpsRepoURL, "", "The repository's URL as Flux's GitRepository and Argo CD's Applications name it; --git's URL when empty.")
	fs.StringVar(&o.SecretsDir, flagNotifySecretsDir, "", "Folder of the notification secrets, each optional, as a mounted Secret holds them: "+strings.Join(notify.SecretFiles, ", ")+" (what the --*-file flags name one by one; a flag wins). A secret that is not there turns its part off.")
	fs.StringVar(&o.Service, flagWebhookService, "gitbroker-renderer-webhook", "With --enable-leader-election and $POD_IP, the Service (selector-less, in the Lease's namespace) whose EndpointSlice the leader points at itself, so the git host's and the agents' notifications reach the replica that renders; empty leaves it alone.")
}

// fromDir fills the secret files the flags left empty from SecretsDir, where they exist.
func (o *notifyOptions) fromDir() error {
	if o.SecretsDir == "" {
		return nil
	}
	for _, f := range []struct {
		flag *string
		name string
	}{{&o.HostSecretFile, notify.SecretFileWebhook}, {&o.NudgeSecretFile, notify.SecretFileNudge},
		{&o.FluxTokenFile, notify.SecretFileFluxReceiver}, {&o.ArgoSecretFile, notify.SecretFileArgoCD},
		{&o.ArgoCAFile, notify.SecretFileArgoCDCA}} {
		if *f.flag != "" {
			continue
		}
		p := filepath.Join(o.SecretsDir, f.name)
		if _, err := os.Stat(p); err == nil {
			*f.flag = p
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--%s: %w", flagNotifySecretsDir, err)
		}
	}
	return nil
}

// targets are the GitOps tools to tell, from the flags.
func (o *notifyOptions) targets(repoURL, renderedBranch string) ([]notify.Target, string, error) {
	var targets []notify.Target
	if err := o.fromDir(); err != nil {
		return nil, "", err
	}
	if o.RepoURL != "" {
		repoURL = o.RepoURL
	}
	// Credentials in the URL are never sent on.
	if u, err := url.Parse(repoURL); err == nil && u.User != nil {
		u.User = nil
		repoURL = u.String()
	}
	if o.FluxURL != "" {
		ns, name, ok := strings.Cut(o.FluxReceiver, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, "", fmt.Errorf("--%s: want namespace/name, got %q", flagFluxReceiver, o.FluxReceiver)
		}
		if o.FluxTokenFile == "" {
			return nil, "", fmt.Errorf("--%s needs --%s (or %s in --%s)", flagFluxReceiverURL, flagFluxReceiverToken, notify.SecretFileFluxReceiver, flagNotifySecretsDir)
		}
		token, err := notify.ReadSecret(o.FluxTokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("--%s: %w", flagFluxReceiverToken, err)
		}
		targets = append(targets, &notify.FluxReceiver{URL: o.FluxURL, Namespace: ns, Name: name, Token: token})
	}
	if o.ArgoURL != "" {
		if o.ArgoSecretFile == "" {
			return nil, "", fmt.Errorf("--%s needs --%s (or %s in --%s)", flagArgoCDWebhookURL, flagArgoCDWebhookSecret, notify.SecretFileArgoCD, flagNotifySecretsDir)
		}
		secret, err := notify.ReadSecret(o.ArgoSecretFile)
		if err != nil {
			return nil, "", fmt.Errorf("--%s: %w", flagArgoCDWebhookSecret, err)
		}
		argo := &notify.ArgoCD{URL: o.ArgoURL, Branch: renderedBranch, Secret: secret}
		if o.ArgoCAFile != "" {
			pem, err := os.ReadFile(o.ArgoCAFile)
			if err != nil {
				return nil, "", fmt.Errorf("--%s: %w", flagArgoCDWebhookCA, err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pem) {
				return nil, "", fmt.Errorf("--%s: %s holds no PEM certificate", flagArgoCDWebhookCA, o.ArgoCAFile)
			}
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
			argo.Client = &http.Client{Transport: tr}
		}
		targets = append(targets, argo)
	}
	return targets, repoURL, nil
}

// serveHook serves the push notification endpoint until ctx ends, when a secret is given;
// it returns the address it listens on ("" when not served).
func (o *notifyOptions) serveHook(ctx context.Context, log logr.Logger, reg prometheus.Registerer, d *renderer.Daemon, renderedBranch string) (string, error) {
	if o.HostSecretFile == "" && o.NudgeSecretFile == "" {
		return "", nil
	}
	h := &notify.Hook{Wake: d.Wake, Log: log.WithName("webhook"), Metrics: notify.NewMetrics(reg),
		Limiter: rate.NewLimiter(rate.Limit(o.Rate), o.Burst),
		Own:     func(ref string) bool { return api.RendererBranch(ref, renderedBranch) }}
	var err error
	if o.HostSecretFile != "" {
		if h.HostSecret, err = notify.ReadSecret(o.HostSecretFile); err != nil {
			return "", fmt.Errorf("--%s: %w", flagWebhookSecretFile, err)
		}
	}
	if o.NudgeSecretFile != "" {
		if h.NudgeSecret, err = notify.ReadSecret(o.NudgeSecretFile); err != nil {
			return "", fmt.Errorf("--%s: %w", flagNudgeSecretFile, err)
		}
	}
	if o.Rate <= 0 || o.Burst <= 0 {
		return "", fmt.Errorf("--%s and --%s must be positive", flagWebhookRate, flagWebhookBurst)
	}
	mux := http.NewServeMux()
	mux.Handle("/hook", h)
	addr, err := cli.Serve(ctx, log, &http.Server{Addr: o.Addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, MaxHeaderBytes: 64 << 10})
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flagWebhookAddr, err)
	}
	d.Webhook = true
	return addr, nil
}
