package recorder_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/recorder"
)

var (
	started  = metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	finished = metav1.NewTime(time.Date(2026, 11, 30, 9, 1, 30, 0, time.UTC))
)

// job is a broker Job as the renderer writes it, with the selector the API server gives it.
func job(name string) *batchv1.Job {
	return &batchv1.Job{
		Spec: batchv1.JobSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "uid-" + name}}},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "plant", UID: types.UID("uid-" + name),
			Labels: map[string]string{
				"app.kubernetes.io/managed-by": "gitbroker",
				"akri.sh/configuration":        "plc-firmware",
				"akri.sh/instance":             "plc-firmware-84beef",
			},
			Annotations: map[string]string{
				"gitbroker.dev/device-id":     "plc-1",
				"gitbroker.dev/rendered-from": "1111111111111111111111111111111111111111",
			},
		},
		Status: batchv1.JobStatus{StartTime: &started, Active: 1},
	}
}

// pod is one of a Job's Pods, ended with exit code code.
func pod(jobName, name, node string, code int32) *corev1.Pod {
	reason, phase := "Completed", corev1.PodSucceeded
	if code != 0 {
		reason, phase = "Error", corev1.PodFailed
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "plant", CreationTimestamp: started,
			Labels: map[string]string{"batch.kubernetes.io/controller-uid": "uid-" + jobName, "batch.kubernetes.io/job-name": jobName}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "flash", Image: "firmware:1"}}},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
			Name:  "flash",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: finished}},
		}}},
	}
}

func succeeded(j *batchv1.Job) *batchv1.Job {
	j.Status.Active, j.Status.Succeeded, j.Status.CompletionTime = 0, 1, &finished
	j.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: finished},
	}
	return j
}

func failed(j *batchv1.Job) *batchv1.Job {
	j.Status.Active, j.Status.Failed = 0, 3
	j.Status.Conditions = []batchv1.JobCondition{{
		Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: finished,
		Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit",
	}}
	return j
}

func start(t *testing.T, client *fake.Clientset, srv *gitsynctest.Server) (*recorder.Recorder, context.CancelFunc) {
	t.Helper()
	return startWith(t, client, srv, func(*recorder.Options) {})
}

// startWith runs a recorder of the options start uses, as edit changes them.
func startWith(t *testing.T, client *fake.Clientset, srv *gitsynctest.Server, edit func(*recorder.Options)) (*recorder.Recorder, context.CancelFunc) {
	t.Helper()
	repo, err := gitsync.New(srv.URL(), "main", gitsync.WithBackoff(gitsync.Backoff{
		Initial: time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 50, MaxElapsed: time.Minute,
	}))
	require.NoError(t, err)
	opts := recorder.Options{
		Client: client, Store: repo, Batch: 20 * time.Millisecond, Retry: 20 * time.Millisecond, Log: logr.Discard(),
		Now: func() time.Time { return finished.Time },
	}
	edit(&opts)
	r, err := recorder.New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := func() {
		cancel()
		require.NoError(t, <-done)
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			stop()
		}
	})
	return r, stop
}

func waitFile(t *testing.T, srv *gitsynctest.Server, path string) string {
	t.Helper()
	var got string
	require.Eventually(t, func() bool {
		var ok bool
		got, ok = srv.File(path)
		return ok
	}, 60*time.Second, 10*time.Millisecond, "waiting for %s", path)
	return got
}

