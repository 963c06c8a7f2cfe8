package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gitbroker/gitbroker/verify"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

const echoConfiguration = `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: akri-debug-echo
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["foo0", "foo1"]
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: nginx:stable-alpine
`

func TestAgentRefusesBadNodeNames(t *testing.T) {
	for _, node := range []string{"../x", "a/b", "Edge-A", ""} {
		t.Run(node, func(t *testing.T) {
			t.Setenv("NODE_NAME", "")
			code, _, stderr := gitbroker(t, "agent", "--allow-debug-echo", "--dir", t.TempDir(), "--node", node, "--once")
			require.Equal(t, exitInvalid, code)
			require.Contains(t, stderr, "node name")
		})
	}
	code, _, stderr := gitbroker(t, "agent", "--allow-debug-echo", "--node", "edge-a", "--once")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "give exactly one of --git and --dir")
}

func TestAgentOnceWithDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "configurations"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "configurations", "echo.yaml"), []byte(echoConfiguration), 0o644))
	t.Setenv("NODE_NAME", "edge-b")
	code, stdout, stderr := gitbroker(t, "agent", "--allow-debug-echo", "--dir", dir, "--once", "--discovery-handlers-dir", "",
		"--debug-echo-availability-file", filepath.Join(dir, "nothing"))
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "inventory/edge-b.yaml: 2 device(s)\n", stdout)
	b, err := os.ReadFile(filepath.Join(dir, "inventory", "edge-b.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(b), "DEBUG_ECHO_DESCRIPTION: foo1")
}

var (
	binaryOnce sync.Once
	binaryDir  string
	binaryPath string
	binaryErr  error
)

// TestMain removes the binary the tests built: a folder of about 100 MB
// per run would otherwise stay in the temp folder.
func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}

// binary builds gitbroker once for the tests that need a real process
// (signals, its own stderr).
func binary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gitbroker-bin-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryDir = dir
		binaryPath = filepath.Join(dir, "gitbroker")
		out, err := exec.Command("go", "build", "-o", binaryPath, ".").CombinedOutput()
		if err != nil {
			binaryErr = err
			t.Log(string(out))
		}
	})
	require.NoError(t, binaryErr)
	return binaryPath
}

// syncBuffer is a bytes.Buffer safe for a process writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const (
	agentUser     = "edge"
	agentPassword = "Agent-Passw0rd-31337"
)

// The agent as a daemon against a real git server: probes, metrics,
// commits, a device going offline, and SIGTERM. Its logs never hold the
// password.
func TestAgentDaemon(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/echo.yaml": echoConfiguration},
		gitsynctest.WithAuth(agentUser, agentPassword))
	tmp := t.TempDir()
	pwFile := filepath.Join(tmp, "password")
	require.NoError(t, os.WriteFile(pwFile, []byte(agentPassword+"\n"), 0o600))
	avail := filepath.Join(tmp, "availability")
	sockDir, err := os.MkdirTemp("", "gb-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(sockDir) })

	d := startDaemon(t, "agent started", "agent", "--allow-debug-echo",
		"--git", srv.URL(), "--git-username", agentUser, "--git-password-file", pwFile,
		"--node", "edge-a", "--interval", "100ms", "--grace-period", "0s",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0",
		"--discovery-handlers-dir", sockDir, "--debug-echo-availability-file", avail)
	require.Equal(t, "edge-a", d.Node)
	node := srv.On(verify.InventoryBranch("edge-a"))
	started, get := d, d.get

	require.Eventually(t, func() bool { code, _ := get(started.HealthAddr, "/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	code, _ := get(started.HealthAddr, "/healthz")
	require.Equal(t, http.StatusOK, code)
	inv, ok := node.File("inventory/edge-a.yaml")
	require.True(t, ok)
	require.Contains(t, inv, "id: foo0")
	require.Contains(t, inv, "id: foo1")

	_, metrics := get(started.MetricsAddr, "/metrics")
	require.Contains(t, metrics, `gitbroker_agent_pushes_total{result="pushed"} 1`)
	require.Contains(t, metrics, `gitbroker_agent_devices{configuration="akri-debug-echo",namespace="default"} 2`)
	require.Contains(t, metrics, "gitbroker_agent_push_duration_seconds_bucket")
	require.Contains(t, metrics, "gitbroker_agent_push_conflicts_total 0")

	// The devices go offline; with no grace period they leave at once.
	require.NoError(t, os.WriteFile(avail, []byte("OFFLINE"), 0o644))
	require.Eventually(t, func() bool {
		inv, _ := node.File("inventory/edge-a.yaml")
		return !strings.Contains(inv, "foo0")
	}, 30*time.Second, 20*time.Millisecond)
	commits := len(node.Log())
	time.Sleep(500 * time.Millisecond)
	require.Len(t, node.Log(), commits, "no change, no commit")

	require.Equal(t, []string{"configurations/echo.yaml"}, srv.Files(), "the agent never writes the people's branch")
	d.stop("agent stopped")
	_, err = os.Stat(filepath.Join(sockDir, "agent-registration.sock"))
	require.True(t, os.IsNotExist(err), "the registration socket is removed on exit")
	require.NotContains(t, d.stderr.String(), agentPassword)
}

// A wrong password fails the cycle with a clear log and exit code, and the
// password is in neither.
func TestAgentCredentialsAreNotLogged(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/echo.yaml": echoConfiguration},
		gitsynctest.WithAuth(agentUser, agentPassword))
	const wrong = "Wr0ng-Secret-4242"
	pwFile := filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(pwFile, []byte(wrong), 0o600))
	withCreds := strings.Replace(srv.URL(), "http://", "http://"+agentUser+":"+wrong+"@", 1)
	for name, args := range map[string][]string{
		"password file":   {"--git", srv.URL(), "--git-username", agentUser, "--git-password-file", pwFile},
		"password in URL": {"--git", withCreds},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(binary(t), append([]string{"agent", "--allow-debug-echo", "--once", "--node", "edge-a", "--discovery-handlers-dir", ""}, args...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			require.Equal(t, exitRefused, exit.ExitCode())
			require.Contains(t, stderr.String(), "authentication required")
			require.NotContains(t, stderr.String(), wrong)
			require.NotContains(t, stdout.String(), wrong)
		})
	}
}

// One cycle keeps a vanished device (it cannot know how long it has been gone) unless the
// grace periods are zero, as its help says.
func TestAgentOnceAndVanishedDevices(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "configurations"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "configurations", "echo.yaml"), []byte(echoConfiguration), 0o644))
	avail := filepath.Join(dir, "availability")
	once := func(extra ...string) string {
		t.Helper()
		code, stdout, stderr := gitbroker(t, append([]string{"agent", "--allow-debug-echo", "--dir", dir, "--node", "edge-b", "--once",
			"--discovery-handlers-dir", "", "--debug-echo-availability-file", avail}, extra...)...)
		require.Equal(t, exitOK, code, stderr)
		return stdout
	}
	require.Equal(t, "inventory/edge-b.yaml: 2 device(s)\n", once())
	require.NoError(t, os.WriteFile(avail, []byte("OFFLINE\n"), 0o644))
	require.Equal(t, "inventory/edge-b.yaml: 2 device(s)\n", once(), "kept for the grace period")
	require.Equal(t, "inventory/edge-b.yaml: 0 device(s)\n", once("--grace-period", "0", "--local-grace-period", "0"))
}
