package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/recorder"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
	"github.com/gitbroker/gitbroker/verify"
)

// Agents, the renderer and the recorder all write at once, each to its own ref, while a
// stand-in for Flux creates the rendered Jobs and finishes them. Every write lands, each
// writer's ref holds exactly its last state, and no commit touches another writer's paths.
func TestAllWritersAtOnce(t *testing.T) {
	const nodes, updates = 8, 8
	srv := demoServer(t)
	// The demo's two nodes stay; these agents write eight more.
	client := fake.NewClientset()
	backoff := gitsync.WithBackoff(gitsync.Backoff{Initial: 5 * time.Millisecond, Max: time.Second, MaxAttempts: 1000, MaxElapsed: 5 * time.Minute})
	refs := newLayout(t, srv.URL(), backoff)
	rendered, status := srv.On(verify.RenderedBranch), srv.On(verify.StatusBranch)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var background sync.WaitGroup

	rec, err := recorder.New(recorder.Options{Client: client, Store: refs.recorder(), Batch: 20 * time.Millisecond, Retry: 20 * time.Millisecond, Log: funcr.New(func(p, a string) { t.Log("recorder:", a) }, funcr.Options{})})
	require.NoError(t, err)
	background.Add(1)
	go func() { defer background.Done(); _ = rec.Run(ctx) }()

	daemon := &renderer.Daemon{
		Renderer: allowingDeletions(refs.renderer(nil)),
		Interval: 20 * time.Millisecond, Log: logr.Discard(), Metrics: renderer.NewMetrics(prometheus.NewRegistry()),
	}
	daemonCtx, stopDaemon := context.WithCancel(ctx)
	var daemonDone sync.WaitGroup
	daemonDone.Add(1)
	go func() { defer daemonDone.Done(); daemon.Run(daemonCtx) }()

	// "Flux" and the kubelet: create every rendered Job, and finish it.
	l := &loop{t: t, srv: srv, client: client}
	var flux sync.WaitGroup
	fluxCtx, stopFlux := context.WithCancel(ctx)
	flux.Add(1)
	go func() {
		defer flux.Done()
		for fluxCtx.Err() == nil {
			l.applyAndFinish()
			time.Sleep(20 * time.Millisecond)
		}
	}()

	var agents sync.WaitGroup
	last := make([]string, nodes)
	errs := make(chan error, nodes)
	for n := 0; n < nodes; n++ {
		agents.Add(1)
		go func(n int) {
			defer agents.Done()
			node := fmt.Sprintf("edge-%02d", n)
			devices := &nodeDevices{devices: map[string][]api.Device{}}
			store, source := refs.agent(node)
			a, err := agent.New(agent.Options{Node: node, Store: store, Configurations: source, Handlers: agent.Builtin{"debugEcho": devices}, Log: logr.Discard()})
			if err != nil {
				errs <- err
				return
			}
			for u := 0; u < updates; u++ {
				id := fmt.Sprintf("%s-cam-%d", node, u)
				devices.set("default/akri-debug-echo", id)
				devices.set("plant/plc-firmware", fmt.Sprintf("%s-plc-%d", node, u%2))
				if _, err := a.Sync(ctx); err != nil {
					errs <- fmt.Errorf("%s: %w", node, err)
					return
				}
				last[n] = id
			}
		}(n)
	}
	agents.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Let everything settle. The concurrent phase is over once the agents
	// are done; stop the daemon and "Flux", then step the loop by hand
	// until a full round changes nothing: every rendered Job exists and
	// finished, every finished Job is recorded, and a render has nothing
	// to do.
	stopFlux()
	flux.Wait()
	stopDaemon()
	daemonDone.Wait()
	settle := allowingDeletions(refs.renderer(nil))
	recorded := func() bool {
		jobs, err := client.BatchV1().Jobs("plant").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, j := range jobs.Items {
			if _, ok := status.File(api.JobRecordPath("plant", j.Name)); !ok {
				return false
			}
		}
		return rec.Pending() == 0
	}
	for round := 0; ; round++ {
		require.Less(t, round, 50, "the loop does not settle")
		changed := l.applyAndFinish()
		require.Eventually(t, recorded, time.Minute, 10*time.Millisecond, "every finished Job is recorded")
		out, err := settle.Once(ctx)
		require.NotNil(t, out.Result)
		require.Empty(t, out.Result.Errors)
		if err != nil {
			require.ErrorIs(t, err, gitsync.ErrNoChanges)
			if changed == 0 {
				break
			}
		}
	}
	cancel()
	background.Wait()

	// Each agent's file holds its last state.
	for n := 0; n < nodes; n++ {
		node := fmt.Sprintf("edge-%02d", n)
		inv, ok := srv.On(verify.InventoryBranch(node)).File(api.InventoryPath(node))
		require.True(t, ok, node)
		require.Contains(t, inv, "id: "+last[n], node)
		require.NotContains(t, inv, fmt.Sprintf("%s-cam-%d\n", node, updates-2), node)
	}
	// Every Job that ran has its record, and the rendered tree checks.
	jobs, err := client.BatchV1().Jobs("plant").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, jobs.Items)
	for _, j := range jobs.Items {
		_, ok := status.File(api.JobRecordPath("plant", j.Name))
		require.True(t, ok, "record of %s", j.Name)
	}
	dir := export(t, srv, rendered.Head())
	code, stdout, stderr := gitbroker(t, "check", "--dir", dir)
	if code != exitOK {
		// Show what differs, to tell a stale tree from a renderer that
		// disagrees with itself.
		_, plan, _ := gitbroker(t, "plan", "--dir", dir)
		t.Logf("check:\n%s\nplan:\n%s", stdout, plan)
	}
	require.Equal(t, exitOK, code, stderr)

	// No writer touched another's paths: each ref holds only its writer's files, and the
	// renderer's commits carry the inputs it rendered.
	counts := map[string]int{}
	branches := []string{verify.RenderedBranch, verify.StatusBranch}
	for n := 0; n < nodes; n++ {
		branches = append(branches, verify.InventoryBranch(fmt.Sprintf("edge-%02d", n)))
	}
	for _, b := range branches {
		for _, e := range srv.On(b).Log() {
			counts[e.Author]++
			for _, p := range e.Paths {
				switch e.Author {
				case "gitbroker-agent <agent@gitbroker.dev>":
					require.Equal(t, api.InventoryPath(strings.TrimPrefix(b, verify.InventoryPrefix)), p, "agent commit %s on %s", e.Hash, b)
				case "gitbroker-recorder <recorder@gitbroker.dev>":
					require.True(t, strings.HasPrefix(p, "status/jobs/") && b == verify.StatusBranch, "recorder commit %s touched %s on %s", e.Hash, p, b)
				case "gitbroker-renderer <renderer@gitbroker.dev>":
					require.True(t, b == verify.RenderedBranch && (render.IsOwned(p) || render.IsInput(p)), "renderer commit %s touched %s on %s", e.Hash, p, b)
				default:
					t.Fatalf("commit %s on %s by %s", e.Hash, b, e.Author)
				}
			}
		}
	}
	require.Equal(t, nodes*updates, counts["gitbroker-agent <agent@gitbroker.dev>"], "every agent update landed once")
	t.Logf("%d agents x %d updates with the renderer and the recorder: commits by author %v; %d Jobs ran and were recorded",
		nodes, updates, counts, len(jobs.Items))
}

