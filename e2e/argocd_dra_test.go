//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestArgoCDDRA shows DRA mode's objects applied by Argo CD through deploy/argocd, as Flux
// applies them in TestRealNodeDRA: the AppProject admits the cluster-wide ResourceSlices and
// DeviceClasses and the namespaced ResourceClaimTemplates, the Application of the folder syncs
// them with the broker, and the real scheduler allocates the broker's claim from the rendered
// slice: a shared camera two kwok nodes see, one device, one broker on one of them.
func TestArgoCDDRA(t *testing.T) {
	const ns, nodeA, nodeB = "vineyard", "vineyard-1", "vineyard-2"
	ctx := context.Background()
	c, argo, keys, rendererKey, keyID := startArgoCluster(t, "argocd-dra-cluster")
	srv := gitsynctest.NewServer(t, "main", map[string]string{
		"gitbroker.yaml":              "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: " + ns + "\n  deviceAllocation: dra\n",
		"configurations/lookout.yaml": strings.Replace(lookoutClaiming, nodeRegistry+"/pause:e2e", "nginx:stable-alpine", 1),
	})
	avail := filepath.Join(keys, "availability")
	require.NoError(t, os.WriteFile(avail, nil, 0o644))
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(gitbroker, args...).CombinedOutput()
		require.NoError(t, err, "gitbroker %s: %s", strings.Join(args, " "), out)
	}
	for _, n := range []string{nodeA, nodeB} {
		require.NoError(t, c.AddNode(ctx, n))
		run("agent", "--allow-debug-echo", "--git", srv.URL(), "--node", n, "--once", "--debug-echo-shared=true",
			"--discovery-handlers-dir", "", "--debug-echo-availability-file", avail)
	}
	run("render", "--git", srv.URL(), "--signing-key", rendererKey, "--first-render")
	applyArgoCD(t, c, srv.URL(), ns, keyID)

	head := srv.On(verify.RenderedBranch).Head()
	waitApplicationSynced(t, c, argo, "gitbroker-"+ns+"-lookout", head, "Healthy")
	inst := instance("lookout", "lookout-cam", "")
	slice, err := c.Client.ResourceV1().ResourceSlices().Get(ctx, api.DRAResourceSliceName(ns, inst), metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{nodeA, nodeB}, slice.Spec.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Values)
	_, err = c.Client.ResourceV1().DeviceClasses().Get(ctx, api.DRADeviceClassName(ns, "lookout"), metav1.GetOptions{})
	require.NoError(t, err)
	_, err = c.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, inst, metav1.GetOptions{})
	require.NoError(t, err)

	// The scheduler allocated the broker's claim from the slice, on a node that reaches it.
	var pod corev1.Pod
	eventually(t, 2*time.Minute, "the lookout broker running with its claim allocated", func() (bool, string) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelConfiguration + "=lookout"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err, " ", len(pods.Items), " Pods")
		}
		pod = pods.Items[0]
		return pod.Status.Phase == corev1.PodRunning && len(pod.Status.ResourceClaimStatuses) == 1, fmt.Sprint(pod.Status.Phase, pod.Status.ResourceClaimStatuses)
	})
	require.True(t, slices.Contains([]string{nodeA, nodeB}, pod.Spec.NodeName), pod.Spec.NodeName)
	claim, err := c.Client.ResourceV1().ResourceClaims(ns).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, claim.Status.Allocation)
	require.Equal(t, api.DRAPool("", ns, inst, true), claim.Status.Allocation.Devices.Results[0].Pool)
	require.Equal(t, api.DRADriver, claim.Status.Allocation.Devices.Results[0].Driver)
}
