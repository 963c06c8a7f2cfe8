package gitsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/net/proxy"
)

// go-git's SSH transport dials through golang.org/x/net/proxy when a fetch names a proxy, and
// offers no other hook on the connection. A fetch over SSH names this scheme, whose "proxy"
// dials directly (within DialTimeout) and fails a read past the fetch's limit or a read or write
// that stalls for the Repository's stall timeout, so SSH is bounded like HTTP.
const limitScheme = "gitbroker-limit"

var (
	limitID   atomic.Int64
	limitHits sync.Map // id -> *atomic.Bool: the connection of that fetch hit its limit
)

func init() {
	proxy.RegisterDialerType(limitScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		limit, err := strconv.ParseInt(u.Query().Get("max"), 10, 64)
		if err != nil || limit < 0 {
			return nil, fmt.Errorf("gitsync: bad fetch limit in %s", u.Redacted())
		}
		stall, err := time.ParseDuration(u.Query().Get("stall"))
		if err != nil || stall <= 0 {
			return nil, fmt.Errorf("gitsync: bad stall timeout in %s", u.Redacted())
		}
		hit, _ := limitHits.LoadOrStore(u.Query().Get("id"), &atomic.Bool{})
		return limitDialer{limit: limit, stall: stall, hit: hit.(*atomic.Bool)}, nil
	})
}

// sshBounds returns the proxy options that bound one operation on an SSH remote by the stall
// timeout and (unless 0) the fetch limit, and a function that reports whether the limit was hit
// and forgets it; for other remotes, nothing.
func sshBounds(remote string, limit int64, stall time.Duration) (transport.ProxyOptions, func() bool) {
	ep, err := transport.NewEndpoint(remote)
	if err != nil || ep.Protocol != "ssh" {
		return transport.ProxyOptions{}, func() bool { return false }
	}
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	id := strconv.FormatInt(limitID.Add(1), 10)
	hit := &atomic.Bool{}
	limitHits.Store(id, hit)
	q := url.Values{"max": {strconv.FormatInt(max(limit, 0), 10)}, "stall": {stall.String()}, "id": {id}}
	u := url.URL{Scheme: limitScheme, Host: "fetch", RawQuery: q.Encode()}
	return transport.ProxyOptions{URL: u.String()}, func() bool {
		limitHits.Delete(id)
		return hit.Load()
	}
}

type limitDialer struct {
	limit int64 // 0: none
	stall time.Duration
	hit   *atomic.Bool
}

func (d limitDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d limitDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := net.Dialer{Timeout: min(DialTimeout, d.stall)}
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c = &stallConn{Conn: c, stall: d.stall}
	if d.limit == 0 {
		return c, nil
	}
	return &limitedConn{Conn: c, limit: d.limit, hit: d.hit}, nil
}

// limitedConn fails reads once more than limit bytes came in, as limitedBody does for HTTP.
type limitedConn struct {
	net.Conn
	read, limit int64
	hit         *atomic.Bool
}

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	if c.read > c.limit {
		c.hit.Store(true)
		return 0, fmt.Errorf("the server sent more than %d bytes: %w", c.limit, ErrTooLarge)
	}
	return n, err
}

// fetchContext runs one go-git fetch bounded by the Repository's fetch limit, over HTTP(S) or
// SSH.
func (r *Repository) fetchContext(ctx context.Context, o *git.FetchOptions) error {
	var hit func() bool
	o.ProxyOptions, hit = sshBounds(r.url, r.maxFetch, r.stall)
	err := r.repo.FetchContext(r.netContext(ctx, true), o)
	if hit() && err != nil && !errors.Is(err, ErrTooLarge) {
		err = fmt.Errorf("%w: the server sent more than %d bytes (%v)", ErrTooLarge, r.maxFetch, err)
	}
	return err
}
