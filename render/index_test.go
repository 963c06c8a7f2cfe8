package render

import (
	"maps"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/fixtures"
)

// indexSteps renders a fleet step by step with one kept Renderer, checking its indexes.
type indexSteps struct {
	t    *testing.T
	r    *Renderer
	tree Tree
}

// step edits the tree, renders it as a daemon does, and checks both indexes against the files.
func (s *indexSteps) step(name string, edit func(Tree)) {
	t := s.t
	t.Helper()
	edit(s.tree)
	req := Request{Files: s.tree, AllowDeletions: true}
	res, p, err := s.r.scopedPass(req, s.r.split(req))
	if err != nil {
		res, p = s.r.wholePass(req, s.r.split(req), nil)
	}
	require.Empty(t, res.Errors, name)
	want, dups := objectIndex(p.output.files)
	require.Equal(t, want, p.outIndex(), name)
	require.Equal(t, dups, p.index.outDups, name)
	want, dups = objectIndex(p.prev)
	// The index of prev became out's in place; undo holds what it was.
	prev := maps.Clone(p.prevIndex())
	for k, e := range p.index.undo {
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
	require.Equal(t, dups, p.index.prevDups, name)
	s.r.keep(res, p)
	maps.DeleteFunc(s.tree, func(f string, _ []byte) bool { return IsOwned(f) })
	maps.Copy(s.tree, res.Files)
}

// render renders as Render does (the budget may hold or refuse, trying passes it does not
// keep): each must leave the index of the last output as it found it.
func (s *indexSteps) render(name string, edit func(Tree)) *Result {
	s.t.Helper()
	edit(s.tree)
	res := s.r.Render(Request{Files: s.tree})
	want, _ := objectIndex(s.r.last.files)
	require.Equal(s.t, want, s.r.last.objects, name)
	s.tree = Tree(maps.Clone(map[string][]byte(s.tree)))
	maps.DeleteFunc(s.tree, func(f string, _ []byte) bool { return IsOwned(f) })
	maps.Copy(s.tree, res.Files)
	return res
}

func (s *indexSteps) inventories() []string {
	var out []string
	for _, f := range s.tree.Paths() {
		if strings.HasPrefix(f, "inventory/") {
			out = append(out, f)
		}
	}
	return out
}

// A kept Renderer takes the index of the previous output from its last render, and brings it up
// to date with the diff instead of indexing every file again: both must be the index of the
// files themselves, duplicates included.
func TestIndexesFollowTheFiles(t *testing.T) {
	s := &indexSteps{t: t, r: New(), tree: Tree(fixtures.Fleet(fixtures.FleetSpec{Nodes: 30, Configurations: 4, Devices: 200, Shards: 2, Seed: 5}))}
	addDevice := func(inv, id string) func(Tree) {
		return func(t Tree) {
			first := regexp.MustCompile(`(?m)^  - name: (cfg-\d+)\n    devices:\n`).FindStringSubmatch(string(t[inv]))
			t[inv] = []byte(strings.Replace(string(t[inv]), first[0], first[0]+"    - id: "+id+"\n      properties:\n        "+fixtures.FleetDeviceProperty(first[1], "DEVICE")+": "+id+"\n", 1))
		}
	}
	s.step("first", func(Tree) {})
	s.step("unchanged", func(Tree) {})
	s.step("a device added", addDevice(s.inventories()[0], "added"))
	s.step("a node gone", func(t Tree) { delete(t, s.inventories()[1]) })
	var planted string
	s.step("a Pod planted in the other shard", func(files Tree) {
		for _, f := range files.Paths() {
			if strings.Contains(f, "/shard-0/deployment-") {
				planted = strings.Replace(f, "/shard-0/", "/shard-1/", 1)
				files[planted] = files[f]
				return
			}
		}
	})
	s.step("after it", func(Tree) {})
	_, kept := s.tree[planted]
	require.False(t, kept, "the render removes what it did not write")
	s.step("a Configuration's shards changed", func(t Tree) {
		t["configurations/cfg-00.yaml"] = []byte(strings.Replace(string(t["configurations/cfg-00.yaml"]), "shards: 2", "shards: 3", 1))
	})

	s.render("a device", addDevice(s.inventories()[2], "another"))
	res := s.render("most nodes gone, held", func(t Tree) {
		for i, inv := range s.inventories() {
			if i%5 != 0 {
				delete(t, inv)
			}
		}
	})
	require.NotEmpty(t, res.Held)
	res = s.render("every Configuration gone, refused", func(t Tree) {
		for _, f := range t.Paths() {
			if strings.HasPrefix(f, "configurations/") {
				delete(t, f)
			}
		}
	})
	require.NotNil(t, res.Refused)
	s.render("a device after it", addDevice(s.inventories()[0], "later"))
}
