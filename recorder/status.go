package recorder

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/gitbroker/gitbroker/gitsync"
)

// The recorder's kinds of record beside its JobRecords (api.StatusKinds): how each registers
// its writer, and the loop and the folder write every one of them shares.

// statusWriter is one of the recorder's kinds of record beside its JobRecords (api.StatusKinds):
// the watch that keeps what it should write up to date, and the flush that writes its folder
// when woken.
type statusWriter struct {
	kind, what string // the api.StatusKind's Kind, and what the logs call it
	on         bool
	watch      func(ctx context.Context, namespaces []string) (synced func() bool, err error)
	wake       chan struct{}
	flush      func(ctx context.Context) (time.Time, error)
}

// statusWriters make the recorder's writers of its kinds beside JobRecords, one per kind. Each
// kind's file registers its own in an init (nodes.go, rollouts.go), as the kind registers in
// api.StatusKinds: a new kind of record is a file here, not a field, a channel and a loop.
var statusWriters []func(r *Recorder) statusWriter

func registerStatusWriter(f func(r *Recorder) statusWriter) { statusWriters = append(statusWriters, f) }

// replaceDir makes dir on the recorder's ref hold exactly what desired returns for what it holds
// now, in one commit with desired's message, and returns the commit ("" when nothing changed).
// Job records, node losses and rollouts are written one at a time (writing).
func (r *Recorder) replaceDir(ctx context.Context, dir string, desired func(existing map[string][]byte) (map[string][]byte, string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	r.writing.Lock()
	defer r.writing.Unlock()
	res, err := r.opts.Store.Update(ctx, func(ctx context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		existing, err := head.Files(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		files, message, err := desired(existing)
		if err != nil {
			return nil, err
		}
		if maps.EqualFunc(files, existing, func(a, b []byte) bool { return string(a) == string(b) }) {
			return nil, gitsync.ErrNoChanges
		}
		author := r.opts.Author
		author.When = r.opts.Now()
		return &gitsync.Change{Owned: []string{dir + "/"}, Files: files, Message: message, Author: author}, nil
	})
	if errors.Is(err, gitsync.ErrNoChanges) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return res.Commit, nil
}

// added are the paths of a that b does not hold, sorted.
func added(a, b map[string][]byte) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(a)) {
		if _, ok := b[p]; !ok {
			out = append(out, p)
		}
	}
	return out
}

// wakeUp tells a status loop there is something to write, without waiting.
func wakeUp(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// runStatus writes one part of status/ (node losses, rollouts) until ctx ends: once its informers
// have listed everything, then whenever wake says something changed and when flush asks for it.
// A recorder without the right to watch what that part needs logs it and goes on recording Jobs.
func (r *Recorder) runStatus(ctx context.Context, what string, synced func() bool, wake chan struct{}, flush func(context.Context) (time.Time, error)) {
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return
	}
	for {
		next, err := flush(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.opts.Log.Error(err, "writing "+what+" failed; will retry")
			if !sleep(ctx, r.opts.Retry) {
				return
			}
			continue
		}
		var due <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			// Looked at again within a minute whatever the clock did (a suspended machine).
			t = time.NewTimer(min(max(next.Sub(r.opts.Now()), time.Second), time.Minute))
			due = t.C
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-due:
		}
		if t != nil {
			t.Stop()
		}
		// Let the events of one change land in one commit.
		if !sleep(ctx, r.opts.Batch) {
			return
		}
	}
}
