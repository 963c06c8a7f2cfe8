package render

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/fixtures"
)

// A kept Renderer takes the index of the previous output from its last render, and brings it up
// to date with the diff instead of indexing every file again: both must be the index of the
// files themselves, duplicates included.
func TestIndexesFollowTheFiles(t *testing.T) {
	tree := Tree(fixtures.Fleet(fixtures.FleetSpec{Nodes: 30, Configurations: 4, Devices: 200, Shards: 2, Seed: 5}))
	r := New()
	step := func(name string, edit func(Tree)) {
		t.Helper()
		edit(tree)
		req := Request{Files: tree, AllowDeletions: true}
		res, p := r.pass(req, r.split(req), nil, true)
		if res == nil {
			res, p = r.pass(req, r.split(req), nil, false)
		}
		require.Empty(t, res.Errors, name)
		want, dups := objectIndex(p.out)
		require.Equal(t, want, p.outIndex(), name)
		require.Equal(t, dups, p.outDups, name)
		want, dups = objectIndex(p.prev)
		// The index of prev became out's in place; undo holds what it was.
		prev := maps.Clone(p.prevIndex())
		for k, e := range p.undo {
			if e.had {
				prev[k] = e.file
			} else {
				delete(prev, k)
			}
		}
		require.Equal(t, want, prev, name)
		require.Equal(t, len(want), p.prevLen(), name)
		for k, f := range want {
			got, ok := p.prevID(k)
			require.True(t, ok && got == f, name)
		}
		require.Equal(t, dups, p.prevDups, name)
		r.keep(res, p)
		for f := range tree {
			if IsOwned(f) {
				delete(tree, f)
			}
		}
		for f, b := range res.Files {
			tree[f] = b
		}
	}
	inventories := func() []string {
		var out []string
		for _, f := range tree.Paths() {
			if strings.HasPrefix(f, "inventory/") {
				out = append(out, f)
			}
		}
		return out
	}
	step("first", func(Tree) {})
	step("unchanged", func(Tree) {})
	step("a device added", func(t Tree) {
		inv := inventories()[0]
		t[inv] = []byte(strings.Replace(string(t[inv]), "    devices:\n", "    devices:\n    - id: added\n      properties:\n        DEVICE: added\n", 1))
	})
	step("a node gone", func(t Tree) { delete(t, inventories()[1]) })
	var planted string
	step("a Pod planted in the other shard", func(files Tree) {
		for _, f := range files.Paths() {
			if strings.Contains(f, "/shard-0/pod-") {
				planted = strings.Replace(f, "/shard-0/", "/shard-1/", 1)
				files[planted] = files[f]
				return
			}
		}
	})
	step("after it", func(Tree) {})
	_, kept := tree[planted]
	require.False(t, kept, "the render removes what it did not write")
	step("a Configuration's shards changed", func(t Tree) {
		t["configurations/cfg-00.yaml"] = []byte(strings.Replace(string(t["configurations/cfg-00.yaml"]), "shards: 2", "shards: 3", 1))
	})

	// Renders the budget holds or refuses try passes they do not keep: each must leave the index
	// of the last output as it found it.
	render := func(name string, edit func(Tree)) *Result {
		t.Helper()
		edit(tree)
		res := r.Render(Request{Files: tree})
		want, _ := objectIndex(r.last.files)
		require.Equal(t, want, r.last.objects, name)
		tree = Tree(maps.Clone(map[string][]byte(tree)))
		maps.DeleteFunc(tree, func(f string, _ []byte) bool { return IsOwned(f) })
		maps.Copy(tree, res.Files)
		return res
	}
	render("a device", func(t Tree) {
		inv := inventories()[2]
		t[inv] = []byte(strings.Replace(string(t[inv]), "    devices:\n", "    devices:\n    - id: another\n      properties:\n        DEVICE: another\n", 1))
	})
	res := render("most nodes gone, held", func(t Tree) {
		for i, inv := range inventories() {
			if i%5 != 0 {
				delete(t, inv)
			}
		}
	})
	require.NotEmpty(t, res.Held)
	res = render("every Configuration gone, refused", func(t Tree) {
		for _, f := range t.Paths() {
			if strings.HasPrefix(f, "configurations/") {
				delete(t, f)
			}
		}
	})
	require.NotNil(t, res.Refused)
	render("a device after it", func(t Tree) {
		inv := inventories()[0]
		t[inv] = []byte(strings.Replace(string(t[inv]), "    devices:\n", "    devices:\n    - id: later\n      properties:\n        DEVICE: later\n", 1))
	})
}
