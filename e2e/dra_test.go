//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/verify"
)

// DRA mode's own namespaces: its ResourceSlices and brokers are never another test's.
const (
	draNamespace = "dra-devices"
	draFlux      = "flux-dra"
	draStandby   = "edge-dra-standby"
)

// lookoutClaiming is the lookout camera of lost_test.go, a shared debugEcho device the real node
// and a kwok standby both see, capacity 1, whose broker claims it.
var lookoutClaiming = lookoutConfiguration + `        resources:
          limits:
            "{{PLACEHOLDER}}": "1"
`

// freeConfiguration is Akri's discovery-only pattern: no broker, the devices for users' own
// workloads, which in DRA mode claim them through the Configuration's DeviceClass.
const freeConfiguration = `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: free
spec:
  discoveryHandler:
    name: udev
    discoveryDetails: |
      udevRules:
      - 'KERNEL=="gitbroker-free[0-9]*"'
`

// TestRealNodeDRA runs DRA mode (DESIGN.md, "Devices counted once across the cluster") on the
// real node, with deploy/ and its dra component as a user applies them: the scheduler allocates
// the devices of the ResourceSlices the renderer rendered from the inventory, and the agent,
// the node's DRA kubelet plugin, prepares them for containerd as CDI devices.
//   - An unprivileged broker opens its udev device through a ResourceClaim, with no akri.sh/
//     resource anywhere.
//   - The shared lookout camera (capacity 1), seen by the real node and a kwok standby, is
//     allocated once: its broker holds it and a user's claim stays pending.
//   - The broker moves when the standby it ran on is lost, with no render: the scheduler gives
//     it the real node, whose agent prepares the camera.
//   - A user's Deployment gets a device of a broker-less Configuration through its DeviceClass,
//     its properties with it.
func TestRealNodeDRA(t *testing.T) {
	n := startRealNode(t)
	ctx := context.Background()
	for _, ns := range []string{draNamespace, draFlux} {
		require.NoError(t, cluster.CreateNamespace(ctx, ns))
	}
	t.Cleanup(func() {
		// ResourceSlices and DeviceClasses are cluster-wide: none outlives the test.
		_ = cluster.Client.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + api.DRADriver})
		_ = cluster.Client.ResourceV1().DeviceClasses().DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: api.LabelManagedBy + "=" + api.ManagedByGitbroker})
	})
	sysRoot, echo := t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(sysRoot, "run", "udev", "data"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(sysRoot, "sys", "devices"), 0o755))

	srv := gitsynctest.NewServer(t, "main", map[string]string{
		"gitbroker.yaml": "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: " + draNamespace +
			"\n  deviceAllocation: dra\n  flux:\n    namespace: " + draFlux + "\n    retryInterval: 5s\n",
		"configurations/cam.yaml":  camConfiguration(1),
		"configurations/free.yaml": freeConfiguration,
	})
	gb, keys := deployGitbroker(t, srv.URL(), "dra")
	rendererKey := filepath.Join(keys, "renderer-signing-key")
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gitbroker-receiver", Namespace: draFlux},
		StringData: map[string]string{"token": string(gb.secret(t, "flux-receiver-token"))}})
	applyFluxFrom(t, "../deploy/flux", draFlux, srv.URL(), rendererKey+".pub", nil, draNamespace)
	srv.SendWebhooks(gb.hook(), bytes.TrimSpace(gb.secret(t, "webhook-secret")))
	// deploy/'s intervals (agent and renderer 30 s): events and push notifications drive the
	// loop, as a user runs it.
	gb.apply(t, "gitbroker-renderer", func(_ *corev1.PodSpec, c *corev1.Container) {
		setArg(c, "webhook-addr", gb.webhook)
		setArg(c, "flux-receiver", draFlux+"/gitbroker")
	})
	gb.apply(t, "gitbroker-agent", func(ps *corev1.PodSpec, c *corev1.Container) {
		require.Equal(t, gitbrokerImage, c.Image, "the dra component runs the agent from the gitbroker image")
		require.Contains(t, c.Args, "--device-allocation=dra")
		setArg(c, "allow-debug-echo", "true")
		setArg(c, "debug-echo-shared", "true")
		setArg(c, "renderer-url", gb.hook())
		// debugEcho's availability file, which takes the lookout camera away (goneSinceAllocated).
		setArg(c, "debug-echo-availability-file", "/var/lib/gitbroker-e2e-echo/availability")
		ps.Volumes = append(ps.Volumes, corev1.Volume{Name: "echo", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: echo}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "echo", MountPath: "/var/lib/gitbroker-e2e-echo"})
		for i, v := range ps.Volumes {
			switch v.Name {
			case "sys":
				ps.Volumes[i].HostPath.Path = filepath.Join(sysRoot, "sys")
			case "udev":
				ps.Volumes[i].HostPath.Path = filepath.Join(sysRoot, "run", "udev")
			}
		}
	})

	// A udev device: its ResourceSlice is rendered and applied, its broker's claim allocated on
	// this node and prepared by the agent, and the unprivileged broker opens the device.
	start := time.Now()
	deviceNode(t, n, sysRoot, "gitbroker-e2e0")
	camInstance := instance("cam", "/devices/virtual/misc/gitbroker-e2e0", realNode)
	broker := waitOpenedWithin(t, n, 4*time.Minute, draNamespace, api.LabelConfiguration+"=cam", "/dev/gitbroker-e2e0", "")
	t.Logf("DRA: device plugged to its broker holding it through a ResourceClaim: %s", time.Since(start).Round(100*time.Millisecond))
	require.Contains(t, n.Logs(t, draNamespace, broker, "broker"), "uid=1000 gid=1000")
	pod, err := cluster.Client.CoreV1().Pods(draNamespace).Get(ctx, broker, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, pod.Spec.ResourceClaims, 1)
	require.Empty(t, pod.Spec.Containers[0].Resources.Limits, "no akri.sh/ resource")
	claim := podClaim(t, pod)
	require.Equal(t, []resourcev1.DeviceRequestAllocationResult{{Request: "device", Driver: api.DRADriver,
		Pool: api.DRAPool(realNode, draNamespace, camInstance, false), Device: "slot-0"}}, claim.Status.Allocation.Devices.Results)
	node, err := cluster.Client.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
	require.NoError(t, err)
	for r := range node.Status.Capacity {
		require.False(t, strings.HasPrefix(string(r), api.AkriResourcePrefix), "the node offers no device-plugin resource in DRA mode: %s", r)
	}

	// The discovery-only Configuration: a user's own Deployment claims a device through the
	// DeviceClass, and gets its properties from the agent's CDI device.
	deviceNode(t, n, sysRoot, "gitbroker-free0")
	eventually(t, 2*time.Minute, "the free device's ResourceSlice", func() (bool, string) {
		s, err := cluster.Client.ResourceV1().ResourceSlices().Get(ctx, api.DRAResourceSliceName(draNamespace, instance("free", "/devices/virtual/misc/gitbroker-free0", realNode)), metav1.GetOptions{})
		return err == nil && s.Spec.Driver == api.DRADriver, fmt.Sprint(err)
	})
	claimingDeployment(t, "free-reader", api.DRADeviceClassName(draNamespace, "free"), brokerImage, "UDEV_DEVNODE")
	waitOpenedWithin(t, n, 3*time.Minute, draNamespace, "app=free-reader", "/dev/gitbroker-free0", "")

	lookoutAllocatedOnce(t, n, srv)
	goneSinceAllocated(t, filepath.Join(echo, "availability"))
}

