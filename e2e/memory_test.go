//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/internal/procmem"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// The recorder's real binary, which needs an API server (so docs/TRUST.md's adversary in make
// test runs only the renderer's and the agent's), under the same memory bombs: 62 MB blobs of
// zeros and the densest YAML under its file limit, pushed unsigned onto the branches it reads
// (gitbroker/status, its own, and its shard of the accepted tips, for the tip the renderer
// accepted; gitbroker/rendered too, where that tip was read from before). Its
// peak resident memory stays inside deploy/'s limit, with GOMEMLIMIT as the binary sets it from
// its container's limit.
func TestRecorderStaysInsideItsMemoryLimit(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"gitbroker.yaml": "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec: {}\n"})
	key := filepath.Join(t.TempDir(), "recorder")
	_, _, err := trust.LoadOrCreateSigner(key, trust.PrincipalRecorder)
	require.NoError(t, err)
	renderer, _, err := trust.LoadOrCreateSigner(filepath.Join(t.TempDir(), "renderer"), trust.PrincipalRenderer)
	require.NoError(t, err)
	rendererKey := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(rendererKey, []byte(renderer.AllowedSignersLine(trust.PrincipalRenderer)+"\n"), 0o644))
	zeros := strings.Repeat("\x00", 62<<20)
	var dense strings.Builder
	dense.WriteString("apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata: {name: dense, namespace: plant}\nspec:\n  pods:\n")
	for dense.Len() < gitsync.RecorderMaxFileSize-100 {
		dense.WriteString("  - {a: b}\n")
	}
	srv.On(verify.StatusBranch).Commit(map[string]string{
		"status/jobs/plant/zeros-a.yaml": zeros + "a", "status/jobs/plant/zeros-b.yaml": zeros + "b", "status/jobs/plant/dense.yaml": dense.String(),
	}, nil, "bombs on the recorder's ref")
	srv.On(verify.RenderedBranch).Commit(map[string]string{render.MetadataPath: dense.String(), "rendered/zeros.yaml": zeros}, nil, "bombs on the rendered branch")
	shard := api.AcceptedShard(verify.StatusBranch)
	srv.On(api.AcceptedBranch(verify.StatusBranch)).Commit(map[string]string{api.AcceptedFile(shard): dense.String(), api.AcceptedFolder(shard) + "/zeros.yaml": zeros}, nil, "bombs on the recorder's accepted tip")

	limit, err := procmem.DeployLimit("../deploy/recorder/deployment.yaml")
	require.NoError(t, err)
	p := startGitbrokerEnv(t, "recorder-bombs", "recorder started", []string{fmt.Sprintf("GOMEMLIMIT=%d", limit/10*9)},
		"record", "--git", srv.URL(), "--kubeconfig", cluster.Kubeconfig, "--signing-key", key, "--renderer-key", rendererKey, "--batch", "200ms", "--node-loss-grace", "1s",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	// It reads both branches when it writes: make it record a node lost (one it saw, then gone).
	ctx := context.Background()
	require.NoError(t, cluster.AddNode(ctx, "memory-1"))
	time.Sleep(2 * time.Second)
	require.NoError(t, cluster.Client.CoreV1().Nodes().Delete(ctx, "memory-1", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the recorder to record memory-1 lost", func() (bool, string) {
		_, ok := srv.On(verify.StatusBranch).File("status/nodes/memory-1.yaml")
		return ok, "not yet"
	})
	done, exitErr := p.Exited()
	require.False(t, done, "the recorder exited: %v; see %s", exitErr, p.Log)
	peak, err := procmem.Peak(p.cmd.Process.Pid)
	require.NoError(t, err)
	t.Logf("recorder: peak RSS %d MiB (deploy/ limit %d MiB)", peak>>20, limit>>20)
	require.Less(t, peak, limit, "the recorder stays inside its deploy/ memory limit")
}
