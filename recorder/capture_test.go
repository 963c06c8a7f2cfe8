package recorder_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/recorder"
)

// logs serves each container's log from a map keyed "pod/container", honouring TailLines as the
// kubelet does, and remembers what was asked.
type logs struct {
	by    map[string]func() io.Reader
	asked []corev1.PodLogOptions
}

func (l *logs) source(_ context.Context, _, pod string, o *corev1.PodLogOptions) (io.ReadCloser, error) {
	l.asked = append(l.asked, *o)
	f, ok := l.by[pod+"/"+o.Container]
	if !ok {
		return nil, fmt.Errorf("container %q in pod %q is not found", o.Container, pod)
	}
	r := f()
	if o.TailLines != nil {
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		lines := bytes.SplitAfter(data, []byte("\n"))
		if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		if n := int(*o.TailLines); len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		r = bytes.NewReader(bytes.Join(lines, nil))
	}
	return io.NopCloser(r), nil
}

func text(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }

func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func newRecorder(t *testing.T, client *fake.Clientset, l *logs, opts recorder.Options) *recorder.Recorder {
	t.Helper()
	opts.Client, opts.Log = client, logr.Discard()
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/x.yaml": "x\n"})
	repo, err := gitsync.New(srv.URL(), "main")
	require.NoError(t, err)
	opts.Store = repo
	if l != nil {
		opts.Logs = l.source
	}
	r, err := recorder.New(opts)
	require.NoError(t, err)
	return r
}

// withLogs is a finished Job whose Configuration asked for its logs.
func withLogs(name string, ann map[string]string) *batchv1.Job {
	j := succeeded(job(name))
	for k, v := range ann {
		j.Annotations[k] = v
	}
	return j
}

func capture(t *testing.T, r *recorder.Recorder, j *batchv1.Job) *api.JobRecord {
	t.Helper()
	rec, ok := r.Capture(context.Background(), j)
	require.True(t, ok)
	// Whatever was captured is a record the renderer accepts, and reads back the same.
	b, err := recorder.Marshal(rec)
	require.NoError(t, err)
	back, errs := api.ParseJobRecordFile(api.JobRecordPath(rec.Namespace, rec.Name), b)
	require.Empty(t, errs)
	again, err := recorder.Marshal(back.JobRecord)
	require.NoError(t, err)
	require.Equal(t, string(b), string(again))
	return rec
}

func TestLogsAreOffUnlessAsked(t *testing.T) {
	client := fake.NewClientset(pod("fw-a-job", "fw-a-job-1", "edge-a", 0))
	l := &logs{by: map[string]func() io.Reader{"fw-a-job-1/flash": text("secret stuff\n")}}
	r := newRecorder(t, client, l, recorder.Options{})
	rec := capture(t, r, succeeded(job("fw-a-job")))
	require.Len(t, rec.Spec.Pods, 1)
	c := rec.Spec.Pods[0].Containers[0]
	require.Equal(t, "flash", c.Name)
	require.EqualValues(t, 0, *c.ExitCode)
	require.Empty(t, c.Log)
	require.Empty(t, c.LogNote)
	require.Empty(t, l.asked, "no log is read when the Configuration did not ask for it")
}

func TestLogTailBounds(t *testing.T) {
	client := fake.NewClientset(pod("fw-a-job", "fw-a-job-1", "edge-a", 0))
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		max       int
		log       func() io.Reader
		want      string
		truncated bool
	}{
		{name: "short log, whole", ann: map[string]string{api.AnnotationLogTailLines: "200"}, log: text(numbered(3)), want: numbered(3)},
		{name: "no newline at the end", ann: map[string]string{api.AnnotationLogTailLines: "2"}, log: text("a\nb"), want: "a\nb"},
		{name: "last lines", ann: map[string]string{api.AnnotationLogTailLines: "2"}, log: text(numbered(10)), want: "line 9\nline 10\n", truncated: true},
		{name: "bytes, cut at a line", ann: map[string]string{api.AnnotationLogTailLines: "200", api.AnnotationLogTailBytes: "20"},
			log: text(numbered(10)), want: "line 9\nline 10\n", truncated: true},
		{name: "recorder's ceiling", ann: map[string]string{api.AnnotationLogTailLines: "200", api.AnnotationLogTailBytes: "65536"}, max: 10,
			log: text(numbered(10)), want: "line 10\n", truncated: true},
		{name: "one long line, cut at a rune", ann: map[string]string{api.AnnotationLogTailLines: "1", api.AnnotationLogTailBytes: "10"},
			log: text(strings.Repeat("é", 100)), want: strings.Repeat("é", 5), truncated: true},
		{name: "a log far larger than the bound", ann: map[string]string{api.AnnotationLogTailLines: "1", api.AnnotationLogTailBytes: "1024"},
			log: func() io.Reader { return io.LimitReader(zeros{}, 64<<20) }, want: strings.Repeat("0", 1024), truncated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &logs{by: map[string]func() io.Reader{"fw-a-job-1/flash": tc.log}}
			r := newRecorder(t, client, l, recorder.Options{MaxTailBytes: tc.max})
			rec := capture(t, r, withLogs("fw-a-job", tc.ann))
			c := rec.Spec.Pods[0].Containers[0]
			require.Equal(t, tc.want, string(c.LogBytes()))
			require.Equal(t, tc.truncated, c.LogTruncated)
			require.NotNil(t, l.asked[0].TailLines)
			require.NotNil(t, l.asked[0].LimitBytes, "the API server is asked to bound what it sends")
		})
	}
}

