package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/recorder"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
	"github.com/gitbroker/gitbroker/verify"
)

// nodeDevices is an agent's discovery handler: the devices this node sees
// per Configuration, set by the test.
type nodeDevices struct {
	mu      sync.Mutex
	devices map[string][]api.Device
}

func (n *nodeDevices) set(cfg string, ids ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var devs []api.Device
	for _, id := range ids {
		shared := strings.HasPrefix(id, "shared:")
		id = strings.TrimPrefix(id, "shared:")
		devs = append(devs, api.Device{ID: id, Shared: shared, Properties: map[string]string{"DEBUG_ECHO_DESCRIPTION": id}})
	}
	n.devices[cfg] = devs
}

func (n *nodeDevices) Discover(_ context.Context, req agent.Request) ([]api.Device, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]api.Device(nil), n.devices[req.Configuration]...), nil
}

// loop is the whole write side in one process: two node agents, the
// renderer and the recorder, all writing to one real git server, and a
// fake cluster where "Flux" creates the rendered Jobs.
type loop struct {
	t        *testing.T
	srv      *gitsynctest.Server
	client   *fake.Clientset
	renderer *renderer.Renderer
	agents   map[string]*agent.Agent
	nodes    map[string]*nodeDevices
	rec      *recorder.Recorder
}

