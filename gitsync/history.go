package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Commit is one commit as the server stores it: Raw is the encoded object (headers, the gpgsig
// signature among them, and the message), which is what a signature is checked against.
type Commit struct {
	Hash    string
	Parents []string
	When    time.Time
	Raw     []byte
}

// CommitOf returns one commit of branch from the object store. A commit beyond a shallow fetch's
// boundary is fetched with the branch's whole history first; one that is not in that history
// either is an error wrapping plumbing.ErrObjectNotFound.
func (r *Repository) CommitOf(ctx context.Context, branch, hash string) (*Commit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.commitOf(ctx, branch, hash, true)
}

func (r *Repository) commitOf(ctx context.Context, branch, hash string, deepen bool) (*Commit, error) {
	h := plumbing.NewHash(hash)
	if len(hash) != 40 || h.String() != strings.ToLower(hash) {
		return nil, fmt.Errorf("%q is not a full commit hash", hash)
	}
	if err := r.ensureStore(); err != nil {
		return nil, err
	}
	obj, err := r.repo.Storer.EncodedObject(plumbing.CommitObject, h)
	if errors.Is(err, plumbing.ErrObjectNotFound) && deepen {
		if err := r.deepenBranch(ctx, branch); err != nil {
			return nil, err
		}
		obj, err = r.repo.Storer.EncodedObject(plumbing.CommitObject, h)
	}
	if err != nil {
		return nil, fmt.Errorf("reading commit %s of %s: %w", hash, branch, err)
	}
	c, err := object.DecodeCommit(r.repo.Storer, obj)
	if err != nil {
		return nil, fmt.Errorf("decoding commit %s: %w", hash, err)
	}
	rd, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	raw, err := io.ReadAll(rd)
	if err != nil {
		return nil, err
	}
	out := &Commit{Hash: c.Hash.String(), When: c.Committer.When, Raw: raw}
	for _, p := range c.ParentHashes {
		out.Parents = append(out.Parents, p.String())
	}
	return out, nil
}

// deepenBranch fetches branch's whole history into the store.
func (r *Repository) deepenBranch(ctx context.Context, branch string) error {
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", plumbing.NewBranchReferenceName(branch), plumbing.NewRemoteReferenceName("origin", branch)))
	err := r.fetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{spec},
		Depth:      math.MaxInt32,
		Auth:       r.auth,
		Tags:       git.NoTags,
		Force:      true,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return r.redact.wrap(fmt.Errorf("fetching the history of %s from %s: %w", branch, r.URL(), err))
	}
	return nil
}

// IsAncestor reports whether ancestor is tip or one of its ancestors on branch, deepening the
// branch's history once if the walk reaches a shallow boundary.
func (r *Repository) IsAncestor(ctx context.Context, branch, ancestor, tip string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ancestor == tip {
		return true, nil
	}
	deepened := false
	seen := map[string]bool{tip: true}
	queue := []string{tip}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		c, err := r.commitOf(ctx, branch, h, false)
		if errors.Is(err, plumbing.ErrObjectNotFound) && !deepened {
			deepened = true
			if err := r.deepenBranch(ctx, branch); err != nil {
				return false, err
			}
			c, err = r.commitOf(ctx, branch, h, false)
		}
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			continue // the root of a shallow history the server would not deepen
		}
		if err != nil {
			return false, err
		}
		for _, p := range c.Parents {
			if p == ancestor {
				return true, nil
			}
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return false, nil
}

// FirstParents returns the commits from tip back along first parents to stop, newest first,
// stop excluded; found says whether stop was reached. At most max commits are returned.
func (r *Repository) FirstParents(ctx context.Context, branch, tip, stop string, max int) (commits []*Commit, found bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	commits, found, rooted, err := r.firstParents(ctx, branch, tip, func(h string) bool { return h == stop }, max, func() error { return r.deepenBranch(ctx, branch) })
	if err != nil {
		return nil, false, err
	}
	return commits, found || stop == "" && rooted, nil
}

