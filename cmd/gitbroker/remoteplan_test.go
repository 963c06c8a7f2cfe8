package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/verify"
)

// The pull-request loop: plan --git --ref shows what merging a proposed change would change on
// top of what the renderer would render now, from the same refs, with no clone; check --git is
// the gate on the rendered branch.
func TestPlanPullRequest(t *testing.T) {
	srv := demoServer(t)
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	code, stdout, stderr := gitbroker(t, "check", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "match their inputs")

	// Nothing proposed and nothing new: nothing would change (the held Pod stays held).
	code, stdout, stderr = gitbroker(t, "plan", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Summary: 1 Deployment held\n")

	// A pull request bumps the broker image, on a branch of its own (GitHub's refs/pull/7/head).
	cfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	pr := srv.On("feature/nginx-1.27")
	gitsynctest.Git(t, srv.Bare(), "branch", "feature/nginx-1.27", "main")
	head := pr.Commit(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:1.27-alpine", 1)}, nil, "bump nginx")
	gitsynctest.Git(t, srv.Bare(), "update-ref", "refs/pull/7/head", head)
	// Meanwhile a node changed: the renderer would render that anyway, so the pull request's
	// plan does not show it.
	nodeCommit(t, srv, "edge-a", "bar0", "bar9")

	code, stdout, stderr = gitbroker(t, "plan", "--git", srv.URL(), "--ref", "refs/pull/7/head", "-o", "markdown")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "| `default/akri-debug-echo` | Pod broker |")
	require.Contains(t, stdout, "**rolled out**")
	require.Contains(t, stdout, "refs/pull/7/head ("+head[:12]+")")
	// bar9's broker is there already in what the renderer would render: the pull request replaces
	// it, and starts or removes nothing.
	require.Contains(t, stdout, "**Summary:** 3 Deployments rolled out, 1 Deployment held\n")
	require.NotContains(t, stdout, "plc-firmware", "other Configurations are untouched")

	// Without --ref: what the renderer would do now, the node's change.
	code, stdout, stderr = gitbroker(t, "plan", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "bar9")
	require.NotContains(t, stdout, "nginx:1.27")

	// A ref that does not exist is an error; nothing is written anywhere.
	before := srv.Branches()
	code, _, stderr = gitbroker(t, "plan", "--git", srv.URL(), "--ref", "refs/pull/8/head")
	require.Equal(t, exitRefused, code)
	require.Contains(t, stderr, "refs/pull/8/head")
	require.ElementsMatch(t, before, srv.Branches())

	// Someone edits the rendered branch by hand: check --git fails and names the file.
	rendered := srv.On(verify.RenderedBranch)
	files := rendered.Files()
	var pod string
	for _, f := range files {
		if strings.Contains(f, "/deployment-") {
			pod = f
			break
		}
	}
	content, _ := rendered.File(pod)
	rendered.Commit(map[string]string{pod: strings.Replace(content, "nginx:stable-alpine", "attacker/x", 1)}, nil, "hand edit")
	code, stdout, _ = gitbroker(t, "check", "--git", srv.URL())
	require.Equal(t, exitRefused, code)
	require.Contains(t, stdout, "differs: "+pod)

	code, _, stderr = gitbroker(t, "plan", "--ref", "main")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--ref needs --git")
}