// applyAndFinish creates the rendered Jobs the cluster lacks and finishes
// the ones still running, as Flux and the kubelet would. It returns how
// many it changed.
func (l *loop) applyAndFinish() int {
	changed := 0
	rendered := l.srv.On(verify.RenderedBranch)
	for _, p := range rendered.Files() {
		if !strings.HasPrefix(p, render.RenderedDir) || !strings.Contains(p, "/job-") {
			continue
		}
		content, ok := rendered.File(p)
		var job batchv1.Job
		if !ok || yaml.Unmarshal([]byte(content), &job) != nil || job.Name == "" {
			continue // rendered away meanwhile
		}
		jobs := l.client.BatchV1().Jobs(job.Namespace)
		if _, err := jobs.Create(context.Background(), &job, metav1.CreateOptions{}); err == nil {
			changed++
		}
		cur, err := jobs.Get(context.Background(), job.Name, metav1.GetOptions{})
		if err != nil || len(cur.Status.Conditions) > 0 {
			continue
		}
		now := metav1.Now()
		cur.Status.StartTime, cur.Status.CompletionTime, cur.Status.Succeeded = &now, &now, 1
		cur.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		if _, err := jobs.UpdateStatus(context.Background(), cur, metav1.UpdateOptions{}); err == nil {
			changed++
		}
	}
	return changed
}
