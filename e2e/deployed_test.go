//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// gitbrokerImage is make image's gitbroker image (renderer and recorder) as the real node has it.
const gitbrokerImage = nodeRegistry + "/gitbroker:e2e"

// deployed is gitbroker's own deploy/ as a user applies it on the real node: the objects of
// `kubectl apply -k deploy/`, with what docs/DEPLOYING.md has the user create first.
type deployed struct {
	objs []*unstructured.Unstructured
}

// deployGitbroker creates what docs/DEPLOYING.md's steps 2 to 4 create (gitbroker-system, the
// writers' git credentials, the renderer's and recorder's signing keys as Secrets, the
// renderer's pinned key, the repository's URL in deploy/config.yaml) and builds deploy/, to be
// applied one component at a time by apply.
func deployGitbroker(t *testing.T, gitURL, rendererKey, rendererLine, recorderKey string) *deployed {
	t.Helper()
	d := &deployed{objs: build(t, "../deploy")}
	for _, obj := range d.objs {
		switch {
		case obj.GetKind() == "Namespace":
			require.Equal(t, systemNamespace, obj.GetName())
		case obj.GetKind() == "ConfigMap" && obj.GetName() == "gitbroker":
			// deploy/config.yaml, edited as its comment says.
			data := obj.Object["data"].(map[string]any)
			data["git-url"], data["inventory-git-url"], data["branch"] = gitURL, gitURL, "main"
			require.NoError(t, cluster.ApplyObject(context.Background(), obj))
			t.Cleanup(func() { deleteObject(obj) })
		}
	}
	for _, w := range []string{"agent", "renderer", "recorder"} {
		mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gitbroker-" + w + "-git", Namespace: systemNamespace},
			StringData: map[string]string{"username": "git", "password": "e2e-" + w + "-token"}})
	}
	for w, key := range map[string]string{"renderer": rendererKey, "recorder": recorderKey} {
		data, err := os.ReadFile(key)
		require.NoError(t, err)
		mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gitbroker-" + w + "-signing", Namespace: systemNamespace},
			StringData: map[string]string{"signing-key": string(data)}})
	}
	mustCreate(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gitbroker-renderer-key", Namespace: systemNamespace},
		Data: map[string]string{"allowed_signers": rendererLine + "\n"}})
	return d
}

// apply applies one component of deploy/ (gitbroker-agent, gitbroker-renderer or
// gitbroker-recorder: its ServiceAccount, RBAC and workload) with what this machine needs
// changed, and waits for its Pod to be Ready on the real node. What changes: the images are the
// imported ones; the Pods run on the real node only, on the host's network (the test's git
// server listens on loopback), with their ports on free loopback ports and kubelet probing
// there; they reach the API server at its loopback address (no kube-proxy runs here for the
// kubernetes Service); one renderer replica (a second would want the same host ports); edit
// changes the rest (intervals, the test's sysfs).
func (d *deployed) apply(t *testing.T, component string, edit func(ps *corev1.PodSpec, c *corev1.Container)) {
	t.Helper()
	ctx := context.Background()
	for _, obj := range d.objs {
		if obj.GetLabels()["app.kubernetes.io/name"] != component {
			continue
		}
		obj = obj.DeepCopy()
		switch obj.GetKind() {
		case "DaemonSet":
			var ds appsv1.DaemonSet
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &ds))
			onRealNode(t, &ds.Spec.Template.Spec, edit)
			obj = toUnstructured(t, &ds)
		case "Deployment":
			var dep appsv1.Deployment
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &dep))
			dep.Spec.Replicas = ptr.To[int32](1)
			onRealNode(t, &dep.Spec.Template.Spec, edit)
			obj = toUnstructured(t, &dep)
		}
		require.NoError(t, cluster.ApplyObject(ctx, obj), "%s %s", obj.GetKind(), obj.GetName())
		t.Cleanup(func() { deleteObject(obj) })
	}
	eventually(t, 3*time.Minute, component+"'s Pod to be Ready on "+realNode, func() (bool, string) {
		pods, err := cluster.Client.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + component})
		if err != nil || len(pods.Items) == 0 {
			return false, fmt.Sprint("no Pod yet ", err)
		}
		p := pods.Items[0]
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s %v %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
}

// onRealNode changes a Pod of deploy/ for this machine, as apply says.
func onRealNode(t *testing.T, ps *corev1.PodSpec, edit func(ps *corev1.PodSpec, c *corev1.Container)) {
	t.Helper()
	api, err := url.Parse(cluster.Config.Host)
	require.NoError(t, err)
	ps.HostNetwork, ps.DNSPolicy = true, corev1.DNSClusterFirstWithHostNet
	ps.NodeSelector = map[string]string{"kubernetes.io/hostname": realNode}
	c := &ps.Containers[0]
	// deploy/'s images: list names them where a user pushes make image's images.
	name, _, _ := strings.Cut(path.Base(c.Image), ":")
	switch name {
	case "gitbroker":
		c.Image = gitbrokerImage
	case "gitbroker-agent":
		c.Image = agentImage
	default:
		t.Fatalf("deploy/ names the image %q, not one make image builds", c.Image)
	}
	metrics, err := freePort()
	require.NoError(t, err)
	health, err := freePort()
	require.NoError(t, err)
	for i, a := range c.Args {
		switch a {
		case "--metrics-addr=:8080":
			c.Args[i] = "--metrics-addr=127.0.0.1:" + strconv.Itoa(metrics)
		case "--health-addr=:9440":
			c.Args[i] = "--health-addr=127.0.0.1:" + strconv.Itoa(health)
		}
	}
	// kubelet probes a host-network Pod at the node's address; the daemons listen on loopback.
	for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if pr != nil && pr.HTTPGet != nil {
			pr.HTTPGet.Host = "127.0.0.1"
		}
	}
	c.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: int32(metrics)}, {Name: "health", ContainerPort: int32(health)}}
	c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: api.Hostname()},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: api.Port()})
	if edit != nil {
		edit(ps, c)
	}
}

// setArg replaces the value of c's flag name (--name=value), or adds it.
func setArg(c *corev1.Container, name, value string) {
	for i, a := range c.Args {
		if strings.HasPrefix(a, "--"+name+"=") {
			c.Args[i] = "--" + name + "=" + value
			return
		}
	}
	c.Args = append(c.Args, "--"+name+"="+value)
}

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	require.NoError(t, err)
	return &unstructured.Unstructured{Object: m}
}
