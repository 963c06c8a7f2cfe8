//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// ArgoNamespace is where Argo CD's objects live.
const ArgoNamespace = "argocd"

// ArgoCD is Argo CD's application controller, repo-server, applicationset controller and
// server (for its webhook), with the redis they share, running as processes on loopback against the cluster, as they would in
// it: ARGOCD_FAKE_IN_CLUSTER makes https://kubernetes.default.svc mean this API server.
type ArgoCD struct {
	procs     []*process
	gnupgHome string
	// WebhookURL is argocd-server's webhook (/api/webhook), served without TLS (--insecure),
	// which takes GitHub's push events signed with ArgoWebhookSecret.
	WebhookURL string
	// Server is argocd-server's process, whose log says what the webhook did.
	Server *process
}

// ArgoWebhookSecret is argocd-secret's webhook.github.secret in the suite.
const ArgoWebhookSecret = "e2e-argocd-webhook-secret"

// StartArgoCD installs Argo CD's CRDs and configuration in the cluster and starts its
// controllers. gpgKeys, when not empty, is a folder of ASCII-armored public keys the repo-server
// imports to verify commit signatures (what the argocd-gpg-keys-cm ConfigMap holds in a cluster).
func (c *Cluster) StartArgoCD(ctx context.Context, gpgKeys string) (_ *ArgoCD, err error) {
	a := &ArgoCD{}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("Argo CD needs redis-server (Debian's redis-server package; .ci/run installs it): %w", err)
	}
	crds, err := filepath.Glob(filepath.Join(c.bin, "argocd", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return nil, fmt.Errorf("no Argo CD CRDs in %s/argocd: %v", c.bin, err)
	}
	for _, f := range crds {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := c.Apply(ctx, data); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	if err := c.WaitForKinds(ctx, "Application.argoproj.io", "ApplicationSet.argoproj.io", "AppProject.argoproj.io"); err != nil {
		return nil, err
	}
	if err := c.CreateNamespace(ctx, ArgoNamespace); err != nil {
		return nil, err
	}
	// What Argo CD's install manifests create: its settings, RBAC settings and secret (the
	// controllers refuse to start without server.secretkey), labelled as Argo CD finds them.
	part := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	for _, cm := range []string{"argocd-cm", "argocd-rbac-cm", "argocd-cmd-params-cm", "argocd-gpg-keys-cm", "argocd-tls-certs-cm", "argocd-ssh-known-hosts-cm"} {
		_, err := c.Client.CoreV1().ConfigMaps(ArgoNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Labels: part}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	_, err = c.Client.CoreV1().Secrets(ArgoNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Labels: part},
		Data: map[string][]byte{"server.secretkey": []byte("e2e-not-a-secret-0123456789abcdef"),
			"webhook.github.secret": []byte(ArgoWebhookSecret)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}

	dir := filepath.Join(c.Dir, "argocd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	redisPort, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := startProcess(c.LogDir, "redis", redis, []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(redisPort), "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "yes",
	}, nil)
	if err != nil {
		return nil, err
	}
	a.procs = append(a.procs, p)
	if err := waitTCP(ctx, p, addr(redisPort), time.Minute); err != nil {
		return nil, err
	}

	argocd := filepath.Join(c.bin, "argo-cd")
	env := []string{
		"KUBECONFIG=" + c.Kubeconfig,
		"ARGOCD_FAKE_IN_CLUSTER=true",
		// git-verify-wrapper.sh and kustomize are found on PATH, as in Argo CD's image.
		"PATH=" + c.bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"TMPDIR=" + dir,
		"HOME=" + dir,
	}
	gpg := "ARGOCD_GPG_ENABLED=false"
	a.gnupgHome = filepath.Join(dir, "gnupg")
	if gpgKeys != "" {
		gpg = "ARGOCD_GPG_ENABLED=true"
		if _, err := exec.LookPath("gpg"); err != nil {
			return nil, fmt.Errorf("Argo CD verifies commit signatures with gpg (Debian's gnupg; .ci/run installs it): %w", err)
		}
		if err := os.MkdirAll(a.gnupgHome, 0o700); err != nil {
			return nil, err
		}
	}
	repoPort, err := freePort()
	if err != nil {
		return nil, err
	}
	repoMetrics, err := freePort()
	if err != nil {
		return nil, err
	}
	repoEnv := append([]string{"ARGOCD_BINARY_NAME=argocd-repo-server", gpg, "ARGOCD_GNUPGHOME=" + a.gnupgHome, "GNUPGHOME=" + a.gnupgHome}, env...)
	if gpgKeys != "" {
		repoEnv = append(repoEnv, "ARGOCD_GPG_DATA_PATH="+gpgKeys)
	}
	p, err = startProcess(c.LogDir, "argocd-repo-server", argocd, []string{
		"--address", "127.0.0.1", "--port", strconv.Itoa(repoPort),
		"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(repoMetrics),
		"--redis", addr(redisPort),
		"--disable-tls", "--client-ca-path=",
		// Follow pushes in seconds, not minutes.
		"--revision-cache-expiration", "2s",
		"--loglevel", "debug",
	}, repoEnv)
	if err != nil {
		return nil, err
	}
	a.procs = append(a.procs, p)
	if err := waitHTTP(ctx, p, "http://"+addr(repoMetrics)+"/healthz", nil, 2*time.Minute); err != nil {
		return nil, err
	}

	controllerMetrics, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err = startProcess(c.LogDir, "argocd-application-controller", argocd, []string{
		"--namespace", ArgoNamespace,
		"--repo-server", addr(repoPort), "--repo-server-plaintext",
		"--redis", addr(redisPort),
		"--metrics-port", strconv.Itoa(controllerMetrics),
		"--app-resync", "5", "--app-resync-jitter", "0",
		"--self-heal-timeout-seconds", "1",
		"--loglevel", "debug",
	}, append([]string{"ARGOCD_BINARY_NAME=argocd-application-controller", gpg}, env...))
	if err != nil {
		return nil, err
	}
	a.procs = append(a.procs, p)
	if err := waitHTTP(ctx, p, "http://"+addr(controllerMetrics)+"/healthz", nil, 2*time.Minute); err != nil {
		return nil, err
	}

	var ports []int
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		ports = append(ports, port)
	}
	p, err = startProcess(c.LogDir, "argocd-applicationset-controller", argocd, []string{
		"--namespace", ArgoNamespace,
		"--argocd-repo-server", addr(repoPort), "--repo-server-plaintext",
		"--metrics-addr", addr(ports[0]), "--probe-addr", addr(ports[1]), "--webhook-addr", addr(ports[2]),
		"--enable-leader-election=false",
		"--loglevel", "debug",
	}, append([]string{"ARGOCD_BINARY_NAME=argocd-applicationset-controller"}, env...))
	if err != nil {
		return nil, err
	}
	a.procs = append(a.procs, p)
	if err := waitHTTP(ctx, p, "http://"+addr(ports[0])+"/metrics", nil, 2*time.Minute); err != nil {
		return nil, err
	}
	// argocd-server, for its webhook: what a git host (or gitbroker's renderer) calls after a
	// push so the Applications refresh at once.
	serverPort, err := freePort()
	if err != nil {
		return nil, err
	}
	serverMetrics, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err = startProcess(c.LogDir, "argocd-server", argocd, []string{
		"--namespace", ArgoNamespace, "--insecure",
		"--address", "127.0.0.1", "--port", strconv.Itoa(serverPort),
		"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(serverMetrics),
		"--repo-server", addr(repoPort), "--repo-server-plaintext",
		"--redis", addr(redisPort),
		"--staticassets", dir,
		"--loglevel", "debug",
	}, append([]string{"ARGOCD_BINARY_NAME=argocd-server"}, env...))
	if err != nil {
		return nil, err
	}
	a.procs = append(a.procs, p)
	a.Server, a.WebhookURL = p, "http://"+addr(serverPort)+"/api/webhook"
	if err := waitHTTP(ctx, p, "http://"+addr(serverPort)+"/healthz", nil, 2*time.Minute); err != nil {
		return nil, err
	}
	return a, nil
}

// Stop stops Argo CD's processes, the last started first.
func (a *ArgoCD) Stop() {
	for i := len(a.procs) - 1; i >= 0; i-- {
		a.procs[i].Stop(10 * time.Second)
	}
	a.procs = nil
	// The repo-server's gpg made its key ring with a gpg-agent, which outlives it otherwise.
	if _, err := os.Stat(filepath.Join(a.gnupgHome, "trustdb.gpg")); err == nil {
		_ = exec.Command("gpgconf", "--homedir", a.gnupgHome, "--kill", "all").Run()
	}
}

// Alive fails when one of Argo CD's processes has exited.
func (a *ArgoCD) Alive() error {
	for _, p := range a.procs {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.Log)
		}
	}
	return nil
}

func waitTCP(ctx context.Context, p *process, address string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.Log)
		}
		conn, err := net.DialTimeout("tcp", address, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}
