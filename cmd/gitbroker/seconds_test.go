package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/verify"
)

// udevCamera is a udev Configuration whose brokers are Deployments.
const udevCamera = `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: cam
spec:
  discoveryHandler:
    name: udev
    discoveryDetails: |
      udevRules:
      - 'KERNEL=="gbcam[0-9]*"'
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: example.com/broker:1
`

// plug adds a device to a fixture root as the kernel and udevd would: its sysfs folder, then
// udevd's database entry (which the agent watches).
func plug(t *testing.T, root, name string, minor int) {
	t.Helper()
	dir := filepath.Join(root, "sys", "devices", "virtual", "misc", name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "uevent"), fmt.Appendf(nil, "MAJOR=10\nMINOR=%d\nDEVNAME=%s\n", minor, name), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "run", "udev", "data", fmt.Sprintf("c10:%d", minor)), []byte("E:ID_MODEL=cam\n"), 0o644))
}

// secondsLoop runs the real renderer and agent binaries with intervals of an hour, so anything
// that moves within the test moved on an event: the kernel's or udevd's for the agent, a push
// notification for the renderer.
type secondsLoop struct {
	srv      *gitsynctest.Server
	root     string
	renderer *daemon
	agent    *daemon
}

func startSecondsLoop(t *testing.T, hostWebhook bool) *secondsLoop {
	t.Helper()
	l := &secondsLoop{srv: gitsynctest.NewServer(t, "main", map[string]string{"configurations/cam.yaml": udevCamera}), root: t.TempDir()}
	require.NoError(t, os.MkdirAll(filepath.Join(l.root, "sys", "devices"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(l.root, "run", "udev", "data"), 0o755))
	secrets := t.TempDir()
	host, nudge := filepath.Join(secrets, "host"), filepath.Join(secrets, "nudge")
	require.NoError(t, os.WriteFile(host, []byte("host-secret\n"), 0o600))
	require.NoError(t, os.WriteFile(nudge, []byte("nudge-secret\n"), 0o600))
	l.renderer = startDaemon(t, "renderer started", "render", "--git", l.srv.URL(), "--watch", "--interval", "1h",
		"--webhook-addr", "127.0.0.1:0", "--webhook-secret-file", host, "--nudge-secret-file", nudge,
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	require.NotEmpty(t, l.renderer.WebhookAddr)
	rendered := l.srv.On(verify.RenderedBranch)
	require.Eventually(t, func() bool { return rendered.Head() != "" }, 30*time.Second, 20*time.Millisecond)
	args := []string{"agent", "--allow-debug-echo", "--git", l.srv.URL(), "--node", "edge-a", "--interval", "1h", "--udev-root", l.root,
		"--device-plugin-dir", "", "--discovery-handlers-dir", "", "--local-grace-period", "0s",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"}
	if hostWebhook {
		// The git host tells the renderer of every push; the agent does not nudge.
		l.srv.SendWebhooks("http://"+l.renderer.WebhookAddr+"/hook", []byte("host-secret"))
	} else {
		args = append(args, "--renderer-url", "http://"+l.renderer.WebhookAddr+"/hook", "--nudge-secret-file", nudge)
	}
	l.agent = startDaemon(t, "agent started", args...)
	require.Eventually(t, func() bool { code, _ := l.agent.get(l.agent.HealthAddr, "/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	return l
}

// brokerRendered waits for a Deployment of the device on the rendered branch and returns how
// long it took from start.
func (l *secondsLoop) brokerRendered(t *testing.T, device string, start time.Time) time.Duration {
	t.Helper()
	rendered := l.srv.On(verify.RenderedBranch)
	require.Eventually(t, func() bool {
		for _, p := range rendered.Files() {
			if !strings.Contains(p, "deployment-") {
				continue
			}
			if b, _ := rendered.File(p); strings.Contains(b, device) {
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "a broker for %s on %s, with every interval an hour", device, verify.RenderedBranch)
	return time.Since(start)
}

// A plugged device reaches the rendered branch within seconds with every interval an hour:
// udevd's database entry wakes the agent, whose push nudges the renderer.
func TestSecondsPluggedDeviceRendersOnEvents(t *testing.T) {
	l := startSecondsLoop(t, false)
	for i := range 3 {
		name := fmt.Sprintf("gbcam%d", i)
		start := time.Now()
		plug(t, l.root, name, 200+i)
		took := l.brokerRendered(t, "/dev/"+name, start)
		t.Logf("%s plugged to broker rendered: %s", name, took.Round(time.Millisecond))
	}
	_, metrics := l.renderer.get(l.renderer.MetricsAddr, "/metrics")
	require.Contains(t, metrics, `gitbroker_renderer_notifications_total{result="accepted"}`)
	require.Contains(t, metrics, `gitbroker_renderer_wakes_total{trigger="notification"}`)
	require.Contains(t, metrics, `gitbroker_renderer_trigger_active{trigger="webhook"} 1`)
	require.NotContains(t, l.agent.stderr.String(), "nudge-secret")
	require.NotContains(t, l.renderer.stderr.String(), "nudge-secret")
}

// The same with the git host's push webhook instead of the agent's nudge, as a host that
// sends webhooks does (GitHub's form, from the server's post-receive hook).
func TestSecondsHostWebhookWakesTheRenderer(t *testing.T) {
	l := startSecondsLoop(t, true)
	start := time.Now()
	plug(t, l.root, "gbcam7", 207)
	took := l.brokerRendered(t, "/dev/gbcam7", start)
	t.Logf("plugged to broker rendered through the host's webhook: %s", took.Round(time.Millisecond))
	require.Positive(t, l.srv.WebhooksSent())
	// A forged webhook is refused and wakes nothing.
	req, err := http.NewRequest(http.MethodPost, "http://"+l.renderer.WebhookAddr+"/hook", strings.NewReader(`{"ref":"refs/heads/main"}`))
	require.NoError(t, err)
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", "sha256=00")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}
