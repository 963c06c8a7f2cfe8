package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

// fetchShallow fetches wants one commit deep, naming no haves, into the store, and records
// the new shallow boundary.
func (r *Repository) fetchShallow(ctx context.Context, sess transport.UploadPackSession, ar *packp.AdvRefs, wants []plumbing.Hash) error {
	if !ar.Capabilities.Supports(capability.Shallow) {
		return fmt.Errorf("the server cannot send %d commits the branches were moved back to without their history (no shallow capability)", len(wants))
	}
	req := r.uploadRequest(ar)
	_ = req.Capabilities.Set(capability.Shallow)
	req.Wants, req.Depth = wants, packp.DepthCommits(1)
	resp, err := r.uploadPack(ctx, sess, req)
	if err != nil {
		return err
	}
	if shallows := resp.ShallowUpdate.Shallows; len(shallows) > 0 {
		old, err := r.repo.Storer.Shallow()
		if err != nil {
			return err
		}
		return r.repo.Storer.SetShallow(append(old, shallows...))
	}
	return nil
}

// uploadRequest is an upload-pack request with the server's capabilities, asking for no
// progress when it can.
func (r *Repository) uploadRequest(ar *packp.AdvRefs) *packp.UploadPackRequest {
	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	if ar.Capabilities.Supports(capability.NoProgress) {
		_ = req.Capabilities.Set(capability.NoProgress)
	}
	return req
}

// uploadPack sends req and stores the pack it brings, through the side band when there is one.
func (r *Repository) uploadPack(ctx context.Context, sess transport.UploadPackSession, req *packp.UploadPackRequest) (*packp.UploadPackResponse, error) {
	resp, err := sess.UploadPack(ctx, req)
	if err != nil {
		return nil, err
	}
	var pack io.Reader = resp
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		pack = sideband.NewDemuxer(sideband.Sideband64k, resp)
	case req.Capabilities.Supports(capability.Sideband):
		pack = sideband.NewDemuxer(sideband.Sideband, resp)
	}
	err = packfile.UpdateObjectStorage(r.repo.Storer, pack)
	if cerr := resp.Close(); err == nil {
		err = cerr
	}
	return resp, err
}

// session opens an upload-pack session with the server, through the bounded SSH dialer, which
// allows at most maxFetch bytes (0: no bound). tooLarge turns an error into ErrTooLarge when
// the bound was what ended the session.
func (r *Repository) session(maxFetch int64) (sess transport.UploadPackSession, tooLarge func(error) error, err error) {
	ep, err := transport.NewEndpoint(r.url)
	if err != nil {
		return nil, nil, redactURLError(err)
	}
	var hit func() bool
	ep.Proxy, hit = sshBounds(r.url, maxFetch, r.stall)
	tooLarge = func(err error) error {
		if hit() && err != nil && !errors.Is(err, ErrTooLarge) {
			return fmt.Errorf("%w: the server sent more than %d bytes (%v)", ErrTooLarge, maxFetch, err)
		}
		return err
	}
	cl, err := client.NewClient(ep)
	if err != nil {
		return nil, nil, err
	}
	sess, err = cl.NewUploadPackSession(ep, r.auth)
	if err != nil {
		return nil, nil, r.redact.wrap(tooLarge(err))
	}
	return sess, tooLarge, nil
}

// FetchCommit brings one commit, named by its full hash, into the store without its history,
// whether or not a branch still points at it: a render daemon restarted after its branch was
// deleted or moved back asks the server for the commit it pushed last. Servers send a commit no
// ref reaches only when they allow it (git's uploadpack.allowAnySHA1InWant); the error of one
// that does not says so. The fetch is bounded as every other (WithLimits).
func (r *Repository) FetchCommit(ctx context.Context, hash string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetchCommit(ctx, hash)
}

// fetchCommit is FetchCommit with r.mu held.
func (r *Repository) fetchCommit(ctx context.Context, hash string) error {
	h := plumbing.NewHash(hash)
	if len(hash) != 40 || h.String() != strings.ToLower(hash) {
		return fmt.Errorf("%q is not a full commit hash", hash)
	}
	if err := r.ensureStore(); err != nil {
		return err
	}
	if _, err := r.repo.Storer.EncodedObject(plumbing.CommitObject, h); err == nil {
		return nil
	}
	ctx = r.netContext(ctx, true)
	sess, tooLarge, err := r.session(r.maxFetch)
	if err != nil {
		return err
	}
	defer sess.Close()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return r.redact.wrap(tooLarge(err))
	}
	if ar == nil {
		return fmt.Errorf("%s holds nothing, so commit %s cannot be asked for", r.URL(), hash)
	}
	if err := r.fetchShallow(ctx, sess, ar, []plumbing.Hash{h}); err != nil {
		return fmt.Errorf("asking %s for commit %s, which no branch holds: %w (a server sends such a commit only with git's uploadpack.allowAnySHA1InWant, or an equivalent setting of the host)",
			r.URL(), hash, r.redact.wrap(tooLarge(err)))
	}
	if _, err := r.repo.Storer.EncodedObject(plumbing.CommitObject, h); err != nil {
		return fmt.Errorf("%s did not send commit %s: %w", r.URL(), hash, err)
	}
	return nil
}
