package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/verify"
)

// The attacks of the third trust review (issue "Trust, third review"), each played with one
// node's key and the shared git credential against the real git server and binaries. Each
// fails on the code before its fix.

// runBinary runs the real gitbroker binary and returns its exit code, stdout and stderr.
func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// Finding 1: with a node's credential, delete every gitbroker/ branch but the node refs
// (gitbroker/rendered, gitbroker/configurations, every gitbroker/accepted/*,
// gitbroker/status) and force another node's ref back to an older commit of its own. A
// one-shot render then started from nothing: it accepted the replay, forgot every JobRecord
// and started a Succeeded firmware Job again. The "published before" guard read only
// gitbroker/configurations, which the attacker deleted too. A render from nothing now needs
// --first-render, given by a person once in the repository's life.
func TestReview3OneShotRenderNeverStartsOverFromNothing(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	old := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	s.renderTrust()
	job := s.firmwareJob()
	s.finish("plant", job, true)
	s.renderTrust()
	require.True(t, s.inHistory(job), "the Job is history")
	last := s.rendered().Head()

	var deleted []string
	for _, b := range s.srv.Branches() {
		if strings.HasPrefix(b, "gitbroker/") && !strings.HasPrefix(b, verify.InventoryPrefix) {
			s.srv.SetRef(b, "")
			deleted = append(deleted, b)
		}
	}
	require.Subset(t, deleted, []string{verify.RenderedBranch, verify.ConfigurationsBranch, verify.StatusBranch})
	s.srv.SetRef(verify.InventoryBranch("edge-b"), old)

	code, stdout, stderr := runBinary(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	require.Equal(t, exitRefused, code, "%s%s", stdout, stderr)
	require.Contains(t, stderr, "gitbroker/rendered does not exist, and .gitbroker/allowed_signers enrolls writers, so this render would start from nothing")
	require.Contains(t, stderr, "--first-render")
	require.NotContains(t, stdout, "started: new run", "no Job is queued again")
	require.Empty(t, s.rendered().Head(), "nothing is rendered from nothing")
	require.Empty(t, s.srv.On(verify.ConfigurationsBranch).Head(), "nor published")

	// plan previews it, and says render refuses it.
	code, stdout, stderr = runBinary(t, "plan", "--git", s.srv.URL())
	require.Contains(t, stdout+stderr, "gitbroker/rendered does not exist: this is what a render from nothing would do", "exit %d", code)

	// The operator pushes the last render back, as the message says: the replay stays refused,
	// the Job stays history and is not started again.
	s.srv.SetRef(verify.RenderedBranch, last)
	code, stdout, stderr = runBinary(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	require.Equal(t, exitRefused, code, "the replay is reported: %s%s", stdout, stderr)
	require.Contains(t, stdout, verify.InventoryBranch("edge-b"))
	require.NotContains(t, stdout, "started: new run")
	require.True(t, s.inventoryWith("edge-b", "baz1"), "the replayed inventory is not accepted")
	require.True(t, s.inHistory(job), "the Job is still history")
	require.Empty(t, s.jobs(render.RenderedDir, "plc-firmware"), "and not rendered again")
}

// inHistory reports whether the rendered branch keeps job in history/.
func (s *signedLoop) inHistory(job string) bool {
	for _, p := range s.rendered().Files() {
		if strings.HasPrefix(p, render.HistoryDir) && strings.HasSuffix(p, "/"+job+".yaml") {
			return true
		}
	}
	return false
}

// Finding 5: a recorder restarted with nothing new to record left a commit someone planted on
// top of gitbroker/status until its first repair tick, a minute later (and for good if it was
// restarted more often): every render meanwhile reported the status ref untrusted, and each
// one-shot render exited 1. A recorder puts its ref back as it starts.
func TestReview3RestartedRecorderDropsAPlantedCommitAtOnce(t *testing.T) {
	s := newSignedLoop(t)
	job := s.firmwareJob()
	s.finish("plant", job, true)
	status := s.srv.On(verify.StatusBranch)
	own := status.Head()
	s.stopRecorder()
	s.forge("node:edge-a", verify.StatusBranch, map[string][]byte{"status/jobs/plant/other.yaml": []byte("x: 1\n")})
	require.NotEqual(t, own, status.Head())

	s.startRecorderRepairing(time.Hour) // no repair tick within the test
	require.Eventually(t, func() bool { return status.Head() == own }, 20*time.Second, 10*time.Millisecond,
		"the restarted recorder puts its ref back with nothing new to record")
	code, stdout, stderr := runBinary(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	require.Equal(t, exitOK, code, "%s%s", stdout, stderr)
	require.NotContains(t, stdout, "untrusted")
}

// Finding 6: in a work tree, a JobRecord filed for a Job (status/jobs/<namespace>/<job>.yaml)
// whose spec names another Configuration or instance retired that Job into history (and could
// release the Pods waiting on another Configuration). It is an invalid input at its file, line
// and field, as under verification it is refused; the Job stays where it is.
func TestReview3WorkTreeRecordNamingAnotherConfigurationIsRefused(t *testing.T) {
	dir := demoRepo(t)
	jobs, err := filepath.Glob(filepath.Join(dir, "rendered", "plant", "plc-firmware", "*", "job-*.yaml"))
	require.NoError(t, err)
	if len(jobs) == 0 {
		jobs, err = filepath.Glob(filepath.Join(dir, "rendered", "plant", "plc-firmware", "job-*.yaml"))
		require.NoError(t, err)
	}
	require.NotEmpty(t, jobs)
	job := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(jobs[0]), "job-"), ".yaml")
	body, err := os.ReadFile(jobs[0])
	require.NoError(t, err)
	_, rest, _ := strings.Cut(string(body), "akri.sh/instance: ")
	instance, _, _ := strings.Cut(rest, "\n")

	record := func(cfg, inst string) string {
		return "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: " + job + "\n  namespace: plant\nspec:\n  configuration: " + cfg +
			"\n  instance: " + inst + "\n  deviceID: plc-1\n  outcome: Succeeded\n  startTime: \"2026-01-01T00:00:00Z\"\n  completionTime: \"2026-01-01T00:01:00Z\"\n  succeeded: 1\n  failed: 0\n"
	}
	path := filepath.Join(dir, "status", "jobs", "plant", job+".yaml")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	for _, tc := range []struct{ cfg, inst, field string }{
		{"journal-format", instance, "status/jobs/plant/" + job + ".yaml:7: spec.configuration"},
		{"plc-firmware", "plc-firmware-000000", "status/jobs/plant/" + job + ".yaml:8: spec.instance"},
	} {
		require.NoError(t, os.WriteFile(path, []byte(record(tc.cfg, tc.inst)), 0o644))
		code, stdout, stderr := runBinary(t, "render", "--dir", dir)
		require.Equal(t, exitInvalid, code, "%s%s", stdout, stderr)
		require.Contains(t, stdout+stderr, tc.field)
		_, err := os.Stat(jobs[0])
		require.NoError(t, err, "the Job stays rendered")
		require.NotContains(t, stdout, "retired")
	}

	// The record that agrees retires it.
	require.NoError(t, os.WriteFile(path, []byte(record("plc-firmware", instance)), 0o644))
	code, stdout, stderr := runBinary(t, "render", "--dir", dir)
	require.Equal(t, exitOK, code, "%s%s", stdout, stderr)
	_, err = os.Stat(jobs[0])
	require.ErrorIs(t, err, os.ErrNotExist, "the Job moved to history")
}