// firstParents walks from tip back along first parents until stop says a commit is where to
// stop (excluded, found true), a root (rooted true, within max), or max commits; a commit
// missing from the store (a shallow boundary) is fetched with deepen once, if given.
func (r *Repository) firstParents(ctx context.Context, name, tip string, stop func(string) bool, max int, deepen func() error) (commits []*Commit, found, rooted bool, err error) {
	deepened := deepen == nil
	h := tip
	for h != "" && len(commits) < max {
		if stop(h) {
			return commits, true, false, nil
		}
		c, err := r.commitOf(ctx, name, h, false)
		if errors.Is(err, plumbing.ErrObjectNotFound) && !deepened {
			deepened = true
			if err := deepen(); err != nil {
				return nil, false, false, err
			}
			c, err = r.commitOf(ctx, name, h, false)
		}
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return commits, false, false, nil
		}
		if err != nil {
			return nil, false, false, err
		}
		commits = append(commits, c)
		h = ""
		if len(c.Parents) > 0 {
			h = c.Parents[0]
		}
	}
	return commits, false, h == "" && len(commits) < max, nil
}

// SnapshotOf returns the files at one commit of branch (deepening its history if needed).
func (r *Repository) SnapshotOf(ctx context.Context, branch, hash string) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.commitOf(ctx, branch, hash, true); err != nil {
		return nil, err
	}
	c, err := r.repo.CommitObject(plumbing.NewHash(hash))
	if err != nil {
		return nil, err
	}
	return snapshotOf(c, r.maxFile)
}

// HeadCommit returns the commit a Snapshot from a Repository shows, with its raw object, or
// nil for a snapshot of no commit or of a directory.
func HeadCommit(s Snapshot) *Commit {
	t, ok := s.(*treeSnapshot)
	if !ok || t.c == nil {
		return nil
	}
	obj := t.c
	c := &Commit{Hash: obj.Hash.String(), When: obj.Committer.When}
	for _, p := range obj.ParentHashes {
		c.Parents = append(c.Parents, p.String())
	}
	enc := &plumbing.MemoryObject{}
	if err := obj.Encode(enc); err != nil {
		return nil
	}
	rd, err := enc.Reader()
	if err != nil {
		return nil
	}
	defer rd.Close()
	c.Raw, _ = io.ReadAll(rd)
	return c
}

// RefFirstParents fetches one ref that need not be a branch (a pull request's head) with its
// history, and returns its commits from its tip back along first parents until one that stop
// reports true for (excluded), newest first; found says whether one was reached. At most max
// commits are returned.
func (r *Repository) RefFirstParents(ctx context.Context, name string, stop func(hash string) bool, max int) (commits []*Commit, found bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ensureStore(); err != nil {
		return nil, false, err
	}
	src := plumbing.ReferenceName(name)
	if !strings.HasPrefix(name, "refs/") {
		src = plumbing.NewBranchReferenceName(name)
	}
	if err := src.Validate(); err != nil {
		return nil, false, fmt.Errorf("invalid ref %q: %w", name, err)
	}
	dst := plumbing.ReferenceName("refs/gitbroker/fetched/" + strings.TrimPrefix(src.String(), "refs/"))
	err = r.fetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{config.RefSpec(fmt.Sprintf("+%s:%s", src, dst))},
		Depth:      math.MaxInt32,
		Auth:       r.auth,
		Tags:       git.NoTags,
		Force:      true,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, false, r.redact.wrap(fmt.Errorf("fetching the history of %s from %s: %w", name, r.URL(), err))
	}
	ref, err := r.repo.Reference(dst, true)
	if err != nil {
		return nil, false, fmt.Errorf("resolving %s: %w", name, err)
	}
	commits, found, _, err = r.firstParents(ctx, name, ref.Hash().String(), stop, max, nil)
	return commits, found, err
}
