//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestDeployManifests checks every manifest in deploy/, and those
// `gitbroker init` writes, with a server-side dry run against the API
// server: built-in kinds against the API server's own validation, Flux's
// against its CRDs, and Argo CD's against its Application, ApplicationSet
// and AppProject CRD schemas.
func TestDeployManifests(t *testing.T) {
	ctx := context.Background()
	bin := os.Getenv("GITBROKER_E2E_BIN")
	for _, f := range []string{"application-crd.yaml", "applicationset-crd.yaml", "appproject-crd.yaml"} {
		data, err := os.ReadFile(filepath.Join(bin, "argocd", f))
		require.NoError(t, err)
		require.NoError(t, cluster.Apply(ctx, data), f)
	}
	require.NoError(t, cluster.WaitForKinds(ctx, "Application.argoproj.io", "ApplicationSet.argoproj.io", "AppProject.argoproj.io"))
	for _, ns := range []string{"gitbroker-system", "argocd"} {
		require.NoError(t, cluster.CreateNamespace(ctx, ns))
	}

	dryRun := func(t *testing.T, objs []*unstructured.Unstructured) {
		t.Helper()
		require.NotEmpty(t, objs)
		for _, obj := range objs {
			require.NoError(t, cluster.DryRun(ctx, obj), "%s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
		}
	}
	// dryRunFiles dry-runs the objects in files (each a YAML stream).
	dryRunFiles := func(t *testing.T, files ...string) {
		t.Helper()
		for _, f := range files {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			objs, err := Objects(data)
			require.NoError(t, err)
			require.Len(t, objs, 1, f)
			dryRun(t, objs)
		}
	}
	kinds := func(objs []*unstructured.Unstructured) map[string]int {
		m := map[string]int{}
		for _, o := range objs {
			m[o.GetKind()]++
		}
		return m
	}

	t.Run("components", func(t *testing.T) {
		objs := build(t, "../deploy")
		require.Equal(t, map[string]int{
			"Namespace": 1, "ConfigMap": 1, "ServiceAccount": 3, "DaemonSet": 1, "Deployment": 2,
			"Role": 1, "RoleBinding": 1, "ClusterRole": 2, "ClusterRoleBinding": 1,
			"Service": 1, // the renderer's push notification endpoint
		}, kinds(objs))
		dryRun(t, objs)
	})
	t.Run("components with dra", func(t *testing.T) {
		// deploy/ with its dra component, as deploy/kustomization.yaml's comment has it added.
		dir := filepath.Join(t.TempDir(), "deploy")
		require.NoError(t, os.CopyFS(dir, os.DirFS("../deploy")))
		k := filepath.Join(dir, "kustomization.yaml")
		data, err := os.ReadFile(k)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(k, []byte(strings.Replace(string(data), "# components:\n# - dra\n", "components:\n- dra\n", 1)), 0o644))
		objs := build(t, dir)
		require.Equal(t, map[string]int{
			"Namespace": 1, "ConfigMap": 1, "ServiceAccount": 3, "DaemonSet": 1, "Deployment": 2,
			"Role": 1, "RoleBinding": 1, "ClusterRole": 3, "ClusterRoleBinding": 2, "Service": 1,
		}, kinds(objs))
		dryRun(t, objs)
	})
	t.Run("flux", func(t *testing.T) {
		objs := build(t, "../deploy/flux")
		// ClusterRoles: gitbroker-applier, gitbroker-namespaces and gitbroker-applier-dra (DRA
		// mode's cluster-wide kinds), each with its policy but the first.
		require.Equal(t, map[string]int{"GitRepository": 1, "Kustomization": 1, "ServiceAccount": 3, "Role": 1, "RoleBinding": 1, "ClusterRole": 3, "ClusterRoleBinding": 2,
			"ConfigMap": 1, "ValidatingAdmissionPolicy": 3, "ValidatingAdmissionPolicyBinding": 3, "Receiver": 1}, kinds(objs))
		dryRun(t, objs)
		applier, err := os.ReadFile("../deploy/applier/rolebinding.yaml")
		require.NoError(t, err)
		binding, err := Objects(applier)
		require.NoError(t, err)
		require.Len(t, binding, 2, "the applier's and the recorder's")
		for _, b := range binding {
			b.SetNamespace("gitbroker-system")
		}
		dryRun(t, binding)
	})
	t.Run("argocd", func(t *testing.T) {
		dryRunFiles(t, "../deploy/argocd/appproject.yaml", "../deploy/argocd/applicationset.yaml", "../deploy/argocd/application.yaml")
		// The schema really is checked: a misspelt field is refused.
		bad, err := Objects([]byte("apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: bad\n  namespace: argocd\nspec:\n  project: default\n  destination: {server: https://kubernetes.default.svc}\n  source: {repoURL: https://x, path: rendered}\n  syncPolicy: {syncOptionz: [Prune=false]}\n"))
		require.NoError(t, err)
		require.ErrorContains(t, cluster.DryRun(ctx, bad[0]), "syncOptionz")
	})
	t.Run("init", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "fleet")
		out, err := exec.Command(gitbroker, "init", "--dir", dir, "--flux", "--argocd", "--repo-url", "https://git.example.org/edge.git").CombinedOutput()
		require.NoError(t, err, "%s", out)
		dryRun(t, build(t, filepath.Join(dir, "flux")))
		dryRunFiles(t, filepath.Join(dir, "argocd", "appproject.yaml"), filepath.Join(dir, "argocd", "applicationset.yaml"), filepath.Join(dir, "argocd", "application.yaml"))
	})
}
