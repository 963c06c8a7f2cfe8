package gitsync_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// proxy serves the git server behind it through handle, which may hold any request back.
func proxy(t *testing.T, srv *gitsynctest.Server, handle func(w http.ResponseWriter, r *http.Request, next http.Handler)) string {
	u, err := url.Parse(srv.URL())
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(w, r, rp) }))
	t.Cleanup(front.Close)
	return front.URL + u.Path
}

// A server that accepts the connection and never answers fails a read, and a server that takes
// a push and never answers fails the push, once the request has made no progress for the stall
// timeout, with the URL, what was being done and what the server did not do.
func TestStalledServerFailsFast(t *testing.T) {
	ctx := context.Background()
	silent := gitsynctest.Silent(t)
	r, err := gitsync.New(silent, "main", gitsync.WithStallTimeout(300*time.Millisecond))
	require.NoError(t, err)
	start := time.Now()
	_, err = r.Snapshot(ctx)
	var stalled *gitsync.StalledError
	require.True(t, errors.As(err, &stalled), "%v", err)
	require.ErrorContains(t, err, "fetching main from "+silent)
	require.ErrorContains(t, err, "sent nothing for 300ms")
	require.Less(t, time.Since(start), 5*time.Second)

	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/a.yaml": "a: 1\n"})
	held := make(chan struct{})
	front := proxy(t, srv, func(w http.ResponseWriter, req *http.Request, next http.Handler) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/git-receive-pack") {
			<-held // takes the pack into the socket's buffers, answers nothing
			return
		}
		next.ServeHTTP(w, req)
	})
	t.Cleanup(func() { close(held) }) // before the proxy's Close, which waits for its handlers
	r, err = gitsync.New(front, "main", gitsync.WithStallTimeout(300*time.Millisecond), gitsync.WithFailFast())
	require.NoError(t, err)
	start = time.Now()
	_, err = r.Update(ctx, write([]string{"configurations/b.yaml"}, map[string]string{"configurations/b.yaml": "b: 1\n"}))
	// go-git keeps only the text of a push's client error.
	require.ErrorContains(t, err, "pushing to "+front)
	require.Regexp(t, `the server at 127\.0\.0\.1:\d+ (sent|took) nothing for 300ms`, err.Error())
	require.Less(t, time.Since(start), 5*time.Second)
	_, ok := srv.File("configurations/b.yaml")
	require.False(t, ok)
}

// A slow server that keeps sending is not cut, however long the whole takes: the stall timeout
// bounds silence, not work. (The stall timeout leaves git http-backend, a process per request,
// time to start on a busy machine: 300 ms did not when CI builds beside the tests.)
func TestSlowServerIsNotCut(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/a.yaml": randomText(8 << 10)})
	front := proxy(t, srv, func(w http.ResponseWriter, req *http.Request, next http.Handler) {
		next.ServeHTTP(&dribble{ResponseWriter: w, every: 250 * time.Millisecond}, req)
	})
	r, err := gitsync.New(front, "main", gitsync.WithStallTimeout(2*time.Second), gitsync.WithFailFast())
	require.NoError(t, err)
	start := time.Now()
	snap, err := r.Snapshot(context.Background())
	require.NoError(t, err)
	require.Greater(t, time.Since(start), time.Second, "the test's server was not slow")
	b, err := snap.ReadFile("configurations/a.yaml")
	require.NoError(t, err)
	require.Len(t, b, 8<<10)
	_, err = r.Update(context.Background(), write([]string{"configurations/b.yaml"}, map[string]string{"configurations/b.yaml": "b: 1\n"}))
	require.NoError(t, err)
	got, _ := srv.File("configurations/b.yaml")
	require.Equal(t, "b: 1\n", got)
}

// dribble sends a response 512 bytes at a time, waiting every between them.
type dribble struct {
	http.ResponseWriter
	every time.Duration
}

func (d *dribble) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 512)
		time.Sleep(d.every)
		w, err := d.ResponseWriter.Write(p[:k])
		n += w
		if err != nil {
			return n, err
		}
		d.ResponseWriter.(http.Flusher).Flush()
		p = p[k:]
	}
	return n, nil
}

func (d *dribble) Flush() { d.ResponseWriter.(http.Flusher).Flush() }

// A write gives up when it has not landed within its push timeout, a stalled attempt included:
// the push timeout bounds the write even when it is shorter than the stall timeout.
func TestWriteGivesUpAtPushTimeout(t *testing.T) {
	silent := gitsynctest.Silent(t)
	r, err := gitsync.New(silent, "main", gitsync.WithBackoff(gitsync.Backoff{
		Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 100, MaxElapsed: 500 * time.Millisecond,
	}))
	require.NoError(t, err)
	start := time.Now()
	_, err = r.Update(context.Background(), write(nil, map[string]string{"a": "1"}))
	require.ErrorContains(t, err, "giving up on main after 1 attempts: the write did not land within 500ms (--push-timeout)")
	require.ErrorContains(t, err, silent)
	require.Less(t, time.Since(start), 5*time.Second)
}

// Over SSH too: a server that accepts the connection and never sends its banner fails a fetch
// and a write within the stall timeout.
func TestStalledSSHServerFailsFast(t *testing.T) {
	silent := strings.Replace(gitsynctest.Silent(t), "http://", "ssh://git@", 1)
	_, key := newKey(t, "")
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(knownHosts, nil, 0o600))
	r, err := gitsync.New(silent, "main", gitsync.WithAuth(gitsync.Auth{SSHKey: key, SSHKnownHosts: knownHosts}),
		gitsync.WithStallTimeout(300*time.Millisecond), gitsync.WithFailFast())
	require.NoError(t, err)
	for name, op := range map[string]func() error{
		"fetching main from": func() error { _, err := r.Snapshot(context.Background()); return err },
		"main":               func() error { _, err := r.Update(context.Background(), write(nil, nil)); return err },
	} {
		start := time.Now()
		err := op()
		require.ErrorContains(t, err, name)
		require.ErrorContains(t, err, "sent nothing for 300ms")
		require.Less(t, time.Since(start), 5*time.Second)
	}
}
