package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// deploy/ with the dra component, as deploy/kustomization.yaml's comment has a user add it, runs
// the agent as the node's DRA kubelet plugin: the gitbroker image, --device-allocation=dra,
// kubelet's plugin folders, the CDI folder and the host's /dev (read-only) at the paths the
// agent's flags default to, and a token whose one right is to get ResourceClaims.
func TestDRAComponent(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"kustomization.yaml", "namespace.yaml", "config.yaml"} {
		copyFile(t, f, filepath.Join(dir, f))
	}
	for _, d := range []string{"agent", "renderer", "recorder", "dra"} {
		entries, err := os.ReadDir(d)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
		for _, e := range entries {
			copyFile(t, filepath.Join(d, e.Name()), filepath.Join(dir, d, e.Name()))
		}
	}
	k, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	commented := "# components:\n# - dra\n"
	require.Contains(t, string(k), commented, "deploy/kustomization.yaml shows how to add the component")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(string(k)+"components:\n- dra\n"), 0o644))

	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err)
	var ds appsv1.DaemonSet
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		require.NoError(t, err)
		switch {
		case r.GetKind() == "DaemonSet":
			require.NoError(t, yaml.UnmarshalStrict(data, &ds))
		case r.GetKind() == "ClusterRole" && r.GetName() == "gitbroker-agent-dra":
			require.NoError(t, yaml.UnmarshalStrict(data, &role))
		case r.GetKind() == "ClusterRoleBinding" && r.GetName() == "gitbroker-agent-dra":
			require.NoError(t, yaml.UnmarshalStrict(data, &binding))
		}
	}
	ps := ds.Spec.Template.Spec
	c := ps.Containers[0]
	require.Equal(t, "ghcr.io/gitbroker/gitbroker:v0.1.0", c.Image, "the image with the DRA plugin")
	require.Contains(t, c.Args, "--device-allocation=dra")
	require.True(t, *ps.AutomountServiceAccountToken)
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm.Name
		if vm.MountPath == "/host/dev" {
			require.True(t, vm.ReadOnly, "the host's /dev is only read")
		}
	}
	hostPaths := map[string]string{}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	// The plugin's flags' defaults (cmd/gitbroker/dra.go), the same path inside and on the node.
	for _, p := range []string{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi"} {
		require.Equal(t, p, hostPaths[mounts[p]], p)
	}
	require.Equal(t, "/dev", hostPaths[mounts["/host/dev"]])
	require.True(t, slices.Contains(c.Args, "--udev-root=/host"), "the host's /dev is read under --udev-root")

	require.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}}}, role.Rules)
	require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "gitbroker-agent", Namespace: "gitbroker-system"}}, binding.Subjects)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, data, 0o644))
}
