package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// CI pins the gitbroker that wrote it: a release, else its commit; said when neither is exact.
func TestCIVersionPin(t *testing.T) {
	hash := strings.Repeat("ab", 20)
	for _, c := range []struct{ version, commit, pin, warning string }{
		{"v0.2.0", hash, "v0.2.0", ""},
		{"v0.0.0-20261204120000-abababababab", "unknown", "v0.0.0-20261204120000-abababababab", ""},
		{"5d0e41a", hash, hash, ""},
		{"5d0e41a-dirty", hash, hash, "with local changes"},
		{"(devel)", hash + " (modified)", hash, "with local changes"},
		{"(devel)", "unknown", "latest", "knows neither"},
	} {
		pin, warning := ciVersion(c.version, c.commit)
		require.Equal(t, c.pin, pin, c)
		if c.warning == "" {
			require.Empty(t, warning, c)
		} else {
			require.Contains(t, warning, c.warning, c)
		}
	}
}

// ciFile is one CI file of a new repository, parsed; it must pin a gitbroker that exists.
func ciFile(t *testing.T, dir, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	require.NotContains(t, string(data), "v0.1.0", "%s pins a gitbroker that does not exist", name)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(data, &doc), name)
	return doc
}

// fakeGH plays GitHub's side of the comment API for the workflow's `gh` calls, on a folder of
// comments (one file per comment, named by id); every call is logged.
const fakeGH = `#!/bin/sh
echo "$*" >> "$GH_STATE/calls"
case "$1" in
api)
  if [ "$2" = "-X" ]; then cp "${6#body=@}" "$GH_STATE/comments/${4##*/}"; exit 0; fi
  for f in "$GH_STATE"/comments/*; do
    [ -e "$f" ] && head -1 "$f" | grep -q '^<!-- gitbroker-plan -->' && { basename "$f"; exit 0; }
  done ;;
pr)
  n=$(ls "$GH_STATE/comments" | wc -l); cp "$7" "$GH_STATE/comments/$((n + 1))" ;;
esac
exit 0
`

// The workflow init writes for GitHub, its steps run as the runner would run them: the plan of a
// pull request, from a real git server, posted as one comment that the next push updates in place;
// plan's exit code kept (2 for an invalid Configuration, with the plan still posted); a plan that
// fails before planning posts its log instead of an empty comment; the full plan as JSON.
func TestGitHubWorkflowSteps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, _, stderr := gitbroker(t, "init", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	doc := ciFile(t, dir, ".github/workflows/gitbroker.yaml")
	// YAML 1.1 reads the key on as true; GitHub reads it as "on".
	on := doc["true"].(map[string]any)
	require.Contains(t, on, "pull_request_target", "fork pull requests get a token that may comment")
	require.Contains(t, on, "schedule", "the check runs from main: the rendered branch holds no workflow")
	require.NotContains(t, on, "pull_request")
	jobs := doc["jobs"].(map[string]any)
	steps := map[string]string{}
	for _, s := range jobs["plan"].(map[string]any)["steps"].([]any) {
		step := s.(map[string]any)
		require.NotEqual(t, "actions/checkout", strings.Split(fmt.Sprint(step["uses"]), "@")[0], "the plan job never checks out the pull request")
		if name, ok := step["name"].(string); ok {
			steps[name] = fmt.Sprint(step["run"])
		}
	}
	require.NotContains(t, fmt.Sprint(jobs), "actions/cache", "no cached binary: whichever run wrote a cache entry would choose what runs with the token")

	srv := demoServer(t)
	base := srv.Head()
	state := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(state, "comments"), 0o755))
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "gh"), []byte(fakeGH), 0o755))
	require.NoError(t, os.Symlink(binary(t), filepath.Join(bin, "gitbroker")))

	// run runs one step's script with the environment its env: block and the runner give.
	run := func(step, work string, env ...string) (int, string) {
		script, ok := steps[step]
		require.True(t, ok, "the plan job has a step %q", step)
		cmd := exec.Command("bash", "-e", "-c", script)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), append([]string{"PATH=" + bin + ":" + os.Getenv("PATH"), "GH_STATE=" + state,
			"GH_TOKEN=t0ken", "REPO=acme/edge", "PR=7", "BASE=main", "GIT_URL=" + srv.URL(), "RUNNER_TEMP=" + work,
			"GITHUB_OUTPUT=" + filepath.Join(work, "output")}, env...)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		require.NoError(t, err)
		return 0, string(out)
	}
	pullRequest := func(files map[string]string) (string, int, string) {
		head := srv.Commit(files, nil, "a pull request")
		srv.SetRef("main", base)
		gitsynctest.Git(t, srv.Bare(), "update-ref", "refs/pull/7/head", head)
		work := t.TempDir()
		code, out := run("Plan the pull request", work, "HEAD_SHA="+head)
		require.Equal(t, 0, code, "the step records plan's code and goes on to post: %s", out)
		code, out = run("Post the plan (one comment, updated in place)", work)
		require.Equal(t, 0, code, out)
		output, err := os.ReadFile(filepath.Join(work, "output"))
		require.NoError(t, err)
		status := 0
		_, err = fmt.Sscanf(string(output), "status=%d", &status)
		require.NoError(t, err, string(output))
		return work, status, head
	}
	comments := func() map[string]string {
		entries, err := os.ReadDir(filepath.Join(state, "comments"))
		require.NoError(t, err)
		out := map[string]string{}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(state, "comments", e.Name()))
			require.NoError(t, err)
			out[e.Name()] = string(b)
		}
		return out
	}

	cfg, ok := srv.File("configurations/akri-debug-echo.yaml")
	require.True(t, ok)
	work, status, head := pullRequest(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "memory: 10Mi", "memory: 16Mi", 1)})
	require.Equal(t, 0, status, "%v", comments())
	c := comments()
	require.Len(t, c, 1)
	require.Contains(t, c["1"], "### gitbroker plan of "+head[:12])
	require.Contains(t, c["1"], "**Summary:**")
	var full map[string]any
	data, err := os.ReadFile(filepath.Join(work, "gitbroker-plan.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &full), "the artifact holds the whole plan as JSON")

	// The next push updates the same comment.
	_, status, head = pullRequest(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "memory: 10Mi", "memory: 20Mi", 1)})
	require.Equal(t, 0, status)
	c = comments()
	require.Len(t, c, 1, "one comment, updated in place")
	require.Contains(t, c["1"], head[:12])

	// An invalid Configuration: plan's exit code 2 is kept, and the plan is posted.
	_, status, _ = pullRequest(map[string]string{"configurations/akri-debug-echo.yaml": "kind: [unclosed\n"})
	require.Equal(t, exitInvalid, status)
	c = comments()
	require.Len(t, c, 1)
	require.Contains(t, c["1"], "configurations/akri-debug-echo.yaml")

	// A plan that fails before planning (the repository is unreachable) posts its log.
	work = t.TempDir()
	code, out := run("Plan the pull request", work, "HEAD_SHA="+head, "GIT_URL=http://127.0.0.1:1/none.git")
	require.Equal(t, 0, code, out)
	code, out = run("Post the plan (one comment, updated in place)", work)
	require.Equal(t, 0, code, out)
	c = comments()
	require.Len(t, c, 1)
	require.Contains(t, c["1"], "gitbroker plan failed (exit")
	require.Contains(t, c["1"], "127.0.0.1:1")
}