func TestRecordsFinishedJobsOnce(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/x.yaml": "x\n"})
	client := fake.NewClientset(
		succeeded(job("fw-a-job")),
		pod("fw-a-job", "fw-a-job-x7k2p", "edge-a", 0),
		failed(job("fw-b-job")),
		job("fw-running-job"),
		// Not rendered by gitbroker: ignored.
		func() *batchv1.Job { j := succeeded(job("other-job")); j.Labels = nil; return j }(),
	)
	r, stop := start(t, client, srv)

	a := waitFile(t, srv, "status/jobs/plant/fw-a-job.yaml")
	require.Equal(t, `apiVersion: gitbroker.dev/v1alpha1
kind: JobRecord
metadata:
  name: fw-a-job
  namespace: plant
spec:
  completionTime: "2026-11-30T09:01:30Z"
  configuration: plc-firmware
  deviceID: plc-1
  failed: 0
  instance: plc-firmware-84beef
  outcome: Succeeded
  pods:
  - containers:
    - exitCode: 0
      finishedAt: "2026-11-30T09:01:30Z"
      name: flash
      reason: Completed
      startedAt: "2026-11-30T09:00:00Z"
    name: fw-a-job-x7k2p
    node: edge-a
    phase: Succeeded
  renderedFrom: "1111111111111111111111111111111111111111"
  startTime: "2026-11-30T09:00:00Z"
  succeeded: 1
`, a, "the Pod's end is recorded; its log is not, as the Job did not ask for it")
	b := waitFile(t, srv, "status/jobs/plant/fw-b-job.yaml")
	rec, errs := api.ParseJobRecordFile("status/jobs/plant/fw-b-job.yaml", []byte(b))
	require.Empty(t, errs)
	require.Contains(t, rec.Spec.PodsNote, "none of the Job's Pods were left", "its Pods are gone, and the record says so")
	require.Empty(t, rec.Spec.Pods)
	require.Equal(t, api.OutcomeFailed, rec.Spec.Outcome)
	require.Equal(t, "BackoffLimitExceeded", rec.Spec.Reason)
	require.Equal(t, int32(3), rec.Spec.Failed)
	require.True(t, finished.Time.Equal(rec.Spec.CompletionTime.Time))
	require.Eventually(t, r.Ready, 10*time.Second, 10*time.Millisecond)

	_, ok := srv.File("status/jobs/plant/fw-running-job.yaml")
	require.False(t, ok, "a running Job has no record")
	_, ok = srv.File("status/jobs/plant/other-job.yaml")
	require.False(t, ok, "only gitbroker's Jobs are recorded")
	log := srv.Log()
	require.Len(t, log, 2, "both finished Jobs land in one commit")
	require.ElementsMatch(t, []string{"status/jobs/plant/fw-a-job.yaml", "status/jobs/plant/fw-b-job.yaml"}, log[0].Paths)

	// The running Job finishes.
	running, err := client.BatchV1().Jobs("plant").Get(context.Background(), "fw-running-job", metav1.GetOptions{})
	require.NoError(t, err)
	_, err = client.BatchV1().Jobs("plant").UpdateStatus(context.Background(), succeeded(running), metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFile(t, srv, "status/jobs/plant/fw-running-job.yaml")
	require.Len(t, srv.Log(), 3)
	require.Equal(t, []string{"status/jobs/plant/fw-running-job.yaml"}, srv.Log()[0].Paths)
	stop()

	// Restarted, the recorder sees all three finished Jobs again and writes
	// nothing: a record in git is never rewritten.
	r2, _ := start(t, client, srv)
	require.Eventually(t, r2.Ready, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Len(t, srv.Log(), 3)
}

func TestRecordOnBranchIsNeverRewritten(t *testing.T) {
	// A record someone kept by hand, different from what the Job says now.
	kept := "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: fw-a-job\n  namespace: plant\nspec:\n  configuration: plc-firmware\n  instance: plc-firmware-84beef\n  deviceID: plc-1\n  outcome: Failed\n  succeeded: 0\n  failed: 1\n"
	srv := gitsynctest.NewServer(t, "main", map[string]string{"status/jobs/plant/fw-a-job.yaml": kept})
	client := fake.NewClientset(succeeded(job("fw-a-job")), succeeded(job("fw-c-job")))
	r, _ := start(t, client, srv)
	waitFile(t, srv, "status/jobs/plant/fw-c-job.yaml")
	require.Eventually(t, r.Ready, 10*time.Second, 10*time.Millisecond)
	got, _ := srv.File("status/jobs/plant/fw-a-job.yaml")
	require.Equal(t, kept, got)
	require.Equal(t, []string{"status/jobs/plant/fw-c-job.yaml"}, srv.Log()[0].Paths)
}

// Records land on top of other writers' commits; a person's commit in the
// way is kept.
func TestRecorderRecomputesOnConflict(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/x.yaml": "x\n"})
	srv.BeforeNextPush(func() {
		srv.Commit(map[string]string{"inventory/edge-a.yaml": "agent\n"}, nil, "inventory: edge-a")
	})
	client := fake.NewClientset(succeeded(job("fw-a-job")))
	start(t, client, srv)
	waitFile(t, srv, "status/jobs/plant/fw-a-job.yaml")
	got, _ := srv.File("inventory/edge-a.yaml")
	require.Equal(t, "agent\n", got)
	require.Equal(t, []string{"status/jobs/plant/fw-a-job.yaml"}, srv.Log()[0].Paths)
}

// While git is unreachable the records wait; when it returns, each lands
// once.
func TestRecorderWaitsForGit(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/x.yaml": "x\n"})
	srv.SetDown(true)
	client := fake.NewClientset(succeeded(job("fw-a-job")))
	r, _ := start(t, client, srv)
	require.Eventually(t, func() bool { return r.Pending() == 1 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.False(t, r.Ready())
	srv.SetDown(false)
	waitFile(t, srv, "status/jobs/plant/fw-a-job.yaml")
	require.Eventually(t, r.Ready, 10*time.Second, 10*time.Millisecond)
	require.Len(t, srv.Log(), 2)
}

// A Job the recorder cannot record (no labels) never holds up the others.
func TestUnrecordableJobDoesNotBlock(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/x.yaml": "x\n"})
	odd := succeeded(job("fw-odd-job"))
	delete(odd.Labels, "akri.sh/configuration")
	client := fake.NewClientset(odd, succeeded(job("fw-a-job")))
	r, _ := start(t, client, srv)
	waitFile(t, srv, "status/jobs/plant/fw-a-job.yaml")
	require.Eventually(t, r.Ready, 10*time.Second, 10*time.Millisecond)
	_, ok := srv.File("status/jobs/plant/fw-odd-job.yaml")
	require.False(t, ok)
}

// With Namespaces the recorder watches only those namespaces, so it needs a Role in each and no
// ClusterRole; a broker Job elsewhere is not its business.
func TestRecordsOnlyItsNamespaces(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/x.yaml": "x\n"})
	elsewhere := succeeded(job("fw-elsewhere-job"))
	elsewhere.Namespace = "other"
	kitchen := succeeded(job("fw-kitchen-job"))
	kitchen.Namespace = "kitchen"
	client := fake.NewClientset(succeeded(job("fw-a-job")), elsewhere, kitchen)
	repo, err := gitsync.New(srv.URL(), "main")
	require.NoError(t, err)
	r, err := recorder.New(recorder.Options{Client: client, Store: repo, Namespaces: []string{"plant", "kitchen"},
		Batch: 20 * time.Millisecond, Retry: 20 * time.Millisecond, Log: logr.Discard()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFile(t, srv, api.JobRecordPath("plant", "fw-a-job"))
	waitFile(t, srv, api.JobRecordPath("kitchen", "fw-kitchen-job"))
	require.Eventually(t, r.Ready, 60*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	_, ok := srv.File(api.JobRecordPath("other", "fw-elsewhere-job"))
	require.False(t, ok, "a namespace it was not given")
}
