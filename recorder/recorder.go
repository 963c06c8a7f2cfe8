// Package recorder owns the Job outcome records: it watches the broker
// Jobs gitbroker rendered (label app.kubernetes.io/managed-by: gitbroker)
// with client-go informers and, when one finishes, writes its JobRecord
// once to status/jobs/<namespace>/<job>.yaml through a gitsync.Store.
//
// A record already on the branch is never rewritten, and the informer's
// initial list brings the Jobs that finished while the recorder was down,
// so a restart neither duplicates nor loses a record. The recorder needs
// get, list and watch on jobs and nothing else.
package recorder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
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
	"github.com/gitbroker/gitbroker/render"
)

// Selector picks the Jobs gitbroker rendered.
var Selector = render.LabelManagedBy + "=" + render.ManagedByGitbroker

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
}

// Recorder writes the outcome of every finished broker Job once.
type Recorder struct {
	opts Options

	mu      sync.Mutex
	pending map[string]*api.JobRecord // by record path
	wake    chan struct{}
	ready   atomic.Bool
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
	if opts.Author.Name == "" {
		opts.Author = gitsync.Signature{Name: "gitbroker-recorder", Email: "recorder@gitbroker.dev"}
	}
	return &Recorder{opts: opts, pending: map[string]*api.JobRecord{}, wake: make(chan struct{}, 1)}, nil
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
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	r.opts.Log.Info("watching broker Jobs", "selector", Selector, "namespaces", r.opts.Namespaces)
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
		}
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
	if !ok || job.Labels[render.LabelManagedBy] != render.ManagedByGitbroker {
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
		r.pending[path] = rec
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
	// A record that cannot be written (a Job without the labels the
	// renderer sets) is dropped with an error, so it never holds up the
	// others.
	encoded := map[string][]byte{}
	for path, rec := range batch {
		b, err := Marshal(rec)
		if err != nil {
			r.opts.Log.Error(err, "dropping a Job that cannot be recorded", "job", rec.Namespace+"/"+rec.Name)
			continue
		}
		encoded[path] = b
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	var written []string
	res, err := r.opts.Store.Update(ctx, func(_ context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		written = written[:0]
		files := map[string][]byte{}
		for _, path := range slices.Sorted(maps.Keys(encoded)) {
			if _, err := head.ReadFile(path); err == nil {
				continue // recorded before: never rewritten
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			files[path] = encoded[path]
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
	}
	r.mu.Lock()
	for path := range batch {
		delete(r.pending, path)
	}
	r.mu.Unlock()
	r.opts.Metrics.setPending(r.Pending())
	return nil
}

func message(batch map[string]*api.JobRecord, written []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "record: %d Job(s) finished\n\n", len(written))
	for _, path := range written {
		rec := batch[path]
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
			Configuration:  job.Labels[render.LabelConfiguration],
			Instance:       job.Labels[render.LabelInstance],
			DeviceID:       job.Annotations[render.AnnotationDeviceID],
			RenderedFrom:   job.Annotations[render.AnnotationRenderedFrom],
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
