package gitsync_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// A git host that throttles (429 with Retry-After past its reads a second and pushes a window,
// as GitHub and GitLab do) slows a writer down and costs it nothing: every update lands, in
// order, and a reader reading all the while reads, each within the host's limits.
func TestAThrottlingHostSlowsWritersAndLosesNothing(t *testing.T) {
	limits := gitsynctest.HostLimits{Reads: 20, ReadWindow: time.Second, Pushes: 2, PushWindow: 2 * time.Second}
	srv := gitsynctest.NewServer(t, "main", map[string]string{"README.md": "x\n"}, gitsynctest.WithHostLimits(limits))
	w, err := gitsync.New(srv.URL(), "gitbroker/status", gitsync.WithCreateBranch(), gitsync.WithLogger(logr.Discard()))
	require.NoError(t, err)
	r, err := gitsync.New(srv.URL(), "main")
	require.NoError(t, err)

	var reads atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	var reader sync.WaitGroup
	reader.Go(func() {
		for ctx.Err() == nil {
			if _, err := r.Snapshot(ctx); err == nil {
				reads.Add(1)
			} else if ctx.Err() == nil {
				t.Errorf("a read failed: %v", err)
			}
		}
	})
	const updates = 6
	for i := range updates {
		_, err := w.Update(t.Context(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
			name := fmt.Sprintf("status/jobs/plant/job-%d.yaml", i)
			return &gitsync.Change{Owned: []string{name}, Files: map[string][]byte{name: []byte("phase: Succeeded\n")}, Message: "record",
				Author: gitsync.Signature{Name: "recorder", Email: "r@example.com", When: time.Now()}}, nil
		})
		require.NoError(t, err, "update %d", i)
	}
	cancel()
	reader.Wait()
	files := srv.On("gitbroker/status").Files()
	for i := range updates {
		require.Contains(t, files, fmt.Sprintf("status/jobs/plant/job-%d.yaml", i))
	}
	c := srv.HostCounts()
	t.Logf("host: %+v; the reader read %d times; the writer was throttled %d times, the reader %d", c, reads.Load(), w.Throttled(), r.Throttled())
	require.Positive(t, c.ThrottledReads, "the host throttled the reads")
	require.Positive(t, c.ThrottledPushes, "the host throttled the pushes: each was sent again, its pack whole")
	require.Positive(t, w.Throttled()+r.Throttled())
	require.LessOrEqual(t, c.PeakReads, limits.Reads)
	require.LessOrEqual(t, c.PeakPushes, limits.Pushes)
	require.EqualValues(t, updates, c.Pushes, "one push per update: a throttled push is sent again, not counted twice")
	require.Equal(t, 2, c.Branches)
	require.Equal(t, "status/jobs/plant", c.WidestPath)
	require.Equal(t, updates, c.WidestDirectory)
}

// A host that throttles without saying when to come back gets the same request again after a
// wait; one that says when gets it then. The answer after the throttling is the request's.
func TestThrottledRequestsAreSentAgain(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch requests.Add(1) {
		case 1:
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", http.StatusServiceUnavailable)
		default:
			http.Error(w, "no such repository", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	r, err := gitsync.New(srv.URL+"/fleet.git", "main", gitsync.WithLogger(logr.Discard()))
	require.NoError(t, err)
	_, err = r.Snapshot(t.Context())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "slow down", "the answer after the throttling is the server's own")
	require.EqualValues(t, 3, requests.Load())
	require.EqualValues(t, 2, r.Throttled())
}

// A host that keeps throttling fails the request, saying so, after a bounded number of waits;
// a request whose context ends while it waits ends then.
func TestAHostThatKeepsThrottlingFailsTheRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer srv.Close()
	r, err := gitsync.New(srv.URL+"/fleet.git", "main", gitsync.WithLogger(logr.Discard()))
	require.NoError(t, err)
	_, err = r.Snapshot(t.Context())
	var throttled *gitsync.ThrottledError
	require.ErrorAs(t, err, &throttled)
	require.Equal(t, http.StatusTooManyRequests, throttled.Status)

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600") // bounded to two minutes, still longer than the context
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer slow.Close()
	r, err = gitsync.New(slow.URL+"/fleet.git", "main", gitsync.WithLogger(logr.Discard()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = r.Snapshot(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 30*time.Second)
}