// zeros is an endless log of one line.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

func TestLogRedaction(t *testing.T) {
	client := fake.NewClientset(pod("fw-a-job", "fw-a-job-1", "edge-a", 0))
	token := "ghp_recorderGitToken0123456789"
	log := "connecting with " + token + "\npassword=hunter2hunter2 ok\napi-key: AKIA1234\nflashed 4096 bytes\n"
	l := &logs{by: map[string]func() io.Reader{"fw-a-job-1/flash": text(log)}}
	r := newRecorder(t, client, l, recorder.Options{
		Secrets: []string{token},
		Redact:  []*regexp.Regexp{regexp.MustCompile(`api-key: \S+`)},
	})
	rec := capture(t, r, withLogs("fw-a-job", map[string]string{
		api.AnnotationLogTailLines: "200",
		// The Configuration's own pattern, from the rendered Job.
		api.AnnotationLogRedact: `password=\S+`,
	}))
	c := rec.Spec.Pods[0].Containers[0]
	require.Equal(t, "connecting with [REDACTED]\n[REDACTED] ok\n[REDACTED]\nflashed 4096 bytes\n", c.Log)
	require.Equal(t, "3 redacted", c.LogNote)

	// A byte bound that falls inside a secret cannot leave part of it: redaction comes first.
	l.asked = nil
	rec = capture(t, r, withLogs("fw-a-job", map[string]string{
		api.AnnotationLogTailLines: "1", api.AnnotationLogTailBytes: "12", api.AnnotationLogRedact: `password=\S+`,
	}))
	l.by["fw-a-job-1/flash"] = text("password=hunter2hunter2hunter2")
	rec = capture(t, r, withLogs("fw-a-job", map[string]string{
		api.AnnotationLogTailLines: "1", api.AnnotationLogTailBytes: "12", api.AnnotationLogRedact: `password=\S+`,
	}))
	require.NotContains(t, rec.Spec.Pods[0].Containers[0].Log, "hunter")
	require.Equal(t, "[REDACTED]", rec.Spec.Pods[0].Containers[0].Log)

	// A termination message is redacted too.
	p := pod("fw-b-job", "fw-b-job-1", "edge-a", 1)
	p.Status.ContainerStatuses[0].State.Terminated.Message = "failed: token " + token
	client = fake.NewClientset(p)
	r = newRecorder(t, client, l, recorder.Options{Secrets: []string{token}})
	rec = capture(t, r, failed(job("fw-b-job")))
	require.Equal(t, "failed: token [REDACTED]", rec.Spec.Pods[0].Containers[0].Message)
}

func TestLogNotUTF8(t *testing.T) {
	client := fake.NewClientset(pod("fw-a-job", "fw-a-job-1", "edge-a", 0))
	raw := "flash \xff\xfe\x00 done\n"
	ansi := "\x1b[32mok\x1b[0m\r\n"
	l := &logs{by: map[string]func() io.Reader{"fw-a-job-1/flash": text(raw)}}
	r := newRecorder(t, client, l, recorder.Options{})
	rec := capture(t, r, withLogs("fw-a-job", map[string]string{api.AnnotationLogTailLines: "10"}))
	c := rec.Spec.Pods[0].Containers[0]
	require.Empty(t, c.Log)
	require.NotEmpty(t, c.LogBase64, "bytes that are not UTF-8 are kept exactly, in base64")
	require.Equal(t, raw, string(c.LogBytes()))

	l.by["fw-a-job-1/flash"] = text(ansi)
	rec = capture(t, r, withLogs("fw-a-job", map[string]string{api.AnnotationLogTailLines: "10"}))
	c = rec.Spec.Pods[0].Containers[0]
	require.Equal(t, ansi, c.Log, "control characters are valid UTF-8 and round-trip through YAML")
}