// goneSinceAllocated shows a device that went away after the scheduler could allocate it: the
// lookout camera vanishes from the real node's discovery (its ResourceSlice stays through the
// shared grace period, so the scheduler still allocates it), its broker's new Pod is allocated the
// camera, and the agent refuses to prepare it, which kubelet reports on the Pod; the camera back,
// the same Pod starts.
func goneSinceAllocated(t *testing.T, availability string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, os.WriteFile(availability, []byte("OFFLINE"), 0o644))
	// The availability file is no device event: the agent's next cycle (deploy/'s 30 s interval)
	// sees the camera gone.
	time.Sleep(35 * time.Second)
	pods, err := cluster.Client.CoreV1().Pods(draNamespace).List(ctx, metav1.ListOptions{LabelSelector: api.LabelConfiguration + "=lookout"})
	require.NoError(t, err)
	for _, p := range pods.Items {
		require.NoError(t, cluster.Client.CoreV1().Pods(draNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}))
	}
	eventually(t, 2*time.Minute, "kubelet to report the refused preparation", func() (bool, string) {
		events, err := cluster.Client.CoreV1().Events(draNamespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedPrepareDynamicResources"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if strings.HasPrefix(e.InvolvedObject.Name, "lookout-") && strings.Contains(e.Message, "was not seen in node "+realNode+"'s latest discovery") {
				t.Logf("DRA: the camera gone since its allocation: %s", e.Message)
				return true, ""
			}
		}
		return false, fmt.Sprint(len(events.Items), " events")
	})
	require.NoError(t, os.WriteFile(availability, nil, 0o644))
	lookoutPodOn(t, realNode)
}

