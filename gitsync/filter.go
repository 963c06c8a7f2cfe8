package gitsync

import (
	"context"

	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

// A fetch asks the server to leave out every blob larger than the files a reader may read
// (git's partial clone filter blob:limit, which GitHub, GitLab, Gitea and git http-backend with
// uploadpack.allowFilter serve): a file too large to read is then never sent, so one such file
// on a branch, or in its history, cannot fail a fetch or take a writer's memory, and walking
// history brings only what can be read. Reading a blob left out fails with ErrTooLarge, which
// each reader handles as that input refused. A server that does not offer the filter sends
// every blob, and the pack's own bounds (boundedStorage) refuse one too large.

type blobLimitKey struct{}

// withBlobLimit asks the fetches made with ctx to leave out blobs of more than n bytes.
func withBlobLimit(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, blobLimitKey{}, n)
}

func blobLimit(ctx context.Context) int64 {
	n, _ := ctx.Value(blobLimitKey{}).(int64)
	return n
}

// filtering wraps a transport so its upload-pack requests carry the blob limit of their
// context, when the server offers the filter capability.
type filtering struct{ transport.Transport }

func (f filtering) NewUploadPackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.UploadPackSession, error) {
	s, err := f.Transport.NewUploadPackSession(ep, auth)
	if err != nil {
		return nil, err
	}
	return &filteringSession{UploadPackSession: s}, nil
}

type filteringSession struct {
	transport.UploadPackSession
	filter bool // the server offers the filter capability
}

func (s *filteringSession) AdvertisedReferences() (*packp.AdvRefs, error) {
	return s.AdvertisedReferencesContext(context.Background())
}

func (s *filteringSession) AdvertisedReferencesContext(ctx context.Context) (*packp.AdvRefs, error) {
	ar, err := s.UploadPackSession.AdvertisedReferencesContext(ctx)
	if err == nil && ar != nil && ar.Capabilities != nil {
		s.filter = ar.Capabilities.Supports(capability.Filter)
	}
	return ar, err
}

func (s *filteringSession) UploadPack(ctx context.Context, req *packp.UploadPackRequest) (*packp.UploadPackResponse, error) {
	if n := blobLimit(ctx); n > 0 && s.filter && req.Filter == "" {
		// blob:limit=n leaves out blobs of n bytes and more; a file of exactly the limit is
		// readable.
		req.Filter = packp.FilterBlobLimit(uint64(n)+1, packp.BlobLimitPrefixNone)
		if err := req.Capabilities.Set(capability.Filter); err != nil {
			return nil, err
		}
	}
	return s.UploadPackSession.UploadPack(ctx, req)
}

// installFiltering wraps the transports of every protocol gitsync fetches over.
func installFiltering() {
	for _, proto := range []string{"http", "https", "ssh", "file", "git"} {
		if t, ok := client.Protocols[proto]; ok && t != nil {
			if _, done := t.(filtering); !done {
				client.InstallProtocol(proto, filtering{t})
			}
		}
	}
}
