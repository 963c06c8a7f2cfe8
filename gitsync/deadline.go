package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// Deadlines on the network: a git server that accepts the connection and then says nothing (a
// hung proxy, a wedged host) must fail a command in seconds, with the URL and what was being
// done, not hang it until a cycle's timeout, or for good.
const (
	// DialTimeout bounds connecting (and the TLS handshake), within the stall timeout.
	DialTimeout = 10 * time.Second
	// DefaultStallTimeout bounds how long a connection may make no progress (connecting,
	// sending or waiting for the server) in the middle of a request. git's own servers send a
	// keepalive every 5 seconds while they prepare a pack or check a pushed one
	// (uploadpack.keepAlive, receive.keepAlive), which pushes ask for by taking the side band.
	DefaultStallTimeout = 15 * time.Second
)

// WithStallTimeout replaces DefaultStallTimeout for the Repository's requests; 0 keeps it.
func WithStallTimeout(d time.Duration) Option {
	return func(r *Repository) error {
		if d > 0 {
			r.stall = d
		}
		return nil
	}
}

type stallKey struct{}

// withStall makes the requests made with ctx fail once they make no progress for d.
func withStall(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, stallKey{}, d)
}

func stallOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(stallKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return DefaultStallTimeout
}

// netContext is ctx for one network operation of r: bounded by its stall timeout, and, for a
// fetch, by its fetch limit.
func (r *Repository) netContext(ctx context.Context, fetch bool) context.Context {
	ctx = withThrottleNotice(withStall(ctx, r.stall), r.throttledBy)
	if fetch {
		ctx = withBlobLimit(withFetchLimit(ctx, r.maxFetch), r.maxFile)
	}
	return ctx
}

// go-git's HTTP transport passes each request's context to its client, so one client, installed
// for http and https, bounds each request by the stall timeout and the fetch limit its context
// carries.
func init() {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = DialTimeout
	httpClient = &http.Client{Transport: throttledTransport{base: watchedTransport{base: t}}}
	c := githttp.NewClient(httpClient)
	client.InstallProtocol("http", c)
	client.InstallProtocol("https", c)
	installFiltering()
}

// watchedTransport fails a request, through its context, once it has made no progress for its
// stall timeout: not connected, the server taking none of the request, or sending nothing of
// the response. Time the caller spends between reads of the response does not count.
type watchedTransport struct{ base http.RoundTripper }

func (t watchedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	w := watch(req.Context(), stallOf(req.Context()), req.URL.Host)
	req = req.WithContext(httptrace.WithClientTrace(w.ctx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { w.phase.Store(phaseSending); w.progress() },
		WroteRequest: func(httptrace.WroteRequestInfo) { w.phase.Store(phaseWaiting); w.progress() },
	}))
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &sentBody{ReadCloser: req.Body, w: w}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		w.done()
		return nil, w.cause(err)
	}
	w.pause()
	resp.Body = &watchedBody{rc: resp.Body, w: w}
	if limit := fetchLimit(req.Context()); limit > 0 {
		resp.Body = &limitedBody{rc: resp.Body, limit: limit}
	}
	return resp, nil
}

const (
	phaseConnecting int32 = iota
	phaseSending
	phaseWaiting
)

// watchdog cancels a request's context when its timer, reset on every sign of progress, runs
// out.
type watchdog struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	stall  time.Duration
	phase  atomic.Int32
}

func watch(parent context.Context, stall time.Duration, addr string) *watchdog {
	w := &watchdog{stall: stall}
	w.ctx, w.cancel = context.WithCancelCause(parent)
	w.timer = time.AfterFunc(stall, func() {
		what := [...]string{"accepted no connection", "took nothing", "sent nothing"}[w.phase.Load()]
		w.cancel(&StalledError{Addr: addr, What: what, After: stall})
	})
	return w
}

func (w *watchdog) progress() { w.timer.Reset(w.stall) }
func (w *watchdog) pause()    { w.timer.Stop() }
func (w *watchdog) done()     { w.timer.Stop(); w.cancel(context.Canceled) }

// cause returns the StalledError behind err when the watchdog fired, else err.
func (w *watchdog) cause(err error) error {
	var stalled *StalledError
	if err != nil && errors.As(context.Cause(w.ctx), &stalled) && !errors.As(err, &stalled) {
		return stalled
	}
	return err
}

// sentBody is a request body whose every read, the transport's asking for more, is progress.
type sentBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *sentBody) Read(p []byte) (int, error) {
	b.w.progress()
	return b.ReadCloser.Read(p)
}

// watchedBody is a response body whose reads count against the stall timeout while they wait.
type watchedBody struct {
	rc io.ReadCloser
	w  *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.w.progress()
	n, err := b.rc.Read(p)
	b.w.pause()
	if err != nil && err != io.EOF {
		err = b.w.cause(err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.w.done()
	return b.rc.Close()
}

// stallConn sets a deadline before each read and write, so one that makes no progress for
// stall fails: the SSH transport's connections, which carry no context.
type stallConn struct {
	net.Conn
	stall time.Duration
}

func (c *stallConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.stall)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	return n, c.stalled(err, "sent nothing")
}

func (c *stallConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.stall)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	return n, c.stalled(err, "took nothing")
}

func (c *stallConn) stalled(err error, what string) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &StalledError{Addr: c.Conn.RemoteAddr().String(), What: what, After: c.stall, err: err}
	}
	return err
}

// StalledError is a connection to a git server that made no progress for too long.
type StalledError struct {
	Addr  string
	What  string
	After time.Duration
	err   error
}

func (e *StalledError) Error() string {
	return fmt.Sprintf("the server at %s %s for %s", e.Addr, e.What, e.After)
}
func (e *StalledError) Unwrap() error   { return e.err }
func (e *StalledError) Timeout() bool   { return true }
func (e *StalledError) Temporary() bool { return true }
