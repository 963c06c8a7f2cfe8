//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/blake2b"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// Two nodes that both see one device: a Job broker and a Pod broker on it.
const (
	sharedNamespace     = "shared"
	sharedFluxNamespace = "flux-shared"
	sharedJobConfig     = "shared-firmware"
	sharedPodConfig     = "shared-echo"
)

var sharedNodes = []string{"shared-1", "shared-2"}

// sharedInstance is Akri's instance name of a shared device.
func sharedInstance(configuration, deviceID string) string {
	h, _ := blake2b.New(3, nil)
	h.Write([]byte(deviceID))
	return configuration + "-" + hex.EncodeToString(h.Sum(nil))
}

// TestSharedDevices renders brokers for a device that two nodes see, on a
// repository, agents, renderer and Flux objects of its own: the Job must be
// accepted by the API server (one node selector term per node) and run on
// one of the two nodes, and each node gets its broker Pod. A node that is lost (deleted, as the
// recorder records it) has its broker moved to a third node that sees the device.
func TestSharedDevices(t *testing.T) {
	ctx := context.Background()
	for _, ns := range []string{sharedNamespace, sharedFluxNamespace} {
		require.NoError(t, cluster.CreateNamespace(ctx, ns))
	}
	srv := gitsynctest.NewServer(t, "main", map[string]string{
		"gitbroker.yaml": `apiVersion: gitbroker.dev/v1alpha1
kind: Settings
spec:
  defaultNamespace: ` + sharedNamespace + `
  flux:
    namespace: ` + sharedFluxNamespace + `
    retryInterval: 5s
`,
		"configurations/" + sharedJobConfig + ".yaml": `apiVersion: gitbroker.dev/v1alpha1
kind: Configuration
metadata:
  name: ` + sharedJobConfig + `
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions:
      - "plc-9"
  brokerSpec:
    brokerJobSpec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: flash
            image: "busybox:1.36"
            command: ["sh", "-c", "echo flashing $DEBUG_ECHO_DESCRIPTION"]
`,
		"configurations/" + sharedPodConfig + ".yaml": `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: ` + sharedPodConfig + `
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions:
      - "cam-9"
  capacity: 2
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: "nginx:stable-alpine"
  instanceServiceSpec:
    ports:
    - {name: http, port: 80, targetPort: 80}
`,
	})
	// deploy/flux's objects, in a Flux namespace of this test's, verifying the renderer's key.
	key := filepath.Join(t.TempDir(), "renderer")
	_, _, err := trust.LoadOrCreateSigner(key, "renderer")
	require.NoError(t, err)
	applyFlux(t, sharedFluxNamespace, srv.URL(), key+".pub", sharedNamespace)
	for _, n := range sharedNodes {
		require.NoError(t, cluster.AddNode(ctx, n))
		startGitbroker(t, "agent-"+n, "agent started", "agent", "--allow-debug-echo",
			"--git", srv.URL(), "--branch", "main", "--node", n, "--interval", agentInterval.String(),
			"--debug-echo-shared=true", "--discovery-handlers-dir", "",
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	}
	// A rendered Job is frozen, its pinning included: rendered before every node that sees the
	// device had reported it, it would stay pinned to the first. The renderer starts once both
	// nodes' inventories hold the device.
	eventually(t, time.Minute, "both nodes to report the shared devices", func() (bool, string) {
		for _, n := range sharedNodes {
			inv, ok := srv.FileAt("gitbroker/inventory/"+n, "inventory/"+n+".yaml")
			if !ok || !strings.Contains(inv, "plc-9") || !strings.Contains(inv, "cam-9") {
				return false, n + " has not reported them yet"
			}
		}
		return true, ""
	})
	startGitbroker(t, "renderer-shared", "renderer started", "render",
		"--git", srv.URL(), "--branch", "main", "--watch", "--interval", rendererInterval.String(), "--signing-key", key, "--first-render",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")

	t.Run("the Job is created and runs on one of the nodes", func(t *testing.T) {
		inst := sharedInstance(sharedJobConfig, "plc-9")
		var job batchv1.Job
		eventually(t, 3*time.Minute, "the shared device's Job to complete", func() (bool, string) {
			list, err := cluster.Client.BatchV1().Jobs(sharedNamespace).List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=" + sharedJobConfig})
			require.NoError(t, err)
			if len(list.Items) != 1 {
				return false, fmt.Sprintf("%d Jobs", len(list.Items))
			}
			job = list.Items[0]
			return job.Status.Succeeded == 1, fmt.Sprintf("Job %s: %d succeeded", job.Name, job.Status.Succeeded)
		})
		require.Equal(t, inst, job.Labels["akri.sh/instance"])
		var pinned []string
		for _, term := range job.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			require.Len(t, term.MatchFields, 1)
			require.Equal(t, "metadata.name", term.MatchFields[0].Key)
			require.Len(t, term.MatchFields[0].Values, 1, "the API server accepts one value for metadata.name")
			pinned = append(pinned, term.MatchFields[0].Values[0])
		}
		require.Equal(t, sharedNodes, pinned, "one term per node that sees the device")
		pods, err := cluster.Client.CoreV1().Pods(sharedNamespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
		require.NoError(t, err)
		require.NotEmpty(t, pods.Items)
		for _, p := range pods.Items {
			require.Contains(t, sharedNodes, p.Spec.NodeName, "Job Pod %s runs where the device is", p.Name)
		}
	})

	t.Run("each node runs its broker Pod", func(t *testing.T) {
		inst := sharedInstance(sharedPodConfig, "cam-9")
		eventually(t, 3*time.Minute, "a running broker Pod on each node", func() (bool, string) {
			list, err := cluster.Client.CoreV1().Pods(sharedNamespace).List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=" + sharedPodConfig})
			require.NoError(t, err)
			var running []string
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					require.True(t, strings.HasPrefix(p.Name, p.Spec.NodeName+"-"+inst+"-"), "%s is a Pod of Deployment %s-%s", p.Name, p.Spec.NodeName, inst)
					require.Equal(t, p.Labels["akri.sh/target-node"], p.Spec.NodeName)
					running = append(running, p.Spec.NodeName)
				}
			}
			sort.Strings(running)
			return fmt.Sprint(running) == fmt.Sprint(sharedNodes), fmt.Sprintf("running on %v", running)
		})
		svc, err := cluster.Client.CoreV1().Services(sharedNamespace).Get(ctx, inst+"-svc", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"controller": "akri.sh", "akri.sh/instance": inst}, svc.Spec.Selector)
		waitFluxAppliedIn(t, srv, sharedFluxNamespace)
	})

	t.Run("a lost node's broker moves to a node that sees the device, and back when that one is lost", func(t *testing.T) {
		startGitbroker(t, "recorder-shared", "recorder started", "record", "--git", srv.URL(), "--kubeconfig", cluster.Kubeconfig,
			"--namespace", sharedNamespace, "--batch", "200ms", "--node-loss-grace", "3s",
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
		// A third node sees the device too: the brokers stay where they are (capacity 2).
		standby := "shared-3"
		require.NoError(t, cluster.AddNode(ctx, standby))
		startGitbroker(t, "agent-"+standby, "agent started", "agent", "--allow-debug-echo",
			"--git", srv.URL(), "--branch", "main", "--node", standby, "--interval", agentInterval.String(),
			"--debug-echo-shared=true", "--discovery-handlers-dir", "",
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
		rendered := srv.On(verify.RenderedBranch)
		eventually(t, time.Minute, "the standby's inventory rendered", func() (bool, string) {
			inv, _ := rendered.File("inventory/" + standby + ".yaml")
			return strings.Contains(inv, "cam-9"), "not yet"
		})
		waitFluxAppliedIn(t, srv, sharedFluxNamespace)
		require.Equal(t, sharedNodes, brokerNodes(t, ctx), "a newly reporting node displaces no broker")

		lose := func(node string) {
			t.Helper()
			start := time.Now()
			require.NoError(t, cluster.Client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))
			eventually(t, time.Minute, "the recorder to record "+node+" lost", func() (bool, string) {
				loss, ok := srv.On(verify.StatusBranch).File("status/nodes/" + node + ".yaml")
				return ok && strings.Contains(loss, "reason: Gone"), "not yet"
			})
			recorded := time.Since(start)
			eventually(t, 2*time.Minute, "the broker to move off "+node, func() (bool, string) {
				nodes := brokerNodes(t, ctx)
				return len(nodes) == 2 && !slices.Contains(nodes, node), fmt.Sprintf("brokers on %v", nodes)
			})
			t.Logf("node %s deleted: recorded lost after %s (grace 3s), its broker running elsewhere after %s",
				node, recorded.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
		}
		lose("shared-1")
		require.Equal(t, []string{"shared-2", standby}, brokerNodes(t, ctx))

		// shared-1 comes back: its record goes, and the broker stays on the standby (sticky).
		require.NoError(t, cluster.AddNode(ctx, "shared-1"))
		eventually(t, time.Minute, "shared-1's loss removed and rendered", func() (bool, string) {
			_, recorded := srv.On(verify.StatusBranch).File("status/nodes/shared-1.yaml")
			_, inRender := rendered.File("status/nodes/shared-1.yaml")
			return !recorded && !inRender, fmt.Sprintf("recorded %v, rendered %v", recorded, inRender)
		})
		waitFluxAppliedIn(t, srv, sharedFluxNamespace)
		require.Equal(t, []string{"shared-2", standby}, brokerNodes(t, ctx), "a node that is back displaces no broker")

		// Choosing to move it back: the standby is lost in its turn.
		lose(standby)
		require.Equal(t, sharedNodes, brokerNodes(t, ctx))
	})
}

// brokerNodes are the nodes the shared device's broker Pods run on, sorted, once every broker
// Pod runs.
func brokerNodes(t *testing.T, ctx context.Context) []string {
	t.Helper()
	list, err := cluster.Client.CoreV1().Pods(sharedNamespace).List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=" + sharedPodConfig})
	require.NoError(t, err)
	var nodes []string
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	sort.Strings(nodes)
	return nodes
}
