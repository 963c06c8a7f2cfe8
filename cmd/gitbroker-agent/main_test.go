package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The agent binary holds no Kubernetes client, which is what makes it small for edge nodes,
// and neither the renderer nor the renderer's verification: a node reads only what the renderer
// published and signed, and never judges another writer's ref.
func TestNoKubernetesClientsNorTheRenderer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/gitbroker/gitbroker/agent", "the list is of the agent's dependencies")
	for _, dep := range deps {
		for _, heavy := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "k8s.io/kubernetes"} {
			require.False(t, strings.HasPrefix(dep, heavy), "gitbroker-agent imports %s", dep)
		}
		for _, own := range []string{"render", "renderer", "verify", "recorder"} {
			p := "github.com/gitbroker/gitbroker/" + own
			require.False(t, dep == p || strings.HasPrefix(dep, p+"/"), "gitbroker-agent imports %s", dep)
		}
	}
}

// gitbroker-agent agent is gitbroker agent: one cycle on a work tree writes the inventory.
func TestAgentOnce(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "configurations"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "configurations", "echo.yaml"), []byte(`apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: akri-debug-echo
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["foo0"]
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: nginx:stable-alpine
`), 0o644))
	var stdout, stderr bytes.Buffer
	code := run(t, []string{"agent", "--allow-debug-echo", "--dir", dir, "--node", "edge-a", "--once", "--discovery-handlers-dir", "",
		"--debug-echo-availability-file", filepath.Join(dir, "none")}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Equal(t, "inventory/edge-a.yaml: 1 device(s)\n", stdout.String())
	inv, err := os.ReadFile(filepath.Join(dir, "inventory", "edge-a.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(inv), "id: foo0")

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 2, run(t, []string{"agent", "--allow-debug-echo", "--dir", dir, "--node", "edge-a", "--once", "--log-level", "loud"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "--log-level \"loud\"")

	// DRA mode needs a Kubernetes client, which this binary leaves out: it says which one to run.
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 2, run(t, []string{"agent", "--dir", dir, "--node", "edge-a", "--device-allocation", "dra"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "run `gitbroker agent`")
	// A mode that is neither fails at start, naming both.
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 2, run(t, []string{"agent", "--dir", dir, "--node", "edge-a", "--device-allocation", "DRA"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `--device-allocation must be devicePlugin or dra, got "DRA"`)
}

func run(t *testing.T, args []string, stdout, stderr *bytes.Buffer) int {
	t.Helper()
	return runRoot(context.Background(), args, stdout, stderr)
}

// gitbroker-agent version names itself, not gitbroker.
func TestVersionNamesTheAgent(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(t, []string{"version"}, &stdout, &stderr), stderr.String())
	require.True(t, strings.HasPrefix(stdout.String(), "gitbroker-agent "), stdout.String())
}
