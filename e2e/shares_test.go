//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/publication"
)

// sharedOnce shows a shared device's capacity counted once across the cluster (DESIGN.md,
// "Devices counted once across the cluster"): the lookout camera, capacity 1, seen by the real
// node and the kwok standby, serves one user Pod, and a second stays Pending. The real node's
// agent offers its share through its device plugin; the test plays the standby's kubelet,
// posting the slots the standby's share gives it (publication.Shares, which its agent reads), as
// kubelet posts a device plugin's healthy devices. Without shares each node offered the whole
// capacity: two users of a capacity-1 camera.
func sharedOnce(t *testing.T, srv *gitsynctest.Server, rendererPub string) {
	t.Helper()
	ctx := context.Background()
	pub, err := os.ReadFile(rendererPub)
	require.NoError(t, err)
	// The line deploy/'s gitbroker-renderer-key ConfigMap holds (DEPLOYING.md, step 3).
	keys, err := publication.ParseRendererKeys(rendererPub, append([]byte("renderer "), pub...))
	require.NoError(t, err)
	shares := func(node string) map[string]int {
		shard, err := gitsync.New(srv.URL(), api.AcceptedBranch(api.InventoryBranch(node)))
		require.NoError(t, err)
		s, err := publication.Shares(shard, keys, node)(ctx)
		require.NoError(t, err)
		return s
	}
	var inst string
	eventually(t, 2*time.Minute, "the lookout camera's slot given to "+realNode, func() (bool, string) {
		real, standby := shares(realNode), shares(standbyNode)
		for name, n := range real {
			if strings.HasPrefix(name, "lookout-") && n == 1 {
				inst = name
			}
		}
		return inst != "" && len(standby) == 0, fmt.Sprintf("%s: %v, %s: %v", realNode, real, standbyNode, standby)
	})
	// The standby's kubelet posts what its share gives: no slot of the camera.
	standby, err := cluster.Client.CoreV1().Nodes().Get(ctx, standbyNode, metav1.GetOptions{})
	require.NoError(t, err)
	for _, r := range []corev1.ResourceName{"akri.sh/lookout", corev1.ResourceName("akri.sh/" + inst)} {
		standby.Status.Capacity[r] = resource.MustParse("1")
		standby.Status.Allocatable[r] = resource.MustParse("0")
	}
	_, err = cluster.Client.CoreV1().Nodes().UpdateStatus(ctx, standby, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, realNode+" to offer its one slot of akri.sh/lookout", func() (bool, string) {
		node, err := cluster.Client.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q, c := node.Status.Allocatable["akri.sh/lookout"], node.Status.Capacity[corev1.ResourceName("akri.sh/"+inst)]
		return q.String() == "1" && c.String() == "1", "allocatable " + q.String() + ", capacity of the instance " + c.String()
	})

	// Two users of the camera, wherever the scheduler puts them.
	var users []string
	for i := range 2 {
		name := fmt.Sprintf("lookout-user-%d", i)
		labels := map[string]string{"app": name}
		mustCreate(t, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: deviceNamespace},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000)},
						Containers: []corev1.Container{{Name: "user", Image: nodeRegistry + "/pause:e2e",
							Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"akri.sh/lookout": resource.MustParse("1")}}}},
					},
				},
			},
		})
		users = append(users, name)
	}
	eventually(t, 2*time.Minute, "one user of the capacity-1 camera running, the other unscheduled", func() (bool, string) {
		var running, pending []string
		for _, u := range users {
			pods, err := cluster.Client.CoreV1().Pods(deviceNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + u})
			if err != nil || len(pods.Items) != 1 {
				return false, fmt.Sprint(u, " ", err)
			}
			p := pods.Items[0]
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, u+" on "+p.Spec.NodeName)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "Insufficient akri.sh/lookout") {
					pending = append(pending, u)
				}
			}
		}
		return len(running) == 1 && len(pending) == 1 && strings.HasSuffix(running[0], " on "+realNode),
			fmt.Sprintf("running %v, unscheduled %v", running, pending)
	})
	for _, u := range users {
		require.NoError(t, cluster.Client.AppsV1().Deployments(deviceNamespace).Delete(ctx, u, metav1.DeleteOptions{}))
	}
}

// twoDevices shows Akri's configuration-level resource handing out distinct devices: with a
// second cam device plugged, a user that asks for two akri.sh/cam gets both, each device node in
// its /dev with its cgroup rule (it opens both), never one device twice.
func twoDevices(t *testing.T, n *Node, sysRoot, extra string) {
	t.Helper()
	ctx := context.Background()
	// The user of the first device's second slot goes: each device has its broker and one free slot.
	require.NoError(t, cluster.Client.AppsV1().Deployments(deviceNamespace).Delete(ctx, extra, metav1.DeleteOptions{}))
	deviceNode(t, n, sysRoot, "gitbroker-e2e1")
	waitBrokerOpened(t, n, "cam", "/dev/gitbroker-e2e1")
	eventually(t, 2*time.Minute, realNode+" to offer both cam devices through akri.sh/cam", func() (bool, string) {
		node, err := cluster.Client.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := node.Status.Allocatable["akri.sh/cam"]
		return q.String() == "2", "allocatable " + q.String()
	})
	var args []string
	for _, dev := range []string{"gitbroker-e2e0", "gitbroker-e2e1"} {
		inst := instance("cam", "/devices/virtual/misc/"+dev, realNode)
		args = append(args, "UDEV_DEVNODE_"+strings.ToUpper(strings.TrimPrefix(inst, "cam-")))
	}
	labels := map[string]string{"app": "cam-pair"}
	mustCreate(t, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "cam-pair", Namespace: deviceNamespace},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": realNode},
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
						SupplementalGroups: []int64{deviceGroup}},
					Containers: []corev1.Container{{Name: "broker", Image: brokerImage, Args: args,
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"akri.sh/cam": resource.MustParse("2")}}}},
				},
			},
		},
	})
	pod := waitOpened(t, n, "app=cam-pair", "/dev/gitbroker-e2e0")
	require.Equal(t, pod, waitOpened(t, n, "app=cam-pair", "/dev/gitbroker-e2e1"), "one Pod, both devices")
	require.NoError(t, cluster.Client.AppsV1().Deployments(deviceNamespace).Delete(ctx, "cam-pair", metav1.DeleteOptions{}))
}
