package gitsync

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// A git host throttles a repository, or a credential, past its limits (GitHub's 15 git reads a
// second and 6 pushes a minute per repository, GitLab's git operations a minute per user and
// project): it answers 429 Too Many Requests, or 503 Service Unavailable, most often with a
// Retry-After header. throttledTransport waits as the host asks and sends the request again,
// so every writer and reader of gitsync handles it alike, and nothing is lost: a push is the
// same request again (its commit, its compare-and-swap), a fetch the same fetch.
const (
	// maxThrottleWait bounds one wait, whatever Retry-After says.
	maxThrottleWait = 2 * time.Minute
	// firstThrottleWait is the first wait when the host says nothing of when to come back,
	// doubled at each answer after it up to maxThrottleWait, with jitter: many writers
	// throttled together do not come back together.
	firstThrottleWait = 2 * time.Second
	// maxThrottled is how many throttled answers one request waits through before it fails
	// with the host's answer (its caller's own backoff, or its next cycle, then tries again).
	maxThrottled = 8
)

// ThrottledError is a request the git host refused with 429 or 503 more often than a request
// waits through.
type ThrottledError struct {
	URL    string
	Status int
	Waited time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("the git host throttles %s: %d %s after waiting %s as it asked", e.URL, e.Status, http.StatusText(e.Status), e.Waited.Round(time.Second))
}

type throttleKey struct{}

// withThrottleNotice makes throttledTransport call notice before each wait a request of ctx
// makes.
func withThrottleNotice(ctx context.Context, notice func(url string, status int, wait time.Duration)) context.Context {
	return context.WithValue(ctx, throttleKey{}, notice)
}

// throttledTransport sends a request again, after the wait the host asks for, while the host
// answers that it throttles.
type throttledTransport struct{ base http.RoundTripper }

func (t throttledTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var waited time.Duration
	for n := 0; ; n++ {
		resp, err := t.base.RoundTrip(req)
		if err != nil || !throttles(resp) || req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
			return resp, err
		}
		url := req.URL.Redacted()
		wait, asked := retryAfter(resp.Header.Get("Retry-After"), time.Now())
		if !asked {
			wait = min(firstThrottleWait<<n, maxThrottleWait)
			wait = wait/2 + rand.N(wait/2+1) // jitter
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if n+1 >= maxThrottled {
			return nil, &ThrottledError{URL: url, Status: resp.StatusCode, Waited: waited}
		}
		if notice, ok := ctx.Value(throttleKey{}).(func(string, int, time.Duration)); ok {
			notice(url, resp.StatusCode, wait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("waiting %s as the git host asked (%d %s): %w", wait.Round(time.Second), resp.StatusCode, http.StatusText(resp.StatusCode), ctx.Err())
		case <-timer.C:
		}
		waited += wait
		again := req.Clone(ctx)
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			again.Body = body
		}
		req = again
	}
}

// throttles reports whether resp says the host throttles: 429, or 503 with a Retry-After.
func throttles(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
}

// retryAfter reads a Retry-After header (seconds, or an HTTP date) as a wait from now, bounded
// by maxThrottleWait; false when it says nothing usable.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, maxThrottleWait), true
	}
	if at, err := http.ParseTime(v); err == nil {
		return min(max(at.Sub(now), 0), maxThrottleWait), true
	}
	return 0, false
}

// throttledBy logs a throttled answer and counts it.
func (r *Repository) throttledBy(url string, status int, wait time.Duration) {
	r.throttled.Add(1)
	r.log.Info("the git host throttles: waiting as it asks before sending the request again", "branch", r.branch.Short(),
		"url", redactString(url, r.redact.secrets), "status", status, "wait", wait.Round(time.Millisecond).String())
}

// Throttled counts the times a git host answered one of r's requests that it throttles (429,
// or 503 with Retry-After); each was sent again after the wait the host asked for.
func (r *Repository) Throttled() int64 { return r.throttled.Load() }