func newLoop(t *testing.T) *loop {
	t.Helper()
	demo, err := readFS(fixtures.Demo())
	require.NoError(t, err)
	files := map[string]string{}
	for p, b := range demo {
		if api.IsConfigurationPath(p) {
			files[p] = string(b)
		}
	}
	l := &loop{t: t, srv: gitsynctest.NewServer(t, "main", files), client: fake.NewClientset(),
		agents: map[string]*agent.Agent{}, nodes: map[string]*nodeDevices{}}
	backoff := gitsync.WithBackoff(gitsync.Backoff{Initial: time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 100, MaxElapsed: time.Minute})
	refs := newLayout(t, l.srv.URL(), backoff)
	l.renderer = refs.renderer(nil)
	for _, node := range []string{"edge-a", "edge-b"} {
		l.nodes[node] = &nodeDevices{devices: map[string][]api.Device{}}
		store, source := refs.agent(node)
		a, err := agent.New(agent.Options{Node: node, Store: store, Configurations: source, Handlers: agent.Builtin{"debugEcho": l.nodes[node]},
			Log: logr.Discard(), SharedGracePeriod: 0, LocalGracePeriod: 0})
		require.NoError(t, err)
		l.agents[node] = a
	}
	l.rec, err = recorder.New(recorder.Options{Client: l.client, Store: refs.recorder(), Batch: 10 * time.Millisecond,
		Retry: 10 * time.Millisecond, Log: logr.Discard()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.rec.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return l
}

// discover runs every agent's cycle.
func (l *loop) discover() {
	l.t.Helper()
	for _, node := range []string{"edge-a", "edge-b"} {
		_, err := l.agents[node].Sync(context.Background())
		require.NoError(l.t, err)
	}
}

// render runs the renderer once and returns its plan as text.
func (l *loop) render(allowDeletions bool) string {
	l.t.Helper()
	l.renderer.AllowDeletions = allowDeletions
	out, err := l.renderer.Once(context.Background())
	if err != nil {
		require.ErrorIs(l.t, err, gitsync.ErrNoChanges)
	}
	require.Empty(l.t, out.Result.Errors)
	var b bytes.Buffer
	out.Result.Plan.WriteText(&b)
	return b.String()
}

// apply does what Flux does with the rendered Jobs: create the ones the
// cluster does not have. It returns the names it created.
func (l *loop) apply() []string {
	l.t.Helper()
	var created []string
	rendered := l.srv.On(verify.RenderedBranch)
	for _, p := range rendered.Files() {
		if !strings.HasPrefix(p, render.RenderedDir) || !strings.Contains(p, "/job-") {
			continue
		}
		content, _ := rendered.File(p)
		var job batchv1.Job
		require.NoError(l.t, yaml.Unmarshal([]byte(content), &job))
		_, err := l.client.BatchV1().Jobs(job.Namespace).Create(context.Background(), &job, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		require.NoError(l.t, err)
		created = append(created, job.Name)
	}
	return created
}

// finish ends a Job in the cluster and waits for its record in git.
func (l *loop) finish(ns, name string, ok bool) {
	l.t.Helper()
	jobs := l.client.BatchV1().Jobs(ns)
	job, err := jobs.Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(l.t, err)
	now := metav1.Now()
	job.Status.StartTime, job.Status.CompletionTime = &now, &now
	if ok {
		job.Status.Succeeded = 1
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	} else {
		job.Status.CompletionTime, job.Status.Failed = nil, 3
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"}}
	}
	_, err = jobs.UpdateStatus(context.Background(), job, metav1.UpdateOptions{})
	require.NoError(l.t, err)
	require.Eventually(l.t, func() bool {
		_, ok := l.srv.On(verify.StatusBranch).File(api.JobRecordPath(ns, name))
		return ok
	}, 20*time.Second, 10*time.Millisecond, "waiting for the record of %s/%s", ns, name)
}

// jobs lists the Job names under a folder of the branch (rendered/ or history/) for a Configuration.
func (l *loop) jobs(dir, cfg string) []string {
	var names []string
	for _, p := range l.srv.On(verify.RenderedBranch).Files() {
		if strings.HasPrefix(p, dir) && strings.Contains(p, "/"+cfg+"/") && strings.HasSuffix(p, "-job.yaml") {
			names = append(names, strings.TrimPrefix(p[strings.LastIndex(p, "/")+1:], "job-"))
		}
	}
	return names
}

func (l *loop) has(substr string) bool {
	for _, p := range l.srv.On(verify.RenderedBranch).Files() {
		if strings.Contains(p, substr) {
			return true
		}
	}
	return false
}

func (l *loop) editConfig(name, old, new string) {
	l.t.Helper()
	path := "configurations/" + name + ".yaml"
	content, ok := l.srv.File(path)
	require.True(l.t, ok)
	require.Contains(l.t, content, old)
	l.srv.Commit(map[string]string{path: strings.Replace(content, old, new, 1)}, nil, "edit "+name)
}

// The lifecycle across the agents, the renderer and the recorder, as
// docs/DESIGN.md, "Jobs are history", describes it.
func TestLifecycleAcrossWriters(t *testing.T) {
	l := newLoop(t)
	rendered := l.srv.On(verify.RenderedBranch)
	l.nodes["edge-a"].set("default/akri-debug-echo", "bar0", "shared:foo0")
	l.nodes["edge-a"].set("plant/plc-firmware", "shared:plc-1")
	l.nodes["edge-b"].set("default/akri-debug-echo", "shared:foo0")
	l.nodes["edge-b"].set("plant/journal-format", "disk-7", "disk-8")
	l.nodes["edge-b"].set("plant/journal-reader", "disk-7", "disk-8")
	l.discover()

	plan := l.render(false)
	require.Contains(t, plan, "held: after: waiting for a Job of Configuration journal-format")
	created := l.apply()
	require.Len(t, created, 3, "plc-1, disk-7 and disk-8 each get a Job")
	require.False(t, l.has("journal-reader-"), "the after: Pods wait for journal-format")
	firstFirmware := l.jobs(render.RenderedDir, "plc-firmware")
	require.Len(t, firstFirmware, 1)

	// A Configuration change: the new run is rendered but held (Forbid).
	l.editConfig("plc-firmware", `FIRMWARE_VERSION: "4.2.0"`, `FIRMWARE_VERSION: "4.3.0"`)
	plan = l.render(false)
	require.Contains(t, plan, "held: waiting for "+strings.TrimSuffix(firstFirmware[0], ".yaml"))
	require.Equal(t, firstFirmware, l.jobs(render.RenderedDir, "plc-firmware"), "the running Job stays, the new one is held")

	// The recorder records the old Job finished; the renderer retires it
	// with its record to history/ and renders the new run.
	oldJob := strings.TrimSuffix(firstFirmware[0], ".yaml")
	l.finish("plant", oldJob, true)
	plan = l.render(false)
	require.Contains(t, plan, oldJob+" retired")
	require.Equal(t, []string{firstFirmware[0]}, l.jobs(render.HistoryDir, "plc-firmware"))
	history := ""
	for _, p := range rendered.Files() {
		if strings.HasPrefix(p, render.HistoryDir) && strings.HasSuffix(p, oldJob+".yaml") {
			history, _ = rendered.File(p)
		}
	}
	require.Contains(t, history, "kind: Job")
	require.Contains(t, history, "kind: JobRecord")
	newRun := l.jobs(render.RenderedDir, "plc-firmware")
	require.Len(t, newRun, 1)
	require.NotEqual(t, firstFirmware, newRun)
	require.Len(t, l.apply(), 1)
	// Rendering again, from the renderer's own commit, changes nothing.
	head := rendered.Head()
	l.render(false)
	require.Equal(t, head, rendered.Head())

	// after: disk-7's format succeeds and its reader Pod appears; disk-8's
	// fails, so its reader Pod never does, and the plan says why.
	journal := l.jobs(render.RenderedDir, "journal-format")
	require.Len(t, journal, 2)
	for _, j := range journal {
		name := strings.TrimSuffix(j, ".yaml")
		job, err := l.client.BatchV1().Jobs("plant").Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		l.finish("plant", name, job.Annotations["gitbroker.dev/device-id"] == "disk-7")
	}
	plan = l.render(false)
	require.True(t, l.has("journal-reader-"), "disk-7's reader Pod is rendered after its Job succeeded")
	readers := 0
	for _, p := range rendered.Files() {
		if strings.Contains(p, "/journal-reader/deployment-") {
			readers++
		}
	}
	require.Equal(t, 1, readers, "only disk-7's reader Pod: disk-8's Job failed")
	require.Contains(t, plan, `recorded Failed`)

	// Once: the recorded runs do not run again; a new runID does, and the
	// history keeps historyLimit runs per instance.
	require.Empty(t, l.jobs(render.RenderedDir, "journal-format"))
	l.editConfig("journal-format", `gitbroker.dev/run-id: "2026-11-01"`, "gitbroker.dev/run-id: \"2026-12-01\"\n    gitbroker.dev/history-limit: \"1\"")
	l.render(false)
	second := l.jobs(render.RenderedDir, "journal-format")
	require.Len(t, second, 2, "a new runID runs again on both disks")
	l.apply()

	// A device vanishes while its Job runs: the Job stays until recorded;
	// the device's reader Pod goes.
	l.nodes["edge-b"].set("plant/journal-format", "disk-8")
	l.nodes["edge-b"].set("plant/journal-reader", "disk-8")
	l.discover()
	l.render(false)
	require.Len(t, l.jobs(render.RenderedDir, "journal-format"), 2, "disk-7's running Job stays rendered")
	require.False(t, l.has("/journal-reader/deployment-"), "disk-7's reader Pod is removed")
	for _, j := range second {
		l.finish("plant", strings.TrimSuffix(j, ".yaml"), true)
	}
	l.render(false)
	require.Empty(t, l.jobs(render.RenderedDir, "journal-format"))
	perInstance := map[string]int{}
	for _, p := range rendered.Files() {
		if strings.HasPrefix(p, render.HistoryDir+"jobs/plant/journal-format/") {
			perInstance[strings.Split(p, "/")[4]]++
		}
	}
	require.Equal(t, 2, len(perInstance))
	for inst, n := range perInstance {
		require.Equal(t, 1, n, "historyLimit 1 keeps one run of %s", inst)
	}

	// A deleted Configuration: its running Job stays until recorded; the
	// Pods and Services of a deleted Pod-broker Configuration go.
	running := l.jobs(render.RenderedDir, "plc-firmware")
	require.Len(t, running, 1)
	l.srv.Commit(nil, []string{"configurations/plc-firmware.yaml", "configurations/akri-debug-echo.yaml"}, "retire two Configurations")
	l.render(true)
	require.Equal(t, running, l.jobs(render.RenderedDir, "plc-firmware"), "the running firmware Job stays")
	require.False(t, l.has("akri-debug-echo"), "the Pods and Services go")
	l.finish("plant", strings.TrimSuffix(running[0], ".yaml"), true)
	l.render(true)
	require.Empty(t, l.jobs(render.RenderedDir, "plc-firmware"))
	require.Len(t, l.jobs(render.HistoryDir, "plc-firmware"), 2)

	// Through all of it, every renderer commit checks, on a clone of the rendered branch alone.
	for _, e := range rendered.Log() {
		if trailer(e.Body, api.TrailerSourceCommit) == "" {
			continue
		}
		code, _, stderr := gitbroker(t, "check", "--dir", export(t, l.srv, e.Hash))
		require.Equal(t, exitOK, code, "commit %s: %s", e.Hash, stderr)
	}
	authors := map[string]int{}
	for _, branch := range []string{"main", verify.RenderedBranch, verify.StatusBranch, verify.InventoryBranch("edge-a"), verify.InventoryBranch("edge-b")} {
		for _, e := range l.srv.On(branch).Log() {
			authors[e.Author]++
		}
	}
	t.Logf("commits by author: %v", fmt.Sprint(authors))
}
