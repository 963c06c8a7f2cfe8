//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/verify"
)

// standbyNode is the kwok node that sees the real node's shared camera too.
const standbyNode = "edge-standby"

// lookoutConfiguration is a Pod broker for a shared network camera (debugEcho, shared) that the
// real node and the standby both see, one broker (capacity 1).
const lookoutConfiguration = `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: lookout
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions:
      - "lookout-cam"
  capacity: 1
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: ` + nodeRegistry + `/pause:e2e
`

// nodeLost shows failover with the real node as the lost one: its kubelet stopped for longer
// than the node controller's monitor grace and the recorder's node-loss grace, the broker of the
// shared camera it held moves to the standby that sees the camera too, while its unshared
// devices' brokers stay; the node back Ready displaces nothing (placement is sticky), and losing
// the standby, as a person may choose to, brings the broker back to the real node.
func nodeLost(t *testing.T, n *Node, srv *gitsynctest.Server, rendererPub string) {
	t.Helper()
	ctx := context.Background()
	srv.On("main").Commit(map[string]string{"configurations/lookout.yaml": lookoutConfiguration}, nil, "lookout camera")
	lookoutRunsOn(t, realNode, 2*time.Minute)
	// The standby sees the camera too: it takes the broker only when the real node is lost.
	require.NoError(t, cluster.AddNode(ctx, standbyNode))
	startGitbroker(t, "agent-"+standbyNode, "agent started", "agent", "--allow-debug-echo",
		"--git", srv.URL(), "--branch", "main", "--node", standbyNode, "--interval", agentInterval.String(),
		"--debug-echo-shared=true", "--discovery-handlers-dir", "",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	rendered := srv.On(verify.RenderedBranch)
	eventually(t, 2*time.Minute, "the standby's report of the camera rendered", func() (bool, string) {
		inv, _ := rendered.File(api.InventoryPath(standbyNode))
		return strings.Contains(inv, "lookout-cam"), "not yet"
	})
	require.Equal(t, []string{realNode}, renderedLookout(t, rendered), "a newly reporting node displaces no broker")
	lookoutRunsOn(t, realNode, time.Minute)
	sharedOnce(t, srv, rendererPub)
	unshared := brokerDeployments(t, "plc")

	start := time.Now()
	n.StopKubelet()
	eventually(t, 3*time.Minute, "the recorder to record "+realNode+" lost", func() (bool, string) {
		loss, ok := srv.On(verify.StatusBranch).File(api.NodeLossPath(realNode))
		return ok && strings.Contains(loss, "reason: NotReady"), "not yet"
	})
	recorded := time.Since(start)
	lookoutRunsOn(t, standbyNode, 2*time.Minute)
	t.Logf("kubelet stopped: %s recorded lost (NotReady) after %s, the shared camera's broker running on %s after %s",
		realNode, recorded.Round(100*time.Millisecond), standbyNode, time.Since(start).Round(100*time.Millisecond))
	require.Equal(t, unshared, brokerDeployments(t, "plc"), "an unshared device's broker stays: nothing else reaches it")

	require.NoError(t, n.StartKubelet(ctx))
	eventually(t, time.Minute, realNode+"'s loss removed and rendered", func() (bool, string) {
		_, recorded := srv.On(verify.StatusBranch).File(api.NodeLossPath(realNode))
		_, inRender := rendered.File(api.NodeLossPath(realNode))
		return !recorded && !inRender, fmt.Sprintf("recorded %v, rendered %v", recorded, inRender)
	})
	require.Equal(t, []string{standbyNode}, renderedLookout(t, rendered), "a node back Ready displaces no broker")
	lookoutRunsOn(t, standbyNode, time.Minute)

	start = time.Now()
	require.NoError(t, cluster.Client.CoreV1().Nodes().Delete(ctx, standbyNode, metav1.DeleteOptions{}))
	lookoutRunsOn(t, realNode, 2*time.Minute)
	t.Logf("the standby deleted: the broker back on %s after %s", realNode, time.Since(start).Round(100*time.Millisecond))
}

// lookoutRunsOn waits for the lookout broker to be one Deployment for node, and one running Pod
// of it there.
func lookoutRunsOn(t *testing.T, want string, within time.Duration) {
	t.Helper()
	eventually(t, within, "the lookout broker running on "+want, func() (bool, string) {
		ds := brokerDeployments(t, "lookout")
		pods, err := cluster.Client.CoreV1().Pods(deviceNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelConfiguration + "=lookout"})
		if err != nil || len(ds) != 1 {
			return false, fmt.Sprint("Deployments ", ds, " ", err)
		}
		var running []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && strings.HasPrefix(p.Name, ds[0]+"-") {
				running = append(running, p.Spec.NodeName)
			}
		}
		if len(running) != 1 {
			return false, fmt.Sprintf("Deployment %s, running on %v", ds[0], running)
		}
		return running[0] == want && strings.HasPrefix(ds[0], want+"-"), ds[0] + " runs on " + running[0]
	})
}

// brokerDeployments are the names of a Configuration's broker Deployments in the cluster.
func brokerDeployments(t *testing.T, configuration string) []string {
	t.Helper()
	list, err := cluster.Client.AppsV1().Deployments(deviceNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelConfiguration + "=" + configuration})
	require.NoError(t, err)
	var names []string
	for _, d := range list.Items {
		names = append(names, d.Name)
	}
	return names
}

// renderedLookout are the nodes of the lookout broker Deployments the renderer's last commit holds.
func renderedLookout(t *testing.T, rendered *gitsynctest.Server) []string {
	t.Helper()
	var nodes []string
	for _, f := range rendered.Files() {
		if strings.HasPrefix(f, "rendered/"+deviceNamespace+"/lookout/deployment-") {
			for _, node := range []string{realNode, standbyNode} {
				if strings.HasPrefix(f, "rendered/"+deviceNamespace+"/lookout/deployment-"+node+"-") {
					nodes = append(nodes, node)
				}
			}
		}
	}
	return nodes
}
