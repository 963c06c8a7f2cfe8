package renderer

import (
	"context"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/verify"
)

// demoServer serves the demo repository's inputs: the people's files on main, each node's
// inventory on its own ref.
func demoServer(t *testing.T) *gitsynctest.Server {
	t.Helper()
	files, nodes := map[string]string{}, map[string]string{}
	err := fs.WalkDir(fixtures.Demo(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !render.IsInput(p) {
			return err
		}
		b, err := fs.ReadFile(fixtures.Demo(), p)
		if api.IsInventoryPath(p) {
			nodes[p] = string(b)
		} else {
			files[p] = string(b)
		}
		return err
	})
	require.NoError(t, err)
	srv := gitsynctest.NewServer(t, "main", files)
	for p, b := range nodes {
		node := strings.TrimSuffix(strings.TrimPrefix(p, api.InventoryDir+"/"), ".yaml")
		srv.On(verify.InventoryBranch(node)).Commit(map[string]string{p: b}, nil, "inventory: "+node)
	}
	return srv
}

// nodeCommit commits node's inventory on its ref, as its agent would, replacing old by new.
func nodeCommit(t *testing.T, srv *gitsynctest.Server, node, old, new string) {
	t.Helper()
	ref := srv.On(verify.InventoryBranch(node))
	inv, ok := ref.File(api.InventoryPath(node))
	require.True(t, ok, node)
	ref.Commit(map[string]string{api.InventoryPath(node): strings.ReplaceAll(inv, old, new)}, nil, "inventory: "+node)
}

// unsigned is a renderer of main onto gitbroker/rendered with no key.
func unsigned(t *testing.T, url string) *Renderer {
	open := func(branch string, opts ...gitsync.Option) *gitsync.Repository {
		r, err := gitsync.New(url, branch, opts...)
		require.NoError(t, err)
		return r
	}
	return &Renderer{
		Store:   open(verify.RenderedBranch, gitsync.WithCreateBranch()),
		Sources: verify.Sources{Main: open("main"), SourceBranch: "main", Signatures: &verify.Signatures{}},
		Branch:  "main", Engine: render.New(), Now: time.Now,
		Author: gitsync.Signature{Name: "gitbroker-renderer", Email: "renderer@gitbroker.dev"},
	}
}

// changeRecorder is the rendered branch's store, noting each change the renderer hands it.
type changeRecorder struct {
	gitsync.Store
	changes []*gitsync.Change
}

func (c *changeRecorder) Update(ctx context.Context, fn gitsync.UpdateFunc) (gitsync.Result, error) {
	return c.Store.Update(ctx, func(ctx context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		ch, err := fn(ctx, head)
		c.changes = append(c.changes, ch)
		return ch, err
	})
}

// A kept renderer (the daemon's) holds what it pushed: its next render reads the previous
// output from there and commits only what differs, and what lands is byte for byte what the
// full change would have made. When someone else moved the branch, it falls back to the full
// change, which drops what was planted.
func TestKeptRendererCommitsEdits(t *testing.T) {
	srv := demoServer(t)
	rendered := srv.On(verify.RenderedBranch)
	r := unsigned(t, srv.URL())
	rec := &changeRecorder{Store: r.Store}
	r.Store = rec
	ctx := context.Background()
	// holds checks that the renderer's idea of the branch is what the branch holds.
	holds := func() {
		t.Helper()
		require.Equal(t, rendered.Head(), r.last.commit)
		got := render.Tree{}
		for _, p := range rendered.Files() {
			c, _ := rendered.File(p)
			got[p] = []byte(c)
		}
		held := maps.Clone(r.last.rendered)
		maps.Copy(held, r.last.inputs)
		require.Empty(t, render.Diff(got, held), "files the renderer holds wrongly")
	}
	// fresh renders the same inputs with a renderer that holds nothing: it must find nothing to do.
	fresh := func() {
		t.Helper()
		_, err := unsigned(t, srv.URL()).Once(ctx)
		require.ErrorIs(t, err, gitsync.ErrNoChanges)
	}
	last := func() *gitsync.Change { return rec.changes[len(rec.changes)-1] }

	_, err := r.Once(ctx)
	require.NoError(t, err)
	require.NotNil(t, last().Files, "the first render has nothing to edit")
	holds()

	// A device changes: one edit per changed file, on the renderer's own commit.
	nodeCommit(t, srv, "edge-b", "foo0", "foo9")
	before := rendered.Head()
	out, err := r.Once(ctx)
	require.NoError(t, err)
	require.Nil(t, last().Files)
	require.Equal(t, before, last().EditsBase)
	require.Less(t, len(last().Edits), len(r.last.rendered)+len(r.last.inputs)/2)
	require.Contains(t, strings.Join(slices.Collect(maps.Keys(last().Edits)), " "), "inventory/edge-b.yaml")
	require.Equal(t, before, gitsynctest.Git(t, srv.Bare(), "rev-parse", out.Commit+"^")[:len(before)])
	holds()
	fresh()

	// A device goes: its files are deleted by edits.
	nodeCommit(t, srv, "edge-a", "    - id: bar0\n      properties:\n        DEBUG_ECHO_DESCRIPTION: bar0\n", "")
	out, err = r.Once(ctx)
	require.NoError(t, err)
	require.Empty(t, out.Result.Errors)
	require.Empty(t, out.Result.Held)
	deleted := 0
	for _, b := range last().Edits {
		if b == nil {
			deleted++
		}
	}
	require.Positive(t, deleted)
	holds()
	fresh()

	// A person adds a Configuration no device reports, then removes it: the mirrored input comes
	// and goes through edits.
	const extra = "configurations/extra.yaml"
	cfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	srv.Commit(map[string]string{extra: strings.Replace(cfg, "name: akri-debug-echo", "name: extra", 1)}, nil, "add a Configuration")
	_, err = r.Once(ctx)
	require.NoError(t, err)
	require.Contains(t, last().Edits, extra)
	holds()
	srv.Commit(nil, []string{extra}, "remove it")
	_, err = r.Once(ctx)
	require.NoError(t, err)
	gone, ok := last().Edits[extra]
	require.True(t, ok)
	require.Nil(t, gone)
	_, ok = rendered.File(extra)
	require.False(t, ok)
	holds()
	fresh()

	// Nothing changed: no commit, and the renderer still holds the head.
	head := rendered.Head()
	_, err = r.Once(ctx)
	require.ErrorIs(t, err, gitsync.ErrNoChanges)
	require.Equal(t, head, rendered.Head())
	holds()

	// Someone else commits to the rendered branch: the renderer does not hold that head, so it
	// renders the full change, which removes the planted file.
	rendered.Commit(map[string]string{"planted.yaml": "kind: Secret\n"}, nil, "planted")
	nodeCommit(t, srv, "edge-b", "foo9", "foo8")
	_, err = r.Once(ctx)
	require.NoError(t, err)
	require.NotNil(t, last().Files)
	_, ok = rendered.File("planted.yaml")
	require.False(t, ok)
	holds()
	fresh()
}

