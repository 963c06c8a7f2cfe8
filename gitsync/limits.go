package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// The bounds of the writers that run on small memory limits (deploy/: the agent 128Mi, the
// recorder 256Mi), far below the renderer's: what one fetch may bring on the wire and inflated,
// and the largest file read (a larger one the server leaves out, filter.go). The agent reads its
// own inventory (at most 4 MiB) and the renderer's publication; the recorder its records.
const (
	AgentMaxFetchBytes = 24 << 20
	// AgentMaxFileSize is an input's own bound (api.MaxFileSize): a Configuration the renderer
	// accepted and published is never one the agent cannot read.
	AgentMaxFileSize      = 8 << 20
	RecorderMaxFetchBytes = 64 << 20
	RecorderMaxFileSize   = 6 << 20
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

type fetchLimitKey struct{}

// withFetchLimit makes the HTTP responses of requests made with ctx fail past limit bytes.
func withFetchLimit(ctx context.Context, limit int64) context.Context {
	return context.WithValue(ctx, fetchLimitKey{}, limit)
}

// fetchLimit is the limit withFetchLimit put on ctx, or 0.
func fetchLimit(ctx context.Context) int64 {
	limit, _ := ctx.Value(fetchLimitKey{}).(int64)
	return limit
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
