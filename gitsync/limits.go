package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// Bounds on what a fetch may bring: a branch crosses a trust boundary (any writer with push
// access to it can put anything there), so neither a huge pack nor a huge file is read into
// memory without limit.
const (
	// DefaultMaxFetchBytes bounds the pack one fetch receives over HTTP(S). The rendered
	// 100,000-device fleet packs to well under a tenth of it.
	DefaultMaxFetchBytes = 1 << 30
	// DefaultMaxFileSize bounds one file read from a snapshot.
	DefaultMaxFileSize = 64 << 20
)

// ErrTooLarge is returned when a fetch or a file is larger than its limit.
var ErrTooLarge = errors.New("larger than the configured limit")

// WithLimits replaces DefaultMaxFetchBytes and DefaultMaxFileSize; 0 keeps a default.
func WithLimits(maxFetchBytes, maxFileSize int64) Option {
	return func(r *Repository) error {
		if maxFetchBytes > 0 {
			r.maxFetch = maxFetchBytes
		}
		if maxFileSize > 0 {
			r.maxFile = maxFileSize
		}
		return nil
	}
}

// Deadlines on the network: a git server that accepts the connection and then says nothing (a
// hung proxy, a wedged host) must fail a command in seconds, with the URL and what was being
// done, not hang it until a cycle's timeout, or for good.
const (
	// DialTimeout bounds connecting (and the TLS handshake).
	DialTimeout = 10 * time.Second
	// StallTimeout bounds how long a connection may make no progress, reading or writing, in
	// the middle of a request: a server that counts a large pack's objects sends progress well
	// within it.
	StallTimeout = 30 * time.Second
)

// go-git's HTTP transport passes each request's context to its client, so one client, installed
// for http and https, bounds the response body of the fetches that ask for it; its connections
// fail when they stall.
func init() {
	c := githttp.NewClient(&http.Client{Transport: limitedTransport{base: stallingTransport(DialTimeout, StallTimeout)}})
	client.InstallProtocol("http", c)
	client.InstallProtocol("https", c)
}

// stallingTransport is http.DefaultTransport whose connections are dialled within dial and fail
// a read or write that makes no progress for stall.
func stallingTransport(dial, stall time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &stallConn{Conn: c, stall: stall}, nil
	}
	t.TLSHandshakeTimeout = dial
	return t
}

// stallConn sets a deadline before each read and write, so one that makes no progress for
// stall fails.
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

type fetchLimitKey struct{}

// withFetchLimit makes the HTTP responses of requests made with ctx fail past limit bytes.
func withFetchLimit(ctx context.Context, limit int64) context.Context {
	return context.WithValue(ctx, fetchLimitKey{}, limit)
}

type limitedTransport struct{ base http.RoundTripper }

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if limit, ok := req.Context().Value(fetchLimitKey{}).(int64); ok && limit > 0 {
		resp.Body = &limitedBody{rc: resp.Body, limit: limit}
	}
	return resp, nil
}

// limitedBody fails a read past its limit instead of truncating, so a cut pack is never
// mistaken for a whole one. It overshoots by at most one read buffer.
type limitedBody struct {
	rc          io.ReadCloser
	read, limit int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.read += int64(n)
	if b.read > b.limit {
		return 0, fmt.Errorf("the server sent more than %d bytes: %w", b.limit, ErrTooLarge)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
