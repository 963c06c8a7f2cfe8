package render_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/render"
)

// A shared instance's broker stays on the node that holds it while that node reports the
// device: a node that newly reports it, even one first by name, takes a place only when one is
// free.
func TestPlacementIsSticky(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:c1")),
	})
	tree = apply(tree, renderOK(t, tree))
	require.Len(t, filesUnder(tree, "rendered/default/cam/", "/deployment-edge-b-"), 1)

	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("cam", "shared:c1")))
	res := renderOK(t, tree)
	require.Empty(t, res.Diff, "edge-a does not displace edge-b")
	tree = apply(tree, res)

	// edge-b stops reporting it: the place is free, and edge-a takes it.
	tree["inventory/edge-b.yaml"] = []byte(inventory("edge-b", entry("cam")))
	res = render.Render(render.Request{Files: tree, AllowDeletions: true})
	require.Empty(t, res.Errors)
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-edge-a-"), 1)
	require.Empty(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-edge-b-"))
}

// Nodes that report a shared device with different properties hold its instance as it was,
// and the plan says so; once they agree it renders again. A new instance they disagree on is
// not rendered at all.
func TestDisagreeingNodesHoldASharedInstance(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:c1")),
	})
	tree = apply(tree, renderOK(t, tree))
	before := tree.Owned()
	forged := strings.Replace(inventory("edge-a", entry("cam", "shared:c1", "shared:c2")), "DEVICE: c1", "DEVICE: rtsp://attacker.example", 1)
	tree["inventory/edge-a.yaml"] = []byte(forged)
	res := renderOK(t, tree)
	plan := planText(res.Plan)
	require.Contains(t, plan, `nodes edge-a and edge-b report shared device "c1" with different properties`)
	for _, p := range filesUnder(before, "rendered/default/cam/", "/deployment-") {
		require.Equal(t, before[p], res.Files[p], "%s is held as it was", p)
	}
	for p, b := range res.Files {
		require.NotContains(t, string(b), "attacker.example", p)
	}
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 2, "c1 on edge-b, and edge-a's own c2")

	// A new shared device they disagree on from the start is not rendered at all.
	tree = apply(tree, res)
	tree["inventory/edge-a.yaml"] = []byte(strings.Replace(inventory("edge-a", entry("cam", "shared:c1", "shared:c2", "shared:c3")), "DEVICE: c1", "DEVICE: rtsp://attacker.example", 1))
	tree["inventory/edge-b.yaml"] = []byte(strings.Replace(inventory("edge-b", entry("cam", "shared:c1", "shared:c3")), "DEVICE: c3", "DEVICE: other", 1))
	res = renderOK(t, tree)
	require.Contains(t, planText(res.Plan), `report shared device "c3" with different properties`)
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 2, "nothing for c3")

	// Once they agree, the instance renders from what they report.
	tree = apply(tree, res)
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("cam", "shared:c1", "shared:c2")))
	tree["inventory/edge-b.yaml"] = []byte(inventory("edge-b", entry("cam", "shared:c1")))
	res = renderOK(t, tree)
	require.NotContains(t, planText(res.Plan), "different properties")
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 2)
}
