package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/internal/procmem"
	"github.com/gitbroker/gitbroker/notify"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
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

// Found by the adversary against the recorder's binary (e2e): a recorder restarted after its ref
// was deleted, or moved back to an older commit of its own, started a new line from nothing
// (naming the accepted tip, which the renderer took in its place), and what it recorded of Jobs
// and nodes gone from the cluster was lost for good: a node recorded lost was taken as back. It
// now builds on the commit the renderer accepted last, which the server sends by its hash.
func TestReview3RestartedRecorderKeepsWhatItsRefHeldWhenTheRefIsDeleted(t *testing.T) {
	s := newSignedLoop(t)
	gitsynctest.Git(t, s.srv.Bare(), "config", "uploadpack.allowAnySHA1InWant", "true")
	job := s.firmwareJob()
	s.finish("plant", job, true)
	status := s.srv.On(verify.StatusBranch)
	recorded := status.Head()
	s.renderTrust()
	// The Job is gone from the cluster (its TTL, or a person): only git remembers its outcome.
	require.NoError(t, s.client.BatchV1().Jobs("plant").Delete(t.Context(), job, metav1.DeleteOptions{}))
	s.stopRecorder()
	s.srv.SetRef(verify.StatusBranch, "")

	s.startRecorderRepairing(time.Hour) // no repair tick within the test
	require.Eventually(t, func() bool { return status.Head() == recorded }, 20*time.Second, 10*time.Millisecond,
		"the restarted recorder puts back the commit the renderer accepted")
	_, ok := status.File(api.JobRecordPath("plant", job))
	require.True(t, ok, "the record of %s is kept", job)
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
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

// Findings 2 and 3: whoever reached the render daemon's webhook could, without a secret, take
// it to 94% of its memory limit (bodies declared at 1 MiB and trickled were read whole before
// they were authenticated, with nothing bounding how many at once), and spend the rate limit
// of the genuine notifications (checked for everyone before authentication). Played on the
// real binary: a flood of trickled 1 MiB bodies and of small forged ones, while an agent's
// signed nudge arrives every second. The daemon's memory grows by a few MiB, against a
// baseline read from the same process before the flood, and every nudge is accepted.
func TestReview3WebhookFloodNeitherFillsMemoryNorSpendsTheNudgesBudget(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/cam.yaml": udevCamera})
	secrets := t.TempDir()
	host, nudge := filepath.Join(secrets, "host"), filepath.Join(secrets, "nudge")
	require.NoError(t, os.WriteFile(host, []byte("host-secret\n"), 0o600))
	require.NoError(t, os.WriteFile(nudge, []byte("nudge-secret\n"), 0o600))
	d := startDaemon(t, "renderer started", "render", "--git", srv.URL(), "--watch", "--interval", "1h",
		"--webhook-addr", "127.0.0.1:0", "--webhook-secret-file", host, "--nudge-secret-file", nudge,
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	require.Eventually(t, func() bool { return srv.On(verify.RenderedBranch).Head() != "" }, 30*time.Second, 20*time.Millisecond)
	url := "http://" + d.WebhookAddr + "/hook"
	base, err := procmem.Peak(d.cmd.Process.Pid)
	require.NoError(t, err)

	forged := "sha256=" + strings.Repeat("0", 64)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	var flood sync.WaitGroup
	trickle := func() {
		conn, err := net.DialTimeout("tcp", d.WebhookAddr, time.Second)
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = fmt.Fprintf(conn, "POST /hook HTTP/1.1\r\nHost: renderer\r\nContent-Type: application/json\r\n%s: %s\r\nContent-Length: %d\r\n\r\n", notify.HeaderSignature, forged, notify.MaxBody)
		chunk := bytes.Repeat([]byte("x"), notify.MaxBody/16)
		for range 16 {
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := conn.Write(chunk); err != nil {
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(sig string) int {
		body := `{"ref":"refs/heads/gitbroker/inventory/edge-a"}`
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return 0
		}
		if sig == "" {
			sig = "sha256=" + hex.EncodeToString(notify.Sign(sha256.New, []byte("nudge-secret"), []byte(body)))
		}
		req.Header.Set(notify.HeaderSignature, sig)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	every := func(d time.Duration, f func()) {
		flood.Go(func() {
			tick := time.NewTicker(d)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					flood.Go(f)
				}
			}
		})
	}
	every(25*time.Millisecond, trickle)                     // 40 a second, each 1 MiB over 2.4 s
	every(10*time.Millisecond, func() { _ = post(forged) }) // 100 forged small ones a second
	peak := base
	var codes []int
	for range 5 {
		time.Sleep(time.Second)
		codes = append(codes, post(""))
		if p, err := procmem.Peak(d.cmd.Process.Pid); err == nil {
			peak = max(peak, p)
		}
	}
	cancel()
	flood.Wait()
	if p, err := procmem.Peak(d.cmd.Process.Pid); err == nil {
		peak = max(peak, p)
	}
	t.Logf("render daemon peak RSS %d MiB before the flood, %d MiB after; signed nudges answered %v", base>>20, peak>>20, codes)
	require.Equal(t, []int{http.StatusAccepted, http.StatusAccepted, http.StatusAccepted, http.StatusAccepted, http.StatusAccepted}, codes,
		"every signed nudge is accepted during the flood")
	require.Less(t, peak-base, int64(32<<20), "the flood costs the daemon a few MiB, not a MiB per request")
	_, metrics := d.get(d.MetricsAddr, "/metrics")
	require.Contains(t, metrics, `gitbroker_renderer_notifications_total{result="unauthorized"}`)
}

// Finding 1, for the render daemon: deploy/'s renderer is told nothing, and starts from
// nothing by itself only while its leader election Lease records no push (no git writer
// reaches the Lease). Once a leader pushed, a later one that finds every renderer branch
// deleted does not start over: it holds until the last render it pushed, which the Lease
// names, is back, and the replay stays refused.
func TestReview3RenderDaemonStartsFromNothingOnlyWhileItsLeaseRecordsNoPush(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	old := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	client := fake.NewClientset()
	lead := func() (*renderer.Daemon, func()) {
		r := s.refs.renderer(s.keys["renderer"])
		r.Sources.FirstRender = false // as deploy/ runs it
		d := &renderer.Daemon{Renderer: r, Interval: 50 * time.Millisecond, Log: logr.Discard(), Metrics: renderer.NewMetrics(prometheus.NewRegistry())}
		e := renderer.Election{Namespace: "gitbroker-system", Name: "gitbroker-renderer"}
		e.Enable, e.ReleaseOnCancel = true, true
		e.LeaseDuration, e.RenewDeadline, e.RetryPeriod = 4*time.Second, 3*time.Second, 100*time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Lead(ctx, client, e) }()
		return d, func() { cancel(); require.NoError(t, <-done) }
	}
	d, stop := lead()
	require.Eventually(t, func() bool { return s.inventoryWith("edge-b", "baz1") }, 20*time.Second, 10*time.Millisecond, "the first render, from a Lease that records no push")
	var last string
	require.Eventually(t, func() bool {
		lease, err := client.CoordinationV1().Leases("gitbroker-system").Get(t.Context(), "gitbroker-renderer", metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = lease.Annotations[renderer.AnnotationLastPushed]
		return last != "" && last == s.rendered().Head()
	}, 20*time.Second, 10*time.Millisecond, "the Lease records the push")
	stop()
	require.Equal(t, d.Renderer.Pushed(), last)

	for _, b := range s.srv.Branches() {
		if strings.HasPrefix(b, "gitbroker/") && !strings.HasPrefix(b, verify.InventoryPrefix) {
			s.srv.SetRef(b, "")
		}
	}
	s.srv.SetRef(verify.InventoryBranch("edge-b"), old)
	d, stop = lead()
	defer stop()
	require.Eventually(t, func() bool { return d.LastCycle() != time.Time{} }, 20*time.Second, 10*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // ten more intervals
	require.False(t, d.Ready(), "the leader holds")
	require.Empty(t, s.rendered().Head(), "nothing is rendered from nothing")

	s.srv.SetRef(verify.RenderedBranch, last) // what the message asks of the operator
	require.Eventually(t, func() bool { return s.srv.On(verify.ConfigurationsBranch).Head() != "" }, 20*time.Second, 10*time.Millisecond, "the leader renders again")
	require.True(t, s.inventoryWith("edge-b", "baz1"), "the replay is refused")
}

// Finding 4 (a person's change, no attacker): after gitbroker.yaml gained spec.clusters, a Job
// recorded Succeeded before the switch was rendered again as a new run, history/ was gone and
// its record ignored. The switch carries each Job, rendered or finished, to its nodes' cluster.
func TestReview3TurningClustersOnRerunsNoFinishedJob(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	job := s.firmwareJob()
	s.finish("plant", job, true)
	s.renderTrust()
	require.True(t, s.inHistory(job))

	settings := "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  clusters:\n  - name: plant-a\n    nodes: [\"edge-*\"]\n"
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{"gitbroker.yaml": settings}, nil, "one cluster, named")
	code, stdout, stderr := runBinary(t, "plan", "--git", s.srv.URL())
	require.Contains(t, stdout, "none runs again", "plan says what the switch does (exit %d): %s", code, stderr)
	code, stdout, stderr = runBinary(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"], "--allow-deletions")
	require.Contains(t, []int{exitOK, exitRefused}, code, "%s%s", stdout, stderr)
	require.NotContains(t, stdout, "started: new run", "the finished firmware Job does not run again")
	var history []string
	for _, p := range s.rendered().Files() {
		if strings.HasPrefix(p, render.HistoryDir) && strings.HasSuffix(p, "/"+job+".yaml") {
			history = append(history, p)
		}
	}
	require.Len(t, history, 1)
	require.True(t, strings.HasPrefix(history[0], "history/plant-a/jobs/plant/plc-firmware/"), history[0])
	require.Empty(t, s.jobs(render.RenderedDir, "plc-firmware"), "and is not rendered again")
}
