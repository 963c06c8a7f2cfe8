package render_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/render"
)

func TestDeletionBudgetAndEmptyOutputGuard(t *testing.T) {
	// A person's change is judged fleet-wide: deleting most of the broker objects is refused.
	other := strings.Replace(podConfig, "name: cam\n", "name: lamp\n", 1)
	tree := repo(map[string]string{
		"configurations/cam.yaml":  podConfig,
		"configurations/lamp.yaml": other,
		"inventory/edge-a.yaml":    inventory("edge-a", entry("cam", "c1", "c2", "c3"), entry("lamp", "l1")),
	})
	tree = apply(tree, renderOK(t, tree))
	delete(tree, "configurations/cam.yaml")
	res := render.Render(render.Request{Files: tree})
	require.NotNil(t, res.Refused)
	require.Contains(t, res.Refused.Reason, "6 of 8 broker objects")
	require.True(t, render.Equal(res.Previous, res.Files), "a refused render writes nothing")

	delete(tree, "configurations/lamp.yaml")
	res = render.Render(render.Request{Files: tree})
	require.NotNil(t, res.Refused)
	require.Contains(t, res.Refused.Reason, "leave rendered/ empty")

	res = render.Render(render.Request{Files: tree, AllowDeletions: true})
	require.Nil(t, res.Refused)
	require.Empty(t, filesUnder(res.Files, "rendered/default/", "/deployment-"))
}

// The budget counts per node: when a render would break it, a node whose inventory alone would
// remove most of its objects is held as it was, and the rest of the fleet (other nodes,
// Configuration changes) still renders. Within the budget, a node may lose everything.
func TestDeletionBudgetCountsPerNode(t *testing.T) {
	tree := repo(map[string]string{
		// The percentages alone: no allowance of removals that always pass.
		"gitbroker.yaml":          strictBudget,
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "a1", "a2", "a3", "a4")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "b1")),
	})
	tree = apply(tree, renderOK(t, tree))
	before := filesUnder(tree, "rendered/default/cam/", "/deployment-")
	require.Len(t, before, 5)

	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a"))
	tree["inventory/edge-b.yaml"] = []byte(inventory("edge-b", entry("cam", "b1", "b2")))
	res := render.Render(render.Request{Files: tree})
	require.Nil(t, res.Refused, "one node's churn does not refuse the render")
	require.Empty(t, res.Errors)
	require.Len(t, res.Held, 1)
	require.Contains(t, res.Held[0], "node edge-a: its inventory would remove 4 of its 4 broker objects (100%)")
	require.Contains(t, planText(res.Plan), "node edge-a: its inventory would remove 4")
	pods := filesUnder(res.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, pods, 6, "edge-a's four Pods kept, edge-b's new device rendered")
	for _, f := range before {
		require.Equal(t, tree[f], res.Files[f], "%s kept as it was", f)
	}

	// A node losing one device is ordinary churn; --allow-deletions lets a whole node go.
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("cam", "a1", "a2", "a3")))
	res = render.Render(render.Request{Files: tree})
	require.Empty(t, res.Held)
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 5)
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a"))
	res = render.Render(render.Request{Files: tree, AllowDeletions: true})
	require.Empty(t, res.Held)
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 2)

	// A node that is a small part of the fleet losing all its devices breaks no budget.
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("cam", "a1", "a2", "a3", "a4")))
	tree = apply(tree, renderOK(t, tree))
	tree["inventory/edge-b.yaml"] = []byte(inventory("edge-b"))
	res = renderOK(t, tree)
	require.Empty(t, res.Held)
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 4)
}

const strictBudget = "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  deletionAllowance: 0\n"

// A small fleet is not frozen by the deletion budget: in a one-node fleet an unplugged device
// removes all of its broker objects (100%), which held that node for good before; it passes
// because it is within deletionAllowance. A node that removes more than that is still held.
func TestDeletionAllowance(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "a1")),
	})
	tree = apply(tree, renderOK(t, tree))
	require.Len(t, filesUnder(tree, "rendered/default/cam/", "/deployment-"), 1)
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a"))
	res := render.Render(render.Request{Files: tree})
	require.Nil(t, res.Refused, "one unplugged device in a one-node fleet")
	require.Empty(t, res.Held)
	require.Empty(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"))

	// With deletionAllowance: 0 the node is held, its Pod kept until someone renders with
	// --allow-deletions, as before the setting.
	strict := maps.Clone(tree)
	strict["gitbroker.yaml"] = []byte(strictBudget)
	res = render.Render(render.Request{Files: strict})
	require.Len(t, res.Held, 1)
	require.Contains(t, res.Held[0], "node edge-a: its inventory would remove 1 of its 1 broker objects")
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 1)

	// Six devices on one node of two: losing all of them is over the allowance of five
	// objects, and over the node's share, so that node is held.
	tree = repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "a1", "a2", "a3", "a4", "a5", "a6")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "b1")),
	})
	tree = apply(tree, renderOK(t, tree))
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a"))
	res = render.Render(render.Request{Files: tree})
	require.Nil(t, res.Refused)
	require.Len(t, res.Held, 1)
	require.Contains(t, res.Held[0], "node edge-a: its inventory would remove 6 of its 6 broker objects")
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 7)
}
