package render_test

import (
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/render"
)

// asBarePods turns every broker Deployment of tree into the bare Pod renders before
// Deployments wrote: Akri's name (<deployment>-pod), the template's labels and spec.
func asBarePods(t *testing.T, tree render.Tree) render.Tree {
	t.Helper()
	out := render.Tree{}
	for f, data := range tree {
		if !strings.Contains(f, "/deployment-") {
			out[f] = data
			continue
		}
		var d appsv1.Deployment
		require.NoError(t, yaml.Unmarshal(data, &d))
		pod := corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-pod", Namespace: d.Namespace, Labels: d.Spec.Template.Labels, Annotations: d.Annotations},
			Spec:       d.Spec.Template.Spec,
		}
		b, err := yaml.Marshal(pod)
		require.NoError(t, err)
		out[path.Dir(f)+"/pod-"+d.Name+"-pod.yaml"] = b
	}
	return out
}

// Upgrading a repository rendered with bare Pods is one render: each Pod is removed and its
// Deployment created on the same node, the plan says so, and the deletion budget does not count
// a Pod whose broker lives on as a Deployment, while it still counts one whose device is gone.
func TestUpgradeFromBarePods(t *testing.T) {
	tree := repo(map[string]string{
		// Any removal of a broker object beyond 10% is refused: the upgrade removes none.
		"gitbroker.yaml":          strictBudget + "  maxDeletionPercent: 10\n",
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "a1", "a2", "a3")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "b1")),
	})
	rendered := apply(tree, renderOK(t, tree))
	old := asBarePods(t, rendered)
	pods := filesUnder(old, "rendered/default/cam/", "/pod-")
	require.Len(t, pods, 4)

	res := renderOK(t, old)
	require.Empty(t, res.Held)
	require.Empty(t, filesUnder(res.Files, "rendered/default/cam/", "/pod-"), "the bare Pods are removed")
	for _, f := range filesUnder(rendered, "rendered/default/cam/", "/deployment-") {
		require.Equal(t, rendered[f], res.Files[f], "%s is what a fresh render writes", f)
	}
	text := planText(res.Plan)
	require.Contains(t, text, "- Pod cam-")
	require.Contains(t, text, "replaced by Deployment cam-")
	require.Equal(t, 4, res.Plan.Summary.PodsRemoved)
	require.Equal(t, 4, res.Plan.Summary.DeploymentsCreated)

	// A node whose devices all vanish in the same render is still held by the budget: its
	// Pods have no Deployment to live on in.
	old["inventory/edge-a.yaml"] = []byte(inventory("edge-a"))
	res = render.Render(render.Request{Files: old})
	require.Nil(t, res.Refused)
	require.Len(t, res.Held, 1)
	require.Contains(t, res.Held[0], "node edge-a: its inventory would remove 3 of its 3 broker objects")
}

// Placement stays where the bare Pod was: a shared device's broker on edge-b stays on edge-b when
// the upgrade makes it a Deployment, though edge-a comes first by name.
func TestUpgradeKeepsPlacement(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:c1")),
	})
	tree = asBarePods(t, apply(tree, renderOK(t, tree)))
	require.Len(t, filesUnder(tree, "rendered/default/cam/", "/pod-edge-b-"), 1)
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("cam", "shared:c1")))
	res := renderOK(t, tree)
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-edge-b-"), 1)
	require.Empty(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-edge-a-"))
}
