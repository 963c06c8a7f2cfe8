package deploy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/image"
)

// workloads are the Pod templates of deploy/, by workload name, as kubectl apply -k deploy/
// builds them.
func workloads(t *testing.T) map[string]corev1.PodSpec {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	require.NoError(t, err)
	out := map[string]corev1.PodSpec{}
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		require.NoError(t, err)
		switch r.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			require.NoError(t, yaml.UnmarshalStrict(data, &d))
			out[d.Name] = d.Spec.Template.Spec
		case "DaemonSet":
			var d appsv1.DaemonSet
			require.NoError(t, yaml.UnmarshalStrict(data, &d))
			out[d.Name] = d.Spec.Template.Spec
		}
	}
	require.Len(t, out, 3)
	return out
}

// Every workload can read the Secrets it mounts, whatever the runtime: Secret files are owned by
// root and by the Pod's fsGroup, so a non-root container (the image's user, 65532:65532) reads a
// 0440 Secret only through fsGroup. The renderer and recorder had no fsGroup and could read
// their credentials only where a runtime gave them gid 0.
func TestWorkloadsReadTheirSecrets(t *testing.T) {
	uid, gid, ok := strings.Cut(image.User, ":")
	require.True(t, ok)
	for name, ps := range workloads(t) {
		sc := ps.SecurityContext
		require.NotNil(t, sc, name)
		for _, v := range ps.Volumes {
			if v.Secret == nil {
				continue
			}
			mode := int32(0o644)
			if v.Secret.DefaultMode != nil {
				mode = *v.Secret.DefaultMode
			}
			require.Zero(t, mode&0o007, "%s: Secret %s is readable by everyone", name, v.Name)
			user := sc.RunAsUser
			if c := ps.Containers[0].SecurityContext; c != nil && c.RunAsUser != nil {
				user = c.RunAsUser
			}
			require.NotNil(t, user, "%s runs as the user it declares", name)
			if *user == 0 {
				continue // root reads a 0400 Secret
			}
			require.Equal(t, uid, strconv.Itoa(int(*user)), "%s runs as the image's user", name)
			require.NotNil(t, sc.FSGroup, "%s: uid %d cannot read Secret %s (owned by root) without fsGroup", name, *user, v.Name)
			require.Equal(t, gid, strconv.Itoa(int(*sc.FSGroup)), name)
			require.NotZero(t, mode&0o040, "%s: Secret %s is not readable by its group", name, v.Name)
		}
	}
}

// The agent runs on every node with devices, tainted or not; every workload reads its git
// credential from a folder in Flux's Secret form, so SSH needs only other keys in the Secret.
func TestWorkloadsAsUsersRunThem(t *testing.T) {
	ws := workloads(t)
	agent := ws["gitbroker-agent"]
	require.Contains(t, agent.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists}, "the agent tolerates every taint")
	for name, ps := range ws {
		args := strings.Join(ps.Containers[0].Args, " ")
		require.Contains(t, args, "--git-credentials-dir=/etc/gitbroker/git", name)
		require.NotContains(t, args, "--git-password-file", name)
		mounted := false
		for _, m := range ps.Containers[0].VolumeMounts {
			mounted = mounted || m.MountPath == "/etc/gitbroker/git"
		}
		require.True(t, mounted, name)
	}
	require.NotContains(t, strings.Join(ws["gitbroker-recorder"].Containers[0].Args, " "), "--branch", "the recorder never reads the people's branch")
}