// lookoutAllocatedOnce shows a shared device counted once by the scheduler and its broker moved
// by the scheduler alone: the standby sees the camera too, the broker goes there while the real
// node is cordoned, a user's claim of the camera stays pending (capacity 1), and when the standby
// is lost the broker moves to the real node, whose agent prepares the camera, with no render.
func lookoutAllocatedOnce(t *testing.T, n *Node, srv *gitsynctest.Server) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, cluster.AddNode(ctx, draStandby))
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().Nodes().Delete(context.Background(), draStandby, metav1.DeleteOptions{})
	})
	startGitbroker(t, "agent-"+draStandby, "agent started", "agent", "--allow-debug-echo",
		"--git", srv.URL(), "--branch", "main", "--node", draStandby, "--interval", agentInterval.String(),
		"--debug-echo-shared=true", "--discovery-handlers-dir", "", "--device-plugin-dir", "",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	setUnschedulable(t, realNode, true)
	srv.On("main").Commit(map[string]string{"configurations/lookout.yaml": lookoutClaiming}, nil, "lookout camera")
	slice := api.DRAResourceSliceName(draNamespace, instance("lookout", "lookout-cam", ""))
	eventually(t, 2*time.Minute, "the lookout camera's ResourceSlice to select both nodes", func() (bool, string) {
		s, err := cluster.Client.ResourceV1().ResourceSlices().Get(ctx, slice, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		values := s.Spec.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Values
		return slices.Equal(values, []string{draStandby, realNode}) && len(s.Spec.Devices) == 1, fmt.Sprint(values)
	})
	lookoutPodOn(t, draStandby)
	setUnschedulable(t, realNode, false)

	// Capacity 1, counted once: a user's claim of the camera stays pending, on either node.
	claimingDeployment(t, "lookout-user", api.DRADeviceClassName(draNamespace, "lookout"), nodeRegistry+"/pause:e2e", "")
	eventually(t, time.Minute, "the user's Pod to be unschedulable", func() (bool, string) {
		pods, err := cluster.Client.CoreV1().Pods(draNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=lookout-user"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err)
		}
		for _, c := range pods.Items[0].Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, ""
			}
		}
		return false, fmt.Sprint(pods.Items[0].Status.Conditions)
	})
	time.Sleep(5 * time.Second)
	pods, err := cluster.Client.CoreV1().Pods(draNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=lookout-user"})
	require.NoError(t, err)
	require.Empty(t, pods.Items[0].Spec.NodeName, "the camera is allocated once: its second user stays pending")
	// The user leaves before the standby is lost, so that the broker gets the camera back.
	require.NoError(t, cluster.Client.AppsV1().Deployments(draNamespace).Delete(ctx, "lookout-user", metav1.DeleteOptions{}))

	head := srv.On(verify.RenderedBranch).Head()
	start := time.Now()
	require.NoError(t, cluster.Client.CoreV1().Nodes().Delete(ctx, draStandby, metav1.DeleteOptions{}))
	p := lookoutPodOn(t, realNode)
	t.Logf("DRA: the standby lost, the lookout broker running on %s after %s", realNode, time.Since(start).Round(100*time.Millisecond))
	require.Equal(t, head, srv.On(verify.RenderedBranch).Head(), "the broker moved with no render")
	claim := podClaim(t, p)
	require.Equal(t, []resourcev1.DeviceRequestAllocationResult{{Request: "device", Driver: api.DRADriver,
		Pool: api.DRAPool("", draNamespace, instance("lookout", "lookout-cam", ""), true), Device: "slot-0"}}, claim.Status.Allocation.Devices.Results)
	prepared, err := n.ReadFile(ctx, "/var/run/cdi/"+api.DRADriver+"-"+string(claim.UID)+".json")
	require.NoError(t, err, "the agent prepared the camera on %s", realNode)
	require.Contains(t, string(prepared), "DEBUG_ECHO_DESCRIPTION=lookout-cam")
}

