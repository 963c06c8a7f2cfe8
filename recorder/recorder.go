// Package recorder owns the Job outcome records: it watches the broker
// Jobs gitbroker rendered (label app.kubernetes.io/managed-by: gitbroker)
// with client-go informers and, when one finishes, writes its JobRecord
// once to status/jobs/<namespace>/<job>.yaml through a gitsync.Store.
//
// The record holds what an auditor needs after the Pods are gone: per Pod
// and container the node, exit code, reason and termination message, and,
// when the Job's Configuration asked for it, a bounded, redacted tail of
// the log. Pods already deleted are said to be so, not guessed at.
//
// A record already on the branch is never rewritten, and the informer's
// initial list brings the Jobs that finished while the recorder was down,
// so a restart neither duplicates nor loses a record. The recorder needs
// get, list and watch on jobs, and list on pods and get on pods/log in the
// broker namespaces.
//
// It also keeps two parts of status/ that say what the cluster is doing:
// status/nodes/ (nodes.go), the nodes NotReady or gone for longer than a
// grace, from which the renderer moves shared devices' brokers, and
// status/rollouts/ (rollouts.go), whether each broker Deployment of a
// Configuration with a staged rollout runs its current spec Available, from
// which the renderer starts the next wave. For those it needs get, list and
// watch on nodes and on deployments.
package recorder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
)

// Selector picks the Jobs gitbroker rendered.
var Selector = api.LabelManagedBy + "=" + api.ManagedByGitbroker

// Options configures a Recorder.
type Options struct {
	Client kubernetes.Interface
	Store  gitsync.Store
	// Namespaces limits the watch to these namespaces (the broker namespaces), so the recorder
	// needs a Role in each instead of a ClusterRole; empty watches all.
	Namespaces []string
	// Batch is how long the recorder waits after a Job finishes for others
	// to finish too, so Jobs finishing together land in one commit.
	Batch time.Duration
	// Retry is the wait after a failed write before trying again.
	Retry time.Duration
	// Timeout bounds one write, so a stalled connection cannot hang the
	// recorder (default 5m).
	Timeout time.Duration
	Author  gitsync.Signature
	Log     logr.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Repair is how often the recorder puts its ref back over commits someone else pushed
	// there (a Store with Restore, gitsync.WithOwnHistory), when it has no record to write
	// (default 1m; negative never).
	Repair time.Duration

	// Logs reads container logs; nil reads them through Client (pods/log).
	Logs LogSource
	// MaxTailBytes caps the tail any Job may ask for per container (default
	// api.DefaultLogTailBytes); negative keeps no log at all.
	MaxTailBytes int
	// Redact are patterns replaced in every tail and message, besides each Job's own.
	Redact []*regexp.Regexp
	// Secrets are the recorder's own credentials, replaced wherever they appear.
	Secrets []string

	// NodeLossGrace is how long a node is NotReady or gone before its NodeLoss is written
	// (default DefaultNodeLossGrace); negative watches no nodes.
	NodeLossGrace time.Duration
}

// Recorder writes the outcome of every finished broker Job once.
type Recorder struct {
	opts Options

	redact *redactor

	mu      sync.Mutex
	pending map[string]*pending // by record path
	wake    chan struct{}
	ready   atomic.Bool

	// writing serialises the writes to the Store: Job records and node losses are written
	// from two loops.
	writing  sync.Mutex
	nodes    *nodes
	rollouts *rollouts
	// writers are the writers of the kinds beside JobRecords (statusWriters).
	writers []statusWriter
}

// pending is a finished Job's record waiting to be written.
type pending struct {
	rec *api.JobRecord
	ref jobRef
	// encoded is the record with what its Pods said, once captured: the Pods are read once,
	// however often the write is retried.
	encoded []byte
}

