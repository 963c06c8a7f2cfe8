package render_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/render"
)

func nodeLoss(node, reason string) string {
	return "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeLoss\nmetadata:\n  name: " + node +
		"\nspec:\n  since: \"2026-12-05T10:00:00Z\"\n  reason: " + reason + "\n  message: Kubelet stopped posting node status.\n"
}

// A lost node's brokers of shared devices move to another node that reports the device, under
// the strictest deletion budget (a move is no deletion), and say why; its unshared device's
// broker stays (nothing else reaches it). When the node is back the broker stays where it went
// (placement is sticky); when every node of a device is lost, the broker stays where it is.
// A kept Renderer, whose re-renders are scoped to what changed, moves them the same.
func TestLostNodeMovesSharedBrokers(t *testing.T) {
	for _, kept := range []bool{false, true} {
		r := render.New()
		run := func(tree render.Tree) *render.Result {
			t.Helper()
			if kept {
				return r.Render(render.Request{Files: tree})
			}
			return render.Render(render.Request{Files: tree})
		}
		tree := repo(map[string]string{
			"gitbroker.yaml":          strictBudget + "  maxDeletionPercent: 10\n",
			"configurations/cam.yaml": podConfig,
			"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:c1", "a1")),
			"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:c1")),
		})
		brokers := func(tree render.Tree) []string {
			var out []string
			for _, f := range filesUnder(tree, "rendered/default/cam/", "/deployment-") {
				out = append(out, strings.TrimPrefix(f, "rendered/default/cam/deployment-"))
			}
			return out
		}
		res := run(tree)
		require.Empty(t, res.Errors)
		tree = apply(tree, res)
		require.Len(t, brokers(tree), 2)
		require.Len(t, filesUnder(tree, "rendered/default/cam/", "/deployment-edge-a-cam-"), 1, "the shared device's broker is on edge-a, first by name")
		unshared := filesUnder(tree, "rendered/default/cam/", "/deployment-cam-")
		require.Len(t, unshared, 1)

		tree["status/nodes/edge-a.yaml"] = []byte(nodeLoss("edge-a", "NotReady"))
		res = run(tree)
		require.Nil(t, res.Refused, "kept=%v", kept)
		require.Empty(t, res.Errors)
		require.Empty(t, res.Held)
		text := planText(res.Plan)
		require.Contains(t, text, "warning: node edge-a is lost (NotReady since 2026-12-05T10:00:00Z")
		require.Contains(t, text, "- Deployment edge-a-cam-")
		require.Contains(t, text, "removed: node edge-a is lost (NotReady since 2026-12-05T10:00:00Z); the broker of this shared device moves to a node that reports it")
		require.Contains(t, text, "+ Deployment edge-b-cam-")
		tree = apply(tree, res)
		require.Empty(t, filesUnder(tree, "rendered/default/cam/", "/deployment-edge-a-"), "kept=%v", kept)
		require.Len(t, filesUnder(tree, "rendered/default/cam/", "/deployment-edge-b-cam-"), 1)
		require.Equal(t, unshared, filesUnder(tree, "rendered/default/cam/", "/deployment-cam-"), "the unshared device's broker stays")

		// Back: the broker stays on edge-b.
		delete(tree, "status/nodes/edge-a.yaml")
		res = run(tree)
		require.Empty(t, res.Errors)
		require.NotContains(t, planText(res.Plan), "Deployment edge-", "kept=%v", kept)
		tree = apply(tree, res)

		// Every node of the device lost: its broker stays where it is.
		tree["status/nodes/edge-a.yaml"] = []byte(nodeLoss("edge-a", "Gone"))
		tree["status/nodes/edge-b.yaml"] = []byte(nodeLoss("edge-b", "NotReady"))
		res = run(tree)
		require.Empty(t, res.Errors)
		require.NotContains(t, planText(res.Plan), "Deployment edge-", "kept=%v", kept)
		require.Contains(t, planText(res.Plan), "node edge-a is lost (gone from the cluster since")
	}
}

// A NodeLoss the renderer cannot read moves nothing, and the error names the file, line and
// field: a node is lost only on a record that says so.
func TestInvalidNodeLossMovesNothing(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:c1")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:c1")),
	})
	tree = apply(tree, renderOK(t, tree))
	for file, data := range map[string]string{
		"status/nodes/edge-a.yaml": nodeLoss("edge-b", "NotReady"),
		"status/nodes/edge-b.yaml": strings.Replace(nodeLoss("edge-b", "NotReady"), "reason: NotReady", "reason: Sleepy", 1),
	} {
		bad := render.Tree{}
		for k, v := range tree {
			bad[k] = v
		}
		bad[file] = []byte(data)
		res := render.Render(render.Request{Files: bad})
		require.Len(t, res.Errors, 1, file)
		require.Contains(t, res.Errors[0].Error(), file+":", file)
		require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-edge-a-"), 1, "nothing moves on %s", file)
	}
}
