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

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/net/proxy"
)

// go-git's SSH transport dials through golang.org/x/net/proxy when a fetch names a proxy, and
// offers no other hook on the connection. A fetch over SSH names this scheme, whose "proxy"
// dials directly (within DialTimeout) and fails a read past the fetch's limit or one that stalls
// for StallTimeout, so SSH fetches are bounded like HTTP ones.
const limitScheme = "gitbroker-limit"

var (
	limitID   atomic.Int64
	limitHits sync.Map // id -> *atomic.Bool: the connection of that fetch hit its limit
)

func init() {
	proxy.RegisterDialerType(limitScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		limit, err := strconv.ParseInt(u.Query().Get("max"), 10, 64)
		if err != nil || limit <= 0 {
			return nil, fmt.Errorf("gitsync: bad fetch limit in %s", u.Redacted())
		}
		hit, _ := limitHits.LoadOrStore(u.Query().Get("id"), &atomic.Bool{})
		return limitDialer{limit: limit, hit: hit.(*atomic.Bool)}, nil
	})
}

// sshFetchLimit returns the proxy options that bound one fetch from an SSH remote, and a
// function that reports whether the bound was hit and forgets it; for other remotes, nothing.
func sshFetchLimit(remote string, limit int64) (transport.ProxyOptions, func() bool) {
	ep, err := transport.NewEndpoint(remote)
	if err != nil || ep.Protocol != "ssh" || limit <= 0 {
		return transport.ProxyOptions{}, func() bool { return false }
	}
	id := strconv.FormatInt(limitID.Add(1), 10)
	hit := &atomic.Bool{}
	limitHits.Store(id, hit)
	u := url.URL{Scheme: limitScheme, Host: "fetch", RawQuery: url.Values{"max": {strconv.FormatInt(limit, 10)}, "id": {id}}.Encode()}
	return transport.ProxyOptions{URL: u.String()}, func() bool {
		limitHits.Delete(id)
		return hit.Load()
	}
}

type limitDialer struct {
	limit int64
	hit   *atomic.Bool
}

func (d limitDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d limitDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := net.Dialer{Timeout: DialTimeout}
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &limitedConn{Conn: &stallConn{Conn: c, stall: StallTimeout}, limit: d.limit, hit: d.hit}, nil
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
	o.ProxyOptions, hit = sshFetchLimit(r.url, r.maxFetch)
	err := r.repo.FetchContext(withFetchLimit(ctx, r.maxFetch), o)
	if hit() && err != nil && !errors.Is(err, ErrTooLarge) {
		err = fmt.Errorf("%w: the server sent more than %d bytes (%v)", ErrTooLarge, r.maxFetch, err)
	}
	return err
}
