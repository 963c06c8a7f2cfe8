//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

const (
	trustNamespace     = "trusted"
	trustFluxNamespace = "flux-trust"
	trustNode          = "trust-1"
)

func trustConfiguration(name, device string) string {
	return `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: ` + name + `
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["` + device + `"]
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: "nginx:stable-alpine"
`
}

// The cluster applies only what the renderer signed, as an account that may touch only broker
// objects: a head of gitbroker/rendered pushed with a node's key is not applied (the
// GitRepository says why) until the renderer's next commit; and a ClusterRoleBinding that
// reaches a rendered folder even with the renderer's signature is refused by the applier's RBAC
// while the other folders keep applying.
func TestClusterTrust(t *testing.T) {
	ctx := context.Background()
	// Only Flux's namespace exists: the broker namespace and the applier's RoleBinding there are
	// rendered, as on a fresh cluster.
	require.NoError(t, cluster.CreateNamespace(ctx, trustFluxNamespace))
	srv := gitsynctest.NewServer(t, "main", map[string]string{
		"gitbroker.yaml": "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: " + trustNamespace +
			"\n  flux:\n    namespace: " + trustFluxNamespace + "\n    retryInterval: 5s\n",
		"configurations/cam-a.yaml": trustConfiguration("cam-a", "dev-a"),
		"configurations/cam-b.yaml": trustConfiguration("cam-b", "dev-b"),
	})
	keys := t.TempDir()
	rendererKey := filepath.Join(keys, "renderer")
	renderer, _, err := trust.LoadOrCreateSigner(rendererKey, "renderer")
	require.NoError(t, err)
	node, _, err := trust.LoadOrCreateSigner(filepath.Join(keys, "node"), trust.NodePrincipal(trustNode))
	require.NoError(t, err)
	applyFlux(t, trustFluxNamespace, srv.URL(), rendererKey+".pub")
	require.NoError(t, cluster.AddNode(ctx, trustNode))

	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(gitbroker, args...).CombinedOutput()
		require.NoError(t, err, "gitbroker %s: %s", strings.Join(args, " "), out)
	}
	run("agent", "--allow-debug-echo", "--git", srv.URL(), "--node", trustNode, "--once", "--debug-echo-shared=false",
		"--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(keys, "none"))
	render := func() {
		t.Helper()
		run("render", "--git", srv.URL(), "--signing-key", rendererKey, "--first-render")
	}
	render()
	waitFluxAppliedIn(t, srv, trustFluxNamespace)
	pods := func(cfg string) []string {
		list, err := cluster.Client.CoreV1().Pods(trustNamespace).List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=" + cfg})
		require.NoError(t, err)
		var names []string
		for _, p := range list.Items {
			names = append(names, p.Name)
		}
		return names
	}
	require.Len(t, pods("cam-a"), 1)
	require.Len(t, pods("cam-b"), 1)
	ns, err := cluster.Client.CoreV1().Namespaces().Get(ctx, trustNamespace, metav1.GetOptions{})
	require.NoError(t, err, "the rendered namespace was applied")
	require.Equal(t, "disabled", ns.Annotations["kustomize.toolkit.fluxcd.io/prune"], "never pruned")
	repo, err := cluster.Dynamic.Resource(gitRepositoryGVR).Namespace(trustFluxNamespace).Get(ctx, "gitbroker", metav1.GetOptions{})
	require.NoError(t, err)
	verified, why := condition(repo, "SourceVerified")
	require.True(t, verified, "Flux verified the renderer's commit: %s", why)

	rendered := srv.On(verify.RenderedBranch)
	folder := func(cfg string) string { return "rendered/" + trustNamespace + "/" + cfg + "/" }
	kustomization := func(cfg string) string {
		k, ok := rendered.File(folder(cfg) + "kustomization.yaml")
		require.True(t, ok)
		return k
	}
	plantPod := func(name string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  namespace: " + trustNamespace +
			"\n  labels:\n    app.kubernetes.io/managed-by: gitbroker\n    akri.sh/configuration: planted\nspec:\n  containers:\n  - name: x\n    image: attacker/root\n"
	}
	// What the applier may create: a broker Deployment (bare Pods it may only prune).
	plantDeployment := func(name string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: " + name + "\n  namespace: " + trustNamespace +
			"\nspec:\n  selector:\n    matchLabels: {app: " + name + "}\n  template:\n    metadata:\n      labels: {app: " + name +
			"}\n    spec:\n      containers:\n      - name: x\n        image: attacker/root\n"
	}
	push := func(signer *trust.Signer, files map[string]string) string {
		t.Helper()
		r, err := gitsync.New(srv.URL(), verify.RenderedBranch, gitsync.WithSigner(signer))
		require.NoError(t, err)
		res, err := r.Update(ctx, func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
			c := &gitsync.Change{Files: map[string][]byte{}, Message: "planted",
				Author: gitsync.Signature{Name: "mallory", Email: "mallory@example.com", When: time.Now()}}
			for p, b := range files {
				c.Owned = append(c.Owned, p)
				c.Files[p] = []byte(b)
			}
			return c, nil
		})
		require.NoError(t, err)
		return res.Commit
	}
	withResource := func(k, file string) string {
		return strings.Replace(k, "resources:\n", "resources:\n- "+file+"\n", 1)
	}

	t.Run("a head pushed with a node's key is not applied", func(t *testing.T) {
		good := rendered.Head()
		bad := push(node, map[string]string{
			folder("cam-a") + "pod-planted.yaml":   plantPod("planted"),
			folder("cam-a") + "kustomization.yaml": withResource(kustomization("cam-a"), "pod-planted.yaml"),
		})
		eventually(t, 2*time.Minute, "the GitRepository to refuse the node's commit", func() (bool, string) {
			repo, err := cluster.Dynamic.Resource(gitRepositoryGVR).Namespace(trustFluxNamespace).Get(ctx, "gitbroker", metav1.GetOptions{})
			require.NoError(t, err)
			ok, why := condition(repo, "SourceVerified")
			return !ok && strings.Contains(why, bad[:7]) || !ok && strings.Contains(why, "signature"), why
		})
		repo, err := cluster.Dynamic.Resource(gitRepositoryGVR).Namespace(trustFluxNamespace).Get(ctx, "gitbroker", metav1.GetOptions{})
		require.NoError(t, err)
		rev, _, _ := unstructured.NestedString(repo.Object, "status", "artifact", "revision")
		require.Equal(t, verify.RenderedBranch+"@sha1:"+good, rev, "the artifact stays the renderer's commit")
		_, err = cluster.Client.CoreV1().Pods(trustNamespace).Get(ctx, "planted", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the planted Pod is not applied: %v", err)

		// The renderer's next commit drops the planted files, and Flux applies it.
		render()
		require.NotEqual(t, bad, rendered.Head())
		waitFluxAppliedIn(t, srv, trustFluxNamespace)
		_, err = cluster.Client.CoreV1().Pods(trustNamespace).Get(ctx, "planted", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err))
	})

	t.Run("a ClusterRoleBinding in a rendered folder is refused by the applier's RBAC", func(t *testing.T) {
		crb := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: gitbroker-takeover\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: default\n  namespace: " + trustNamespace + "\n"
		// Signed with the renderer's own key: a stolen key, or a renderer bug.
		push(renderer, map[string]string{
			folder("cam-a") + "clusterrolebinding.yaml": crb,
			folder("cam-a") + "kustomization.yaml":      withResource(kustomization("cam-a"), "clusterrolebinding.yaml"),
			folder("cam-b") + "deployment-extra.yaml":   plantDeployment("extra"),
			folder("cam-b") + "kustomization.yaml":      withResource(kustomization("cam-b"), "deployment-extra.yaml"),
		})
		head := rendered.Head()
		eventually(t, 2*time.Minute, "cam-a's Kustomization refused, cam-b's applied", func() (bool, string) {
			a, err := cluster.Dynamic.Resource(kustomizationGVR).Namespace(trustFluxNamespace).Get(ctx, "gitbroker-"+trustNamespace+"-cam-a", metav1.GetOptions{})
			require.NoError(t, err)
			b, err := cluster.Dynamic.Resource(kustomizationGVR).Namespace(trustFluxNamespace).Get(ctx, "gitbroker-"+trustNamespace+"-cam-b", metav1.GetOptions{})
			require.NoError(t, err)
			aReady, aWhy := condition(a, "Ready")
			bLast, _, _ := unstructured.NestedString(b.Object, "status", "lastAppliedRevision")
			if aReady || !strings.Contains(aWhy, "forbidden") {
				return false, "cam-a: " + aWhy
			}
			return bLast == verify.RenderedBranch+"@sha1:"+head, fmt.Sprintf("cam-b applied %q", bLast)
		})
		_, err := cluster.Client.RbacV1().ClusterRoleBindings().Get(ctx, "gitbroker-takeover", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the ClusterRoleBinding was never created: %v", err)
		_, err = cluster.Client.AppsV1().Deployments(trustNamespace).Get(ctx, "extra", metav1.GetOptions{})
		require.NoError(t, err, "the other folder kept applying")
		require.Len(t, pods("cam-a"), 1, "cam-a's broker Pod stays")
	})
}

// condition is an object's condition of that type: whether it is True, and its reason and message.
func condition(obj *unstructured.Unstructured, typ string) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			return m["status"] == "True", fmt.Sprint(m["reason"], ": ", m["message"])
		}
	}
	return false, "no " + typ + " condition"
}