// The GitLab pipeline init writes, its plan job's script run as a runner would: the plan in
// the log and as artifacts, plan's exit code kept; the check job runs where GitLab can run it.
func TestGitLabPipelineSteps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, _, stderr := gitbroker(t, "init", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	doc := ciFile(t, dir, ".gitlab-ci.yml")
	check := fmt.Sprint(doc["gitbroker-check"].(map[string]any)["rules"])
	require.Contains(t, check, `$CI_PIPELINE_SOURCE == "schedule"`)
	require.NotContains(t, check, "gitbroker/rendered", "GitLab reads the pipeline from the pushed commit; the rendered branch holds none")
	require.NotContains(t, fmt.Sprint(doc[".gitbroker"]), "cache:", "no cached binary: whichever pipeline wrote the cache would choose what runs with the token")
	plan := doc["gitbroker-plan"].(map[string]any)
	script := strings.Join(func() []string {
		var s []string
		for _, l := range plan["script"].([]any) {
			s = append(s, l.(string))
		}
		return s
	}(), "\n")

	srv := demoServer(t)
	base := srv.Head()
	cfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	head := srv.Commit(map[string]string{"configurations/akri-debug-echo.yaml": "kind: [unclosed\n" + cfg}, nil, "a merge request")
	srv.SetRef("main", base)
	gitsynctest.Git(t, srv.Bare(), "update-ref", "refs/merge-requests/3/head", head)
	work := t.TempDir()
	token := filepath.Join(work, "token")
	require.NoError(t, os.WriteFile(token, []byte("t0ken"), 0o600))
	cmd := exec.Command("bash", "-e", "-c", script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary(t))+":"+os.Getenv("PATH"),
		"CI_SERVER_URL="+strings.TrimSuffix(srv.URL(), "/"+gitsynctest.RepoPath), "CI_MERGE_REQUEST_PROJECT_PATH="+strings.TrimSuffix(gitsynctest.RepoPath, ".git"),
		// A fork's merge request: the pipeline runs in the fork, the merge request's ref is in
		// the project it targets.
		"CI_PROJECT_PATH=someone/fork-of-edge",
		"CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main", "CI_MERGE_REQUEST_IID=3", "GITBROKER_TOKEN_FILE="+token)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, string(out))
	require.Equal(t, exitInvalid, ee.ExitCode(), "the job fails with plan's exit code: %s", out)
	require.Contains(t, string(out), "configurations/akri-debug-echo.yaml")
	for _, f := range []string{"plan.md", "gitbroker-plan.json", "plan.log"} {
		require.FileExists(t, filepath.Join(work, f))
		require.Contains(t, fmt.Sprint(plan["artifacts"]), f)
	}
}

// The people's branch need not be main: init --branch names it in the GitHub workflow's filters
// and comments (GitLab's pipeline follows the project's default branch), and refuses a branch
// gitbroker's writers own.
func TestInitCIFollowsThePeoplesBranch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, _, stderr := gitbroker(t, "init", "--dir", dir, "--branch", "trunk")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "git init -b trunk")
	require.Contains(t, stderr, "git push -u origin trunk")
	data, err := os.ReadFile(filepath.Join(dir, ".github/workflows/gitbroker.yaml"))
	require.NoError(t, err)
	require.NotRegexp(t, `\bmain\b`, string(data))
	on := ciFile(t, dir, ".github/workflows/gitbroker.yaml")["true"].(map[string]any)
	require.Equal(t, []any{"trunk"}, on["pull_request_target"].(map[string]any)["branches"])
	require.Equal(t, []any{"trunk"}, on["push"].(map[string]any)["branches"])

	for _, bad := range []string{"gitbroker/rendered", "gitbroker/inventory/edge-a", "-x"} {
		code, _, stderr = gitbroker(t, "init", "--dir", filepath.Join(t.TempDir(), "f"), "--branch", bad)
		require.Equal(t, exitInvalid, code, bad)
		require.Contains(t, stderr, "--branch", bad)
	}
}
