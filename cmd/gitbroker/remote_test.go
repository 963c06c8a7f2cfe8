package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// demoServer serves the demo repository's inputs in the repository's layout (docs/FORMATS.md): the people's
// files on main, each node's inventory on its own ref gitbroker/inventory/<node>.
func demoServer(t *testing.T) *gitsynctest.Server {
	t.Helper()
	tree, err := readFS(fixtures.Demo())
	require.NoError(t, err)
	files := map[string]string{}
	nodes := map[string]string{}
	for p, b := range tree {
		switch {
		case api.IsInventoryPath(p):
			nodes[p] = string(b)
		case render.IsOwned(p):
		default:
			files[p] = string(b)
		}
	}
	srv := gitsynctest.NewServer(t, "main", files)
	for p, b := range nodes {
		node := strings.TrimSuffix(strings.TrimPrefix(p, api.InventoryDir+"/"), ".yaml")
		srv.On(verify.InventoryBranch(node)).Commit(map[string]string{p: b}, nil, "inventory: "+node)
	}
	return srv
}

// nodeCommit commits node's inventory on its ref, as its agent would, replacing old by new.
func nodeCommit(t *testing.T, srv *gitsynctest.Server, node, old, new string) string {
	t.Helper()
	ref := srv.On(verify.InventoryBranch(node))
	inv, ok := ref.File(api.InventoryPath(node))
	require.True(t, ok, node)
	return ref.Commit(map[string]string{api.InventoryPath(node): strings.ReplaceAll(inv, old, new)}, nil, "inventory: "+node)
}

// export writes the branch's tree at commit into a new directory.
func export(t *testing.T, srv *gitsynctest.Server, commit string) string {
	t.Helper()
	dir := t.TempDir()
	archive := filepath.Join(t.TempDir(), "tree.tar")
	gitsynctest.Git(t, srv.Bare(), "archive", "--output", archive, commit)
	out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput()
	require.NoError(t, err, string(out))
	return dir
}

func trailer(body, key string) string {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, key+": "); ok {
			return v
		}
	}
	return ""
}

func TestRemoteRender(t *testing.T) {
	srv := demoServer(t)
	seed := srv.Head()
	rendered := srv.On(verify.RenderedBranch)

	code, stdout, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Configuration default/akri-debug-echo")
	require.Contains(t, stdout, "Inputs: unverified: main has no .gitbroker/allowed_signers")
	require.Contains(t, stderr, "committed ")
	require.Equal(t, seed, srv.Head(), "the people's branch is never written")

	log := rendered.Log()
	require.Len(t, log, 1)
	c := log[0]
	require.Equal(t, "gitbroker-renderer <renderer@gitbroker.dev>", c.Author)
	require.True(t, strings.HasPrefix(c.Subject, "render: "), c.Subject)
	require.Equal(t, seed, trailer(c.Body, api.TrailerSourceCommit))
	require.True(t, strings.HasPrefix(trailer(c.Body, api.TrailerInputsDigest), "sha256:"))
	for _, p := range c.Paths {
		require.True(t, render.IsOwned(p) || render.IsInput(p), "the renderer wrote %s", p)
	}

	// What landed is exactly what a work-tree render of the same inputs gives, and the
	// rendered branch alone checks.
	dir := export(t, srv, rendered.Head())
	code, _, stderr = gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	got, _, err := readTree(dir)
	require.NoError(t, err)
	require.NotEmpty(t, got.Owned())
	for p, b := range got {
		if api.IsInventoryPath(p) {
			node := strings.TrimSuffix(strings.TrimPrefix(p, api.InventoryDir+"/"), ".yaml")
			want, _ := srv.On(verify.InventoryBranch(node)).File(p)
			require.Equal(t, want, string(b), "the node's file is mirrored as its ref holds it")
		}
	}
	meta := render.ParseMetadata(got[render.MetadataPath])
	require.Len(t, meta.Writers, 2, "each node's accepted tip is recorded")
	require.Equal(t, srv.On(verify.InventoryBranch("edge-a")).Head(), meta.Writers[verify.InventoryBranch("edge-a")])

	// Rendering the renderer's own commit changes nothing: no commit loop.
	head := rendered.Head()
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "up to date with "+seed)
	require.Equal(t, head, rendered.Head())

	// The agent of edge-b stops seeing foo0 and commits on its own ref: the next render
	// renders it and records the new tip.
	agentCommit := nodeCommit(t, srv, "edge-b", "foo0", "foo9")
	code, stdout, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "foo9")
	require.Equal(t, seed, trailer(rendered.Log()[0].Body, api.TrailerSourceCommit))
	dir = export(t, srv, rendered.Head())
	require.Equal(t, agentCommit, render.ParseMetadata(owned(t, dir)[render.MetadataPath]).Writers[verify.InventoryBranch("edge-b")])
	code, _, stderr = gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
}

