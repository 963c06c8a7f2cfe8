package gitsync_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// A git host that throttles (429 with Retry-After past its reads a second and pushes a window,
// as GitHub and GitLab do) slows a writer and a reader down and costs them nothing: every update
// lands, in order, every read reads, and the host saw no more than its limits allow.
func TestAThrottlingHostSlowsWritersAndLosesNothing(t *testing.T) {
	// The writer's pushes, a few milliseconds each, reach the limit of 2 in 3 s at the third.
	pushes := gitsynctest.HostLimits{Pushes: 2, PushWindow: 3 * time.Second}
	srv := gitsynctest.NewServer(t, "main", map[string]string{"README.md": "x\n"}, gitsynctest.WithHostLimits(pushes))
	w, err := gitsync.New(srv.URL(), "gitbroker/status", gitsync.WithCreateBranch(), gitsync.WithLogger(logr.Discard()))
	require.NoError(t, err)
	const updates = 6
	for i := range updates {
		_, err := w.Update(t.Context(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
			name := fmt.Sprintf("status/jobs/plant/job-%d.yaml", i)
			return &gitsync.Change{Owned: []string{name}, Files: map[string][]byte{name: []byte("phase: Succeeded\n")}, Message: "record",
				Author: gitsync.Signature{Name: "recorder", Email: "r@example.com", When: time.Now()}}, nil
		})
		require.NoError(t, err, "update %d", i)
	}
	files := srv.On("gitbroker/status").Files()
	for i := range updates {
		require.Contains(t, files, fmt.Sprintf("status/jobs/plant/job-%d.yaml", i))
	}
	c := srv.HostCounts()
	t.Logf("host: %+v; the writer was throttled %d times", c, w.Throttled())
	require.Positive(t, c.ThrottledPushes, "the host throttled the pushes: each was sent again, its pack whole")
	require.EqualValues(t, c.ThrottledPushes, w.Throttled())
	require.LessOrEqual(t, c.PeakPushes, pushes.Pushes)
	require.EqualValues(t, updates, c.Pushes, "one push per update: a throttled push is sent again, not counted twice")
	require.Equal(t, 2, c.Branches)
	require.Equal(t, "status/jobs/plant", c.WidestPath)
	require.Equal(t, updates, c.WidestDirectory)

	// A reader's quiet reads, a few milliseconds each, reach the limit of 3 a second at the
	// fourth.
	reads := gitsynctest.HostLimits{Reads: 3, ReadWindow: time.Second}
	srv = gitsynctest.NewServer(t, "main", map[string]string{"README.md": "x\n"}, gitsynctest.WithHostLimits(reads))
	r, err := gitsync.New(srv.URL(), "main", gitsync.WithLogger(logr.Discard()))
	require.NoError(t, err)
	for range 8 {
		snap, err := r.Snapshot(t.Context())
		require.NoError(t, err)
		require.NotEmpty(t, snap.Commit())
	}
	c = srv.HostCounts()
	t.Logf("host: %+v; the reader was throttled %d times", c, r.Throttled())
	require.Positive(t, c.ThrottledReads, "the host throttled the reads")
	require.EqualValues(t, c.ThrottledReads, r.Throttled())
	require.LessOrEqual(t, c.PeakReads, reads.Reads)
	require.EqualValues(t, 8, c.Reads)
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