// New returns a Recorder.
func New(opts Options) (*Recorder, error) {
	if opts.Client == nil || opts.Store == nil {
		return nil, errors.New("recorder needs a Kubernetes client and a store")
	}
	if opts.Batch <= 0 {
		opts.Batch = 2 * time.Second
	}
	if opts.Retry <= 0 {
		opts.Retry = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Repair == 0 {
		opts.Repair = time.Minute
	}
	if opts.Author.Name == "" {
		opts.Author = gitsync.Signature{Name: "gitbroker-recorder", Email: "recorder@gitbroker.dev"}
	}
	if opts.MaxTailBytes == 0 {
		opts.MaxTailBytes = api.DefaultLogTailBytes
	}
	if opts.Logs == nil {
		client := opts.Client
		opts.Logs = func(ctx context.Context, ns, pod string, o *corev1.PodLogOptions) (io.ReadCloser, error) {
			return client.CoreV1().Pods(ns).GetLogs(pod, o).Stream(ctx)
		}
	}
	red := &redactor{patterns: opts.Redact}
	for _, s := range opts.Secrets {
		// A short "secret" would redact ordinary words.
		if len(s) >= 8 {
			red.secrets = append(red.secrets, []byte(s))
		}
	}
	if opts.NodeLossGrace == 0 {
		opts.NodeLossGrace = DefaultNodeLossGrace
	}
	r := &Recorder{opts: opts, redact: red, pending: map[string]*pending{}, wake: make(chan struct{}, 1)}
	for _, f := range statusWriters {
		r.writers = append(r.writers, f(r))
	}
	return r, nil
}

// Ready reports whether the informer has synced and everything it found
// finished has been written.
func (r *Recorder) Ready() bool { return r.ready.Load() }

// Pending counts the finished Jobs whose records are not on the branch yet.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Run watches Jobs and writes records until ctx ends.
func (r *Recorder) Run(ctx context.Context) error {
	namespaces := r.opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		factory := informers.NewSharedInformerFactoryWithOptions(r.opts.Client, 0,
			informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = Selector }))
		inf := factory.Batch().V1().Jobs().Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.observe(obj) },
			UpdateFunc: func(_, obj any) { r.observe(obj) },
		}); err != nil {
			return fmt.Errorf("watching Jobs: %w", err)
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		synced = append(synced, inf.HasSynced)
	}
	var loops sync.WaitGroup
	defer loops.Wait()
	for _, w := range r.writers {
		if !w.on {
			continue
		}
		synced, err := w.watch(ctx, namespaces)
		if err != nil {
			return err
		}
		r.opts.Log.Info("watching for "+w.what, "kind", w.kind)
		loops.Go(func() { r.runStatus(ctx, w.what, synced, w.wake, w.flush) })
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // stopped before the caches synced: a stop, as any other
	}
	r.opts.Log.Info("watching broker Jobs", "selector", Selector, "namespaces", r.opts.Namespaces)
	var repair <-chan time.Time
	if _, ok := r.opts.Store.(restorer); ok && r.opts.Repair > 0 {
		// A recorder that starts (a restart, a new Pod) puts its ref back first: with nothing
		// to record, a commit someone planted while it was down would otherwise stay on top
		// until the first tick, and every render meanwhile would refuse the status ref.
		r.Restore(ctx)
		t := time.NewTicker(r.opts.Repair)
		defer t.Stop()
		repair = t.C
	}
	for {
		if err := r.Flush(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.opts.Log.Error(err, "writing Job records failed; will retry", "pending", r.Pending())
			if !sleep(ctx, r.opts.Retry) {
				return nil
			}
			continue
		}
		r.ready.Store(r.Pending() == 0)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			// Let Jobs that finish together land in one commit.
			if !sleep(ctx, r.opts.Batch) {
				return nil
			}
		case <-repair:
			r.Restore(ctx)
		}
	}
}

// restorer is a Store that can put a writer's ref back on its own commit (gitsync.Repository).
type restorer interface {
	Restore(ctx context.Context) (gitsync.Result, error)
}