// A person commits between the renderer's fetch and its push: the render
// is recomputed on the new head, which it then names as its source.
func TestRemoteRenderRecomputesOnConflict(t *testing.T) {
	srv := demoServer(t)
	rendered := srv.On(verify.RenderedBranch)
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	var personCommit string
	cfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	srv.BeforeNextPush(func() {
		personCommit = srv.Commit(map[string]string{
			"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:1.27-alpine", 1),
		}, nil, "bump the broker image")
		// A second renderer lands its render first: the push is refused and recomputed,
		// and finds a node's newer change to render.
		code, _, stderr := gitbroker(t, "render", "--git", srv.URL())
		require.Equal(t, exitOK, code, stderr)
		nodeCommit(t, srv, "edge-a", "bar2", "bar3")
	})
	nodeCommit(t, srv, "edge-a", "bar0", "bar2")
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "2 attempt(s)")
	log := rendered.Log()
	require.Len(t, log, 3)
	require.Equal(t, personCommit, trailer(log[0].Body, api.TrailerSourceCommit))
	dir := export(t, srv, rendered.Head())
	code, _, stderr = gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	pod := ""
	for _, p := range owned(t, dir).Paths() {
		if strings.Contains(p, "akri-debug-echo/deployment-") {
			pod = p
		}
	}
	got, _ := rendered.File(pod)
	require.Contains(t, got, "nginx:1.27-alpine")
}

func TestRemoteRenderInvalidRefusedAndTemplates(t *testing.T) {
	srv := demoServer(t)
	renderedBranch := srv.On(verify.RenderedBranch)
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	rendered := renderedBranch.Head()

	// An invalid Configuration: the rest renders, its output stays, exit 2.
	cfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	srv.Commit(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "image:", "imagee:", 1)}, nil, "typo")
	code, stdout, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stdout, "configurations/akri-debug-echo.yaml:")
	require.Contains(t, stdout, "imagee: unknown field")
	before, after := owned(t, export(t, srv, rendered)), owned(t, export(t, srv, renderedBranch.Head()))
	for p, b := range before {
		if strings.Contains(p, "akri-debug-echo") {
			require.Equal(t, string(b), string(after[p]), p)
		}
	}

	// Removing every Configuration would empty rendered/: refused, exit 1,
	// nothing committed.
	srv.Commit(nil, []string{"configurations"}, "remove everything")
	head := renderedBranch.Head()
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitRefused, code, stderr)
	require.Equal(t, head, renderedBranch.Head())

	// gitbroker.yaml replaces the commit message.
	srv.Commit(map[string]string{
		"configurations/akri-debug-echo.yaml": cfg,
		"gitbroker.yaml":                      "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  templates:\n    commitMessage: |\n      chore(brokers): {{.Summary}} [{{.ShortSourceCommit}}]\n",
	}, nil, "restore and template")
	source := srv.Head()
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--allow-deletions")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "chore(brokers): ", renderedBranch.Log()[0].Subject[:len("chore(brokers): ")])
	require.True(t, strings.HasSuffix(renderedBranch.Log()[0].Subject, "["+source[:12]+"]"), renderedBranch.Log()[0].Subject)

	// A template that does not parse is an input error with file, line and field.
	srv.Commit(map[string]string{
		"gitbroker.yaml": "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  templates:\n    commitMessage: \"{{.Summary\"\n",
	}, nil, "broken template")
	code, stdout, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stdout, "gitbroker.yaml:5: spec.templates.commitMessage: not a valid Go template")
}

func TestRemoteRenderFlags(t *testing.T) {
	code, _, stderr := gitbroker(t, "render", "--git", "http://127.0.0.1:1/x.git", "--dir", "x")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "are for a work tree")
}