// lookoutPodOn waits for the lookout broker's one Pod to run on node and returns it.
func lookoutPodOn(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	var out *corev1.Pod
	eventually(t, 3*time.Minute, "the lookout broker running on "+node, func() (bool, string) {
		pods, err := cluster.Client.CoreV1().Pods(draNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelConfiguration + "=lookout"})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for i, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning {
				out = &pods.Items[i]
				return true, ""
			}
			states = append(states, fmt.Sprintf("%s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase))
		}
		return false, strings.Join(states, "; ")
	})
	return out
}

// podClaim is the ResourceClaim the controller made for a Pod's one claim.
func podClaim(t *testing.T, p *corev1.Pod) *resourcev1.ResourceClaim {
	t.Helper()
	var name string
	eventually(t, time.Minute, "Pod "+p.Name+"'s claim", func() (bool, string) {
		got, err := cluster.Client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range got.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				name = *s.ResourceClaimName
				return true, ""
			}
		}
		return false, "no claim yet"
	})
	c, err := cluster.Client.ResourceV1().ResourceClaims(p.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, c.Status.Allocation, "claim %s allocated", name)
	return c
}

// claimingDeployment is a user's own Deployment whose Pod claims one device of class, from a
// ResourceClaimTemplate of its own; an env argument makes the broker image open the device it
// names.
func claimingDeployment(t *testing.T, name, class, image, env string) {
	t.Helper()
	mustCreate(t, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: draNamespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "device", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}},
		}}},
	})
	labels := map[string]string{"app": name}
	c := corev1.Container{Name: "broker", Image: image, Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "device"}}}}
	if env != "" {
		c.Args = []string{env}
	}
	mustCreate(t, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: draNamespace},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
						SupplementalGroups: []int64{deviceGroup}},
					ResourceClaims: []corev1.PodResourceClaim{{Name: "device", ResourceClaimTemplateName: ptr.To(name)}},
					Containers:     []corev1.Container{c},
				},
			},
		},
	})
}

// setUnschedulable cordons or uncordons a node, as kubectl cordon does.
func setUnschedulable(t *testing.T, name string, cordoned bool) {
	t.Helper()
	patch := []byte(`{"spec":{"unschedulable":` + strconv.FormatBool(cordoned) + `}}`)
	_, err := cluster.Client.CoreV1().Nodes().Patch(context.Background(), name, "application/merge-patch+json", patch, metav1.PatchOptions{})
	require.NoError(t, err)
}
