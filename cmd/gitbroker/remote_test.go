package main

import (
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

	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
)

// demoServer serves the demo repository's inputs.
func demoServer(t *testing.T) *gitsynctest.Server {
	t.Helper()
	tree, err := readFS(fixtures.Demo())
	require.NoError(t, err)
	files := map[string]string{}
	for p, b := range tree {
		files[p] = string(b)
	}
	return gitsynctest.NewServer(t, "main", files)
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

	code, stdout, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Configuration default/akri-debug-echo")
	require.Contains(t, stderr, "committed ")

	log := srv.Log()
	require.Len(t, log, 2)
	c := log[0]
	require.Equal(t, "gitbroker-renderer <renderer@gitbroker.dev>", c.Author)
	require.True(t, strings.HasPrefix(c.Subject, "render: "), c.Subject)
	require.Equal(t, seed, trailer(c.Body, TrailerSourceCommit))
	require.True(t, strings.HasPrefix(trailer(c.Body, TrailerInputsDigest), "sha256:"))
	for _, p := range c.Paths {
		require.True(t, render.IsOwned(p), "the renderer wrote %s", p)
	}

	// What landed is exactly what a work-tree render of the source gives.
	dir := export(t, srv, seed)
	code, _, stderr = gitbroker(t, "render", "--dir", dir, "--source-commit", seed)
	require.Equal(t, exitOK, code, stderr)
	want := owned(t, dir)
	got := owned(t, export(t, srv, srv.Head()))
	require.Equal(t, want.Paths(), got.Paths())
	for p := range want {
		require.Equal(t, string(want[p]), string(got[p]), p)
	}

	// Rendering the renderer's own commit changes nothing: no commit loop.
	head := srv.Head()
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "up to date with "+head)
	require.Equal(t, head, srv.Head())

	// The agent of edge-b stops seeing foo0: the next render commits on
	// top of the agent's commit and names it as its source.
	inv, _ := srv.File("inventory/edge-b.yaml")
	agentCommit := srv.Commit(map[string]string{"inventory/edge-b.yaml": strings.Replace(inv, "foo0", "foo9", -1)}, nil, "inventory: edge-b")
	code, stdout, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "foo9")
	require.Equal(t, agentCommit, trailer(srv.Log()[0].Body, TrailerSourceCommit))
	code, _, stderr = gitbroker(t, "check", "--dir", export(t, srv, srv.Head()))
	require.Equal(t, exitOK, code, stderr)
}

// A person commits between the renderer's fetch and its push: the render
// is recomputed on the new head, which it then names as its source.
func TestRemoteRenderRecomputesOnConflict(t *testing.T) {
	srv := demoServer(t)
	var personCommit string
	cfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	srv.BeforeNextPush(func() {
		personCommit = srv.Commit(map[string]string{
			"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:1.27-alpine", 1),
		}, nil, "bump the broker image")
	})
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "2 attempt(s)")
	log := srv.Log()
	require.Len(t, log, 3)
	require.Equal(t, personCommit, trailer(log[0].Body, TrailerSourceCommit))
	code, _, stderr = gitbroker(t, "check", "--dir", export(t, srv, srv.Head()))
	require.Equal(t, exitOK, code, stderr)
	pod := ""
	for _, p := range owned(t, export(t, srv, srv.Head())).Paths() {
		if strings.Contains(p, "akri-debug-echo/pod-") {
			pod = p
		}
	}
	got, _ := srv.File(pod)
	require.Contains(t, got, "nginx:1.27-alpine")
}