// With spec.clusters and spec.flux.folderSources, a kept renderer moves each cluster's folder
// branches with its commits: on the render that first gives a cluster brokers (after one that
// rendered nothing), and when one cluster's folder changes, that folder's branch alone.
func TestKeptRendererMovesEachClustersFolderBranches(t *testing.T) {
	srv := demoServer(t)
	ctx := context.Background()
	settings, _ := srv.File(api.SettingsPath)
	settings += "  flux:\n    folderSources: {url: \"https://git.example.com/fleet/edge.git\"}\n" +
		"  clusters:\n  - name: site-a\n    nodes: [edge-a]\n  - name: site-b\n    nodes: [\"edge-[b-z]\"]\n"
	if !strings.Contains(settings, "spec:") {
		settings = "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n" + settings
	}
	// First nothing to render: the nodes' refs come later.
	nodes := map[string]string{}
	for _, n := range []string{"edge-a", "edge-b"} {
		ref := srv.On(verify.InventoryBranch(n))
		inv, ok := ref.File(api.InventoryPath(n))
		require.True(t, ok)
		nodes[n] = inv
		gitsynctest.Git(t, srv.Bare(), "update-ref", "-d", "refs/heads/"+verify.InventoryBranch(n))
	}
	srv.Commit(map[string]string{api.SettingsPath: settings}, nil, "two clusters, a source per folder")
	r := unsigned(t, srv.URL())
	_, err := r.Once(ctx)
	require.NoError(t, err)
	for n, inv := range nodes {
		srv.On(verify.InventoryBranch(n)).Commit(map[string]string{api.InventoryPath(n): inv}, nil, "inventory: "+n)
	}
	out, err := r.Once(ctx)
	require.NoError(t, err)
	companions := render.Companions(out.Result.Files)
	for _, c := range []string{"site-a", "site-b"} {
		require.Contains(t, companions, api.ClusterFolderBranchPrefix(c)+"flux")
	}
	for b, folder := range companions {
		require.NotEmpty(t, srv.On(b).Head(), "%s, showing %s, exists", b, folder)
	}
	tips := map[string]string{}
	for b := range companions {
		tips[b] = srv.On(b).Head()
	}

	// A device of edge-b: one of site-b's folder branches moves, nothing of site-a's.
	nodeCommit(t, srv, "edge-b", "foo0", "foo9")
	out, err = r.Once(ctx)
	require.NoError(t, err)
	var moved []string
	for _, b := range out.Push.CompanionBranches {
		if strings.HasPrefix(b, api.FolderBranchPrefix) {
			moved = append(moved, b)
		}
	}
	require.Len(t, moved, 1, "%v", out.Push.CompanionBranches)
	require.True(t, strings.HasPrefix(moved[0], api.ClusterFolderBranchPrefix("site-b")), moved[0])
	require.NotEqual(t, tips[moved[0]], srv.On(moved[0]).Head())
}