func TestMissingPods(t *testing.T) {
	j := failed(job("fw-b-job")) // three Pods failed
	client := fake.NewClientset(pod("fw-b-job", "fw-b-job-3", "edge-a", 1))
	r := newRecorder(t, client, &logs{by: map[string]func() io.Reader{"fw-b-job-3/flash": text("bad checksum\n")}}, recorder.Options{})
	j.Annotations[api.AnnotationLogTailLines] = "10"
	rec := capture(t, r, j)
	require.Equal(t, "2 of the Job's 3 Pods were deleted before the recorder saw it finished; what they did is lost", rec.Spec.PodsNote)
	require.Len(t, rec.Spec.Pods, 1)
	require.Equal(t, "bad checksum\n", rec.Spec.Pods[0].Containers[0].Log)
	require.EqualValues(t, 1, *rec.Spec.Pods[0].Containers[0].ExitCode)

	r = newRecorder(t, fake.NewClientset(), nil, recorder.Options{})
	rec = capture(t, r, failed(job("fw-b-job")))
	require.Empty(t, rec.Spec.Pods)
	require.Contains(t, rec.Spec.PodsNote, "none of the Job's Pods were left")

	// A log that can no longer be read (the node is gone) is said to be so, per container.
	r = newRecorder(t, client, &logs{by: map[string]func() io.Reader{}}, recorder.Options{})
	rec = capture(t, r, j)
	require.Contains(t, rec.Spec.Pods[0].Containers[0].LogNote, "the log could not be read")
}

func TestPodsForbidden(t *testing.T) {
	client := fake.NewClientset(pod("fw-a-job", "fw-a-job-1", "edge-a", 0))
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", fmt.Errorf("no"))
	})
	r := newRecorder(t, client, nil, recorder.Options{})
	rec := capture(t, r, succeeded(job("fw-a-job")))
	require.Contains(t, rec.Spec.PodsNote, "may not list Pods in plant")
	require.Equal(t, api.OutcomeSucceeded, rec.Spec.Outcome, "the outcome is recorded all the same")
}

func TestManyPodsAndTheLogBudget(t *testing.T) {
	var objs []runtime.Object
	l := &logs{by: map[string]func() io.Reader{}}
	for i := 0; i < 30; i++ {
		p := pod("fw-b-job", fmt.Sprintf("fw-b-job-%02d", i), "edge-a", 1)
		p.CreationTimestamp = metav1.NewTime(started.Add(time.Duration(i) * time.Second))
		objs = append(objs, p)
		l.by[p.Name+"/flash"] = text(strings.Repeat("x", 1000) + "\n" + strings.Repeat("y", 100<<10))
	}
	client := fake.NewClientset(objs...)
	r := newRecorder(t, client, l, recorder.Options{MaxTailBytes: api.MaxLogTailBytes})
	j := failed(job("fw-b-job"))
	j.Status.Failed = 30
	j.Annotations[api.AnnotationLogTailLines] = "10"
	j.Annotations[api.AnnotationLogTailBytes] = fmt.Sprint(api.MaxLogTailBytes)
	rec := capture(t, r, j)
	require.Len(t, rec.Spec.Pods, api.MaxRecordedPods)
	require.Equal(t, "fw-b-job-10", rec.Spec.Pods[0].Name, "the newest Pods, oldest first")
	require.Contains(t, rec.Spec.PodsNote, "the Job had 30 Pods; the newest 20 are recorded")
	total := 0
	for _, p := range rec.Spec.Pods {
		total += len(p.Containers[0].LogBytes())
	}
	require.LessOrEqual(t, total, api.MaxRecordLogBytes)
	require.NotEmpty(t, rec.Spec.Pods[len(rec.Spec.Pods)-1].Containers[0].Log, "the newest Pod's log is kept first")
	require.Contains(t, rec.Spec.Pods[0].Containers[0].LogNote, "used by later Pods")
}

func TestInvalidLogPolicyOnTheJob(t *testing.T) {
	client := fake.NewClientset(pod("fw-a-job", "fw-a-job-1", "edge-a", 0))
	l := &logs{by: map[string]func() io.Reader{"fw-a-job-1/flash": text("hello\n")}}
	r := newRecorder(t, client, l, recorder.Options{})
	rec := capture(t, r, withLogs("fw-a-job", map[string]string{api.AnnotationLogTailLines: "200", api.AnnotationLogRedact: "(unclosed"}))
	require.Contains(t, rec.Spec.PodsNote, "no log was kept")
	require.Empty(t, l.asked, "a Job whose redaction cannot run keeps no log at all")
}
