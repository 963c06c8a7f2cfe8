//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
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
	// dir is where DEPLOYING.md's steps ran (the keys and secrets they made are there).
	dir string
	// webhook is the loopback address the renderer serves push notifications on (deploy/'s
	// :9292, on a free port: its Pod runs on the host's network).
	webhook string
}

// hook is the renderer's push notification endpoint, as the agents and the git host call it.
func (d *deployed) hook() string { return "http://" + d.webhook + "/hook" }

// secret is a file a DEPLOYING.md step made.
func (d *deployed) secret(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dir, name))
	require.NoError(t, err)
	return b
}

// deployGitbroker runs docs/DEPLOYING.md's shell steps 2 to 4 as a user types them, with
// kubectl against the test's cluster, in a folder of its own holding deploy/: gitbroker-system,
// the renderer's and recorder's keys made with ssh-keygen and stored as Secrets, the renderer's
// pinned key, the writers' git credentials. It sets the repository's URL in deploy/config.yaml
// (as its comment says) and builds deploy/, to be applied one component at a time by apply. It
// returns the folder, which holds the writers' keys (renderer-signing-key, ...). components are
// deploy/'s components to add, as deploy/kustomization.yaml's comments show (dra).
func deployGitbroker(t *testing.T, gitURL string, components ...string) (*deployed, string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "deploy"), os.DirFS("../deploy")))
	for _, c := range components {
		k := filepath.Join(dir, "deploy", "kustomization.yaml")
		data, err := os.ReadFile(k)
		require.NoError(t, err)
		commented := "# components:\n# - " + c + "\n"
		require.Contains(t, string(data), commented, "deploy/kustomization.yaml shows how to add %s", c)
		require.NoError(t, os.WriteFile(k, []byte(strings.Replace(string(data), commented, "components:\n- "+c+"\n", 1)), 0o644))
	}
	made := []string{"secret/gitbroker-renderer-signing", "secret/gitbroker-recorder-signing", "configmap/gitbroker-renderer-key", "secret/gitbroker-notify"}
	for _, w := range []string{"agent", "renderer", "recorder"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, w+"-token"), []byte("e2e-"+w+"-token\n"), 0o600))
		made = append(made, "secret/gitbroker-"+w+"-git")
	}
	t.Cleanup(func() {
		_ = kubectl(dir, append([]string{"-n", systemNamespace, "delete", "--ignore-not-found"}, made...)...)
		// The renderer's Lease names the last commit it pushed, to a git server this test's end
		// stops: a later test's renderer holding the same Lease would rightly refuse to render
		// from a branch that does not descend from it. It goes once no replica can renew it.
		eventually(t, 2*time.Minute, "the renderer's Pods gone", func() (bool, string) {
			pods, err := cluster.Client.CoreV1().Pods(systemNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gitbroker-renderer"})
			return err == nil && len(pods.Items) == 0, fmt.Sprint(err, " ", len(pods.Items), " Pods")
		})
		_ = cluster.Client.CoordinationV1().Leases(systemNamespace).Delete(context.Background(), "gitbroker-renderer", metav1.DeleteOptions{})
	})
	deploying(t, dir, "kubectl apply -f deploy/namespace.yaml")   // step 2
	deploying(t, dir, `--from-literal=allowed_signers="renderer`) // step 3
	deploying(t, dir, "--from-literal=username=git")              // step 4
	deploying(t, dir, "--from-file=flux-receiver-token=")         // step 4
	port, err := freePort()
	require.NoError(t, err)
	d := &deployed{objs: build(t, filepath.Join(dir, "deploy")), dir: dir, webhook: "127.0.0.1:" + strconv.Itoa(port)}
	for _, obj := range d.objs {
		switch {
		case obj.GetKind() == "Namespace":
			require.Equal(t, systemNamespace, obj.GetName())
		case obj.GetKind() == "ConfigMap" && obj.GetName() == "gitbroker":
			// deploy/config.yaml, edited as its comment says.
			data := obj.Object["data"].(map[string]any)
			data["git-url"], data["inventory-git-url"], data["branch"] = gitURL, gitURL, "main"
			data["flux-receiver-url"] = cluster.ReceiverURL
			require.NoError(t, cluster.ApplyObject(context.Background(), obj))
			t.Cleanup(func() { deleteObject(obj) })
		}
	}
	return d, dir
}

// deploying runs the one shell block of docs/DEPLOYING.md that contains marker, as written, in
// dir, with the API server's kubectl on PATH and the folders the steps name (GITBROKER, FLEET
// and KEYS) all dir.
func deploying(t *testing.T, dir, marker string) {
	t.Helper()
	var found []string
	for _, block := range guideBlocks(t) {
		if strings.Contains(block, marker) {
			found = append(found, block)
		}
	}
	require.Len(t, found, 1, "DEPLOYING.md's shell blocks with %q", marker)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", found[0])
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("GITBROKER_E2E_BIN")+":"+os.Getenv("PATH"), "KUBECONFIG="+cluster.Kubeconfig,
		"GITBROKER="+dir, "FLEET="+dir, "KEYS="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "DEPLOYING.md's step failed:\n%s\n%s", found[0], out)
	t.Logf("DEPLOYING.md:\n%s%s", found[0], out)
}

// kubectl runs the API server's kubectl against the test's cluster in dir.
func kubectl(dir string, args ...string) error {
	cmd := exec.Command(filepath.Join(os.Getenv("GITBROKER_E2E_BIN"), "kubectl"), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
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
	require.NoError(t, onHostNetwork(ps, realNode, cluster.Config.Host))
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
