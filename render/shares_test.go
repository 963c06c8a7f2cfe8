package render_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

// sharesIn reads every node's shares from a render's shard files.
func sharesIn(t *testing.T, tree render.Tree, nodes ...string) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, n := range nodes {
		f := api.SharesFile(api.AcceptedShard(api.InventoryBranch(n)))
		if s := api.SharesOf(tree[f], n); len(s) > 0 {
			out[n] = s
		}
	}
	return out
}

// A shared device's capacity is split among the nodes that see it, once across the cluster:
// a slot for each broker where the brokers were placed, the rest round the nodes in that order;
// an unshared device has no share (its node offers its capacity); a lost node's slots go with
// its broker to the nodes left.
func TestSharesCountASharedDeviceOnce(t *testing.T) {
	three := fixtures.PodConfiguration("akri.sh/v0", "cam", 3)
	tree := repo(map[string]string{
		"configurations/cam.yaml":  three,
		"configurations/lone.yaml": fixtures.PodConfiguration("akri.sh/v0", "lone", 1),
		"inventory/edge-a.yaml":    inventory("edge-a", entry("cam", "shared:c1", "a1"), entry("lone", "shared:l1")),
		"inventory/edge-b.yaml":    inventory("edge-b", entry("cam", "shared:c1"), entry("lone", "shared:l1")),
		"inventory/edge-c.yaml":    inventory("edge-c", entry("lone", "shared:l1")),
	})
	res := render.Render(render.Request{Files: tree})
	require.Empty(t, res.Errors)
	tree = apply(tree, res)
	shares := sharesIn(t, tree, "edge-a", "edge-b", "edge-c")
	cam, lone := instanceOf(t, tree, "cam", "c1"), instanceOf(t, tree, "lone", "l1")
	// cam: capacity 3 on two nodes, a broker on each and the third slot to the first.
	// lone: capacity 1 on three nodes, its one broker on edge-a, first by name.
	require.Equal(t, map[string]map[string]int{
		"edge-a": {cam: 2, lone: 1},
		"edge-b": {cam: 1},
	}, shares)

	// What is kept as it was keeps its shares: the instances of a node whose inventory is
	// invalid, and a Configuration whose file is invalid, with their brokers.
	for name, edit := range map[string]func(render.Tree){
		"an invalid inventory":     func(tr render.Tree) { tr["inventory/edge-a.yaml"] = []byte("not: [an inventory\n") },
		"an invalid Configuration": func(tr render.Tree) { tr["configurations/cam.yaml"] = []byte("kind: Configuration\nspec: [\n") },
	} {
		broken := maps.Clone(tree)
		edit(broken)
		res := render.Render(render.Request{Files: broken})
		require.NotEmpty(t, res.Errors, name)
		require.Equal(t, shares, sharesIn(t, apply(broken, res), "edge-a", "edge-b", "edge-c"), name)
	}

	// edge-a lost: its broker of lone moves, and the slot with it; cam's go to edge-b.
	tree["status/nodes/edge-a.yaml"] = []byte(nodeLoss("edge-a", "NotReady"))
	res = render.Render(render.Request{Files: tree})
	require.Empty(t, res.Errors)
	tree = apply(tree, res)
	require.Equal(t, map[string]map[string]int{
		"edge-b": {cam: 3, lone: 1},
	}, sharesIn(t, tree, "edge-a", "edge-b", "edge-c"))
	// Rendered again with nothing changed, the files are the same bytes.
	again := render.Render(render.Request{Files: tree})
	require.False(t, again.Changed())
}

// instanceOf is the name of the instance of cfg whose device id is id, from its broker's labels.
func instanceOf(t *testing.T, tree render.Tree, cfg, id string) string {
	t.Helper()
	for _, f := range filesUnder(tree, "rendered/default/"+cfg+"/", "/deployment-") {
		h := string(tree[f])
		if strings.Contains(h, "\n    "+api.AnnotationDeviceID+": "+id+"\n") {
			_, rest, _ := strings.Cut(h, "\n    "+api.LabelInstance+": ")
			name, _, _ := strings.Cut(rest, "\n")
			return name
		}
	}
	t.Fatalf("no broker of %s for device %s", cfg, id)
	return ""
}