// The renderer is killed with SIGKILL at random points of render-and-push
// cycles while inputs keep changing. No commit on the remote may hold a
// rendered/ that `check` rejects: a push is all or nothing.
func TestRemoteRenderSurvivesKill9(t *testing.T) {
	srv := demoServer(t)
	bin := binary(t)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	cycles := envInt("GITBROKER_KILL_CYCLES", 50)
	killed, finished := 0, 0
	nodeRef := srv.On(verify.InventoryBranch("edge-a"))
	inv, _ := nodeRef.File("inventory/edge-a.yaml")
	cfg, _ := srv.File("configurations/plc-firmware.yaml")
	for i := 0; i < cycles; i++ {
		// An input changes (a device, or the firmware every few cycles).
		nodeRef.Commit(map[string]string{"inventory/edge-a.yaml": strings.Replace(inv, "bar0", fmt.Sprintf("bar%d", i), -1)}, nil, fmt.Sprintf("device change %d", i))
		if i%5 == 0 {
			srv.Commit(map[string]string{"configurations/plc-firmware.yaml": strings.Replace(cfg, `"4.2.0"`, fmt.Sprintf(`"4.2.%d"`, i), 1)}, nil, fmt.Sprintf("firmware change %d", i))
		}

		cmd := exec.Command(bin, "render", "--git", srv.URL(), "--allow-deletions")
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-time.After(time.Duration(rng.Intn(150)) * time.Millisecond):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			if err := <-done; err != nil && strings.Contains(err.Error(), "killed") {
				killed++
			} else {
				finished++
			}
		case <-done:
			finished++
		}
	}
	// A last render, not killed, catches up.
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL(), "--allow-deletions")
	require.Equal(t, exitOK, code, stderr)

	renders, bad := 0, 0
	for _, e := range srv.On(verify.RenderedBranch).Log() {
		if trailer(e.Body, api.TrailerSourceCommit) == "" {
			continue
		}
		renders++
		if code, _, stderr := gitbroker(t, "check", "--dir", export(t, srv, e.Hash)); code != exitOK {
			bad++
			t.Errorf("renderer commit %s fails check:\n%s", e.Hash, stderr)
		}
	}
	gitsynctest.Git(t, srv.Bare(), "fsck", "--strict", "--no-progress")
	t.Logf("%d cycles: %d renders killed, %d finished; %d renderer commits on the remote, %d fail check", cycles, killed, finished, renders, bad)
	require.Zero(t, bad)
	require.Positive(t, killed, "some renders must have been killed for this test to mean anything")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestRemoteRenderRenderedBranch(t *testing.T) {
	srv := demoServer(t)
	source := srv.Head()
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL(), "--rendered-branch", "rendered")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "to rendered (rendered from "+source)
	require.Equal(t, source, srv.Head(), "the source branch is untouched")
	require.ElementsMatch(t, []string{"main", "rendered", "gitbroker/inventory/edge-a", "gitbroker/inventory/edge-b",
		api.AcceptedBranch("gitbroker/inventory/edge-a"), api.AcceptedBranch("gitbroker/inventory/edge-b")}, srv.Branches())
	code, _, stderr = gitbroker(t, "check", "--dir", export(t, srv, "rendered"))
	require.Equal(t, exitOK, code, "the rendered branch carries its inputs and checks on its own: %s", stderr)

	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--rendered-branch", "main")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "must differ from --branch")
}

func TestRemoteRenderReviewBranch(t *testing.T) {
	srv := demoServer(t)
	source := srv.Head()
	desc := filepath.Join(t.TempDir(), "pr.md")
	args := []string{"render", "--git", srv.URL(), "--review-branch", "--pr-description", desc,
		"--push-option", "merge_request.create=true", "--push-option", "merge_request.target=main"}
	code, _, stderr := gitbroker(t, args...)
	require.Equal(t, exitOK, code, stderr)
	branch := "gitbroker/render-" + source[:12]
	require.Contains(t, stderr, "on review branch "+branch)
	require.Equal(t, source, srv.Head(), "the source branch is untouched")
	require.ElementsMatch(t, []string{"main", branch, "gitbroker/inventory/edge-a", "gitbroker/inventory/edge-b"}, srv.Branches())
	require.Equal(t, []string{"merge_request.create=true", "merge_request.target=main"}, srv.PushOptions())
	code, _, stderr = gitbroker(t, "check", "--dir", export(t, srv, branch))
	require.Equal(t, exitOK, code, stderr)

	b, err := os.ReadFile(desc)
	require.NoError(t, err)
	md := string(b)
	require.True(t, strings.HasPrefix(md, "## gitbroker render of "+source[:12]+"\n"), md)
	require.Contains(t, md, "Rendered from `"+source+"` on `main`.")
	require.Contains(t, md, "| Configuration | Broker | Deployments | Jobs | Services | Flux Kustomizations |")
	require.Contains(t, md, "**held**: after: waiting for a Job of Configuration journal-format")
	require.Contains(t, md, "journal-reader")

	// The same source commit again: the branch exists, nothing is pushed,
	// and the description is written again to stdout.
	code, stdout, stderr := gitbroker(t, "render", "--git", srv.URL(), "--review-branch", "--pr-description", "-")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "already exists")
	require.Equal(t, md, stdout)
	require.Len(t, srv.PushOptions(), 2)

	// Once gitbroker/rendered exists, a review branch is proposed on top of it.
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	nodeCommit(t, srv, "edge-a", "bar0", "bar5")
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--review-branch", "--review-branch-prefix", "review-")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, srv.On(verify.RenderedBranch).Head(), strings.TrimSpace(gitsynctest.Git(t, srv.Bare(), "rev-parse", "review-"+source[:12]+"^")))
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