// Restore puts the recorder's ref back over what someone else pushed there, so the renderer
// takes its records again within an interval even when no Job finishes. Run calls it every
// Options.Repair; it does nothing for a Store that cannot (a work tree, an unsigned recorder).
func (r *Recorder) Restore(ctx context.Context) {
	rs, ok := r.opts.Store.(restorer)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	r.writing.Lock()
	defer r.writing.Unlock()
	res, err := rs.Restore(ctx)
	switch {
	case errors.Is(err, gitsync.ErrNoChanges):
	case err != nil:
		r.opts.Log.Error(err, "putting the recorder's ref back failed; will retry")
	case res.Replaced != "":
		r.opts.Log.Error(errors.New("the branch held commits this recorder did not sign"), "dropped what someone else pushed on the recorder's ref", "replaced", res.Replaced, "commit", res.Commit)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// observe queues the record of a finished Job.
func (r *Recorder) observe(obj any) {
	job, ok := obj.(*batchv1.Job)
	if !ok || job.Labels[api.LabelManagedBy] != api.ManagedByGitbroker {
		return
	}
	rec, ok := Record(job)
	if !ok {
		return
	}
	path := api.JobRecordPath(job.Namespace, job.Name)
	r.mu.Lock()
	_, known := r.pending[path]
	if !known {
		r.pending[path] = &pending{rec: rec, ref: newJobRef(job)}
	}
	r.mu.Unlock()
	if !known {
		r.opts.Metrics.setPending(r.Pending())
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// Flush writes every pending record that is not on the branch yet, in one
// commit.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	batch := maps.Clone(r.pending)
	r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	r.writing.Lock()
	defer r.writing.Unlock()
	var written []string
	res, err := r.opts.Store.Update(ctx, func(ctx context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		written = written[:0]
		files := map[string][]byte{}
		for _, path := range slices.Sorted(maps.Keys(batch)) {
			if _, err := head.ReadFile(path); err == nil {
				continue // recorded before: never rewritten, and its Pods not read again
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			b := r.encode(ctx, path, batch[path])
			if b == nil {
				continue
			}
			files[path] = b
			written = append(written, path)
		}
		if len(files) == 0 {
			return nil, gitsync.ErrNoChanges
		}
		author := r.opts.Author
		author.When = r.opts.Now()
		return &gitsync.Change{
			// Each record is owned on its own, so no other record is ever
			// touched.
			Owned:   slices.Sorted(maps.Keys(files)),
			Files:   files,
			Message: message(batch, written),
			Author:  author,
		}, nil
	})
	r.opts.Metrics.push(res, err, len(written))
	if err != nil && !errors.Is(err, gitsync.ErrNoChanges) {
		return err
	}
	if err == nil {
		r.opts.Log.Info("Job records written", "records", len(written), "commit", res.Commit,
			"attempts", res.Attempts, "conflicts", res.Conflicts)
		if res.Replaced != "" {
			r.opts.Log.Error(errors.New("the branch held commits this recorder did not sign"), "dropped what someone else pushed on the recorder's ref", "replaced", res.Replaced, "commit", res.Commit)
		}
	}
	r.mu.Lock()
	for path := range batch {
		delete(r.pending, path)
	}
	r.mu.Unlock()
	r.opts.Metrics.setPending(r.Pending())
	return nil
}

// encode captures what the Job's Pods say, once, and encodes the record. A record that cannot be
// written (a Job without the labels the renderer sets) is dropped with an error, so it never
// holds up the others.
func (r *Recorder) encode(ctx context.Context, path string, p *pending) []byte {
	r.mu.Lock()
	b := p.encoded
	r.mu.Unlock()
	if b != nil {
		return b
	}
	rec := *p.rec // capture only adds spec.pods and spec.podsNote
	r.capture(ctx, &rec, p.ref)
	b, err := Marshal(&rec)
	if err != nil {
		r.opts.Log.Error(err, "dropping a Job that cannot be recorded", "job", rec.Namespace+"/"+rec.Name)
		r.mu.Lock()
		delete(r.pending, path)
		r.mu.Unlock()
		return nil
	}
	r.mu.Lock()
	p.encoded = b
	r.mu.Unlock()
	return b
}

// Capture returns the record of a finished Job with what its Pods say now, as Flush would write
// it, and false while the Job runs.
func (r *Recorder) Capture(ctx context.Context, job *batchv1.Job) (*api.JobRecord, bool) {
	rec, ok := Record(job)
	if !ok {
		return nil, false
	}
	r.capture(ctx, rec, newJobRef(job))
	return rec, true
}

func message(batch map[string]*pending, written []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "record: %d Job(s) finished\n\n", len(written))
	for _, path := range written {
		rec := batch[path].rec
		fmt.Fprintf(&b, "- %s/%s: %s\n", rec.Namespace, rec.Name, rec.Spec.Outcome)
	}
	return b.String()
}

// Record returns the JobRecord of a finished Job, and false while it runs.
func Record(job *batchv1.Job) (*api.JobRecord, bool) {
	var outcome string
	var done *batchv1.JobCondition
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			outcome, done = api.OutcomeSucceeded, c
		case batchv1.JobFailed:
			outcome, done = api.OutcomeFailed, c
		}
	}
	if done == nil || job.Name == "" || job.Namespace == "" {
		return nil, false
	}
	rec := &api.JobRecord{
		TypeMeta:   metav1.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindJobRecord},
		ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace},
		Spec: api.JobRecordSpec{
			Configuration:  job.Labels[api.LabelConfiguration],
			Instance:       job.Labels[api.LabelInstance],
			DeviceID:       job.Annotations[api.AnnotationDeviceID],
			RenderedFrom:   job.Annotations[api.AnnotationRenderedFrom],
			Outcome:        outcome,
			StartTime:      job.Status.StartTime,
			CompletionTime: job.Status.CompletionTime,
			Succeeded:      job.Status.Succeeded,
			Failed:         job.Status.Failed,
		},
	}
	if outcome == api.OutcomeFailed {
		rec.Spec.Reason, rec.Spec.Message = done.Reason, done.Message
		if rec.Spec.CompletionTime == nil && !done.LastTransitionTime.IsZero() {
			t := done.LastTransitionTime
			rec.Spec.CompletionTime = &t
		}
	}
	return rec, true
}

// Marshal writes a record in the repository's format.
func Marshal(rec *api.JobRecord) ([]byte, error) {
	b, err := yaml.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding JobRecord %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	b = bytes.Replace(b, []byte("  creationTimestamp: null\n"), nil, 1)
	path := api.JobRecordPath(rec.Namespace, rec.Name)
	if _, errs := api.ParseJobRecordFile(path, b); len(errs) > 0 {
		return nil, fmt.Errorf("refusing to write a JobRecord the renderer would reject: %w", errs)
	}
	return b, nil
}