func TestRemoteRenderInvalidRefusedAndTemplates(t *testing.T) {
	srv := demoServer(t)
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	rendered := srv.Head()

	// An invalid Configuration: the rest renders, its output stays, exit 2.
	cfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	srv.Commit(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "image:", "imagee:", 1)}, nil, "typo")
	code, stdout, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stdout, "configurations/akri-debug-echo.yaml:")
	require.Contains(t, stdout, "imagee: unknown field")
	before, after := owned(t, export(t, srv, rendered)), owned(t, export(t, srv, srv.Head()))
	for p, b := range before {
		if strings.Contains(p, "akri-debug-echo") {
			require.Equal(t, string(b), string(after[p]), p)
		}
	}

	// Removing every Configuration would empty rendered/: refused, exit 1,
	// nothing committed.
	srv.Commit(nil, []string{"configurations"}, "remove everything")
	head := srv.Head()
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitRefused, code, stderr)
	require.Equal(t, head, srv.Head())

	// gitbroker.yaml replaces the commit message.
	srv.Commit(map[string]string{
		"configurations/akri-debug-echo.yaml": cfg,
		"gitbroker.yaml":                      "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  templates:\n    commitMessage: |\n      chore(brokers): {{.Summary}} [{{.ShortSourceCommit}}]\n",
	}, nil, "restore and template")
	source := srv.Head()
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--allow-deletions")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "chore(brokers): ", srv.Log()[0].Subject[:len("chore(brokers): ")])
	require.True(t, strings.HasSuffix(srv.Log()[0].Subject, "["+source[:12]+"]"), srv.Log()[0].Subject)

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
	inv, _ := srv.File("inventory/edge-a.yaml")
	cfg, _ := srv.File("configurations/plc-firmware.yaml")
	for i := 0; i < cycles; i++ {
		// An input changes (a device, or the firmware every few cycles).
		changes := map[string]string{"inventory/edge-a.yaml": strings.Replace(inv, "bar0", fmt.Sprintf("bar%d", i), -1)}
		if i%5 == 0 {
			changes["configurations/plc-firmware.yaml"] = strings.Replace(cfg, `"4.2.0"`, fmt.Sprintf(`"4.2.%d"`, i), 1)
		}
		srv.Commit(changes, nil, fmt.Sprintf("input change %d", i))

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
	for _, e := range srv.Log() {
		if trailer(e.Body, TrailerSourceCommit) == "" {
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

func TestRemoteRenderPushBranch(t *testing.T) {
	srv := demoServer(t)
	source := srv.Head()
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL(), "--push-branch", "rendered")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "to rendered (rendered from "+source)
	require.Equal(t, source, srv.Head(), "the source branch is untouched")
	require.ElementsMatch(t, []string{"main", "rendered"}, srv.Branches())
	body := gitsynctest.Git(t, srv.Bare(), "log", "-1", "--format=%B", "rendered")
	require.Equal(t, source, trailer(body, TrailerSourceCommit))
	code, _, stderr = gitbroker(t, "check", "--dir", export(t, srv, "rendered"))
	require.Equal(t, exitOK, code, "the rendered branch carries its inputs and checks on its own: %s", stderr)

	// Nothing changed: nothing committed.
	before := strings.TrimSpace(gitsynctest.Git(t, srv.Bare(), "rev-parse", "rendered"))
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--push-branch", "rendered")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "up to date")
	require.Equal(t, before, strings.TrimSpace(gitsynctest.Git(t, srv.Bare(), "rev-parse", "rendered")))

	// An input changes on the source branch: the rendered branch follows.
	inv, _ := srv.File("inventory/edge-b.yaml")
	agent := srv.Commit(map[string]string{"inventory/edge-b.yaml": strings.Replace(inv, "foo0", "foo7", -1)}, nil, "inventory: edge-b")
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--push-branch", "rendered")
	require.Equal(t, exitOK, code, stderr)
	body = gitsynctest.Git(t, srv.Bare(), "log", "-1", "--format=%B", "rendered")
	require.Equal(t, agent, trailer(body, TrailerSourceCommit))
	mirrored, _ := srv.FileAt("rendered", "inventory/edge-b.yaml")
	require.Contains(t, mirrored, "foo7")
	code, _, stderr = gitbroker(t, "check", "--dir", export(t, srv, "rendered"))
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, agent, srv.Head())
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
	require.ElementsMatch(t, []string{"main", branch}, srv.Branches())
	require.Equal(t, source, strings.TrimSpace(gitsynctest.Git(t, srv.Bare(), "rev-parse", branch+"^")))
	require.Equal(t, []string{"merge_request.create=true", "merge_request.target=main"}, srv.PushOptions())
	code, _, stderr = gitbroker(t, "check", "--dir", export(t, srv, branch))
	require.Equal(t, exitOK, code, stderr)

	b, err := os.ReadFile(desc)
	require.NoError(t, err)
	md := string(b)
	require.True(t, strings.HasPrefix(md, "## gitbroker render of "+source[:12]+"\n"), md)
	require.Contains(t, md, "Rendered from `"+source+"` on `main`.")
	require.Contains(t, md, "| Configuration | Broker | Started | Replaced | Removed | Held | Retired |")
	require.Contains(t, md, "**held**: after: waiting for a Job of Configuration journal-format")
	require.Contains(t, md, "journal-reader")

	// The same source commit again: the branch exists, nothing is pushed,
	// and the description is written again to stdout.
	code, stdout, stderr := gitbroker(t, "render", "--git", srv.URL(), "--review-branch", "--pr-description", "-")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "already exists")
	require.Equal(t, md, stdout)
	require.Len(t, srv.PushOptions(), 2)

	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--review-branch", "--push-branch", "x")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "at most one of")
}
