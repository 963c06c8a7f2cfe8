package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Branches fetches, in one request, the named branches and every branch under each name that
// ends in "/" (gitbroker/inventory/ for the node refs), and returns each branch's head by its
// short name. A branch that does not exist is absent; one deleted on the server since the last
// call is gone. The Repository's own branch need not be among them.
func (r *Repository) Branches(ctx context.Context, names ...string) (map[string]Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ensureStore(); err != nil {
		return nil, err
	}
	return r.branches(ctx, names...)
}

// branches is Branches into the store as it is: a write calls it between building its commit
// and pushing it, when starting the store over would drop what it built.
func (r *Repository) branches(ctx context.Context, names ...string) (map[string]Snapshot, error) {
	specs := make([]config.RefSpec, 0, len(names))
	for _, n := range names {
		src := plumbing.NewBranchReferenceName(n)
		if strings.HasSuffix(n, "/") {
			specs = append(specs, config.RefSpec(fmt.Sprintf("+%s*:%s*", src, plumbing.NewRemoteReferenceName("origin", n))))
			continue
		}
		specs = append(specs, config.RefSpec(fmt.Sprintf("+%s:%s", src, plumbing.NewRemoteReferenceName("origin", n))))
	}
	depth := r.depth
	r.oversized = nil
	if has, _ := r.hasRemoteRefs(); has {
		depth = 0
		specs = nil
		err := r.fetchMoved(ctx, names)
		if errors.Is(err, ErrTooLarge) {
			err = r.fetchIsolating(ctx, names, 0)
		}
		if err != nil {
			return nil, r.redact.wrap(fmt.Errorf("fetching from %s: %w", r.URL(), err))
		}
	}
	for len(specs) > 0 {
		err := r.fetchContext(ctx, &git.FetchOptions{
			RemoteName: "origin",
			RefSpecs:   specs,
			Depth:      depth,
			Auth:       r.auth,
			Tags:       git.NoTags,
			Force:      true,
			Prune:      true,
		})
		var noRef git.NoMatchingRefSpecError
		switch {
		case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
		case errors.Is(err, transport.ErrEmptyRemoteRepository):
			return map[string]Snapshot{}, nil
		case errors.Is(err, ErrTooLarge):
			if err := r.fetchIsolating(ctx, names, depth); err != nil {
				return nil, r.redact.wrap(fmt.Errorf("fetching from %s: %w", r.URL(), err))
			}
		case errors.As(err, &noRef):
			// A named branch that does not exist yet (a first render, a recorder that never
			// wrote): fetch the others without it, and forget any copy of it.
			missing := missingSpec(specs, err)
			if missing < 0 {
				return nil, r.redact.wrap(fmt.Errorf("fetching from %s: %w", r.URL(), err))
			}
			_ = r.repo.Storer.RemoveReference(specs[missing].Dst(""))
			specs = append(specs[:missing:missing], specs[missing+1:]...)
			continue
		default:
			return nil, r.redact.wrap(fmt.Errorf("fetching from %s: %w", r.URL(), err))
		}
		break
	}
	if r.baseline < 0 {
		r.baseline = len(r.storage.Objects)
	}
	refs, err := r.repo.References()
	if err != nil {
		return nil, err
	}
	out := map[string]Snapshot{}
	err = refs.ForEach(func(ref *plumbing.Reference) error {
		if !ref.Name().IsRemote() || ref.Type() != plumbing.HashReference {
			return nil
		}
		short := strings.TrimPrefix(ref.Name().String(), "refs/remotes/origin/")
		if !wanted(short, names) {
			return nil
		}
		c, err := r.repo.CommitObject(ref.Hash())
		if err != nil {
			return fmt.Errorf("reading commit %s of %s: %w", ref.Hash(), short, err)
		}
		s, err := snapshotOf(c, r.maxFile)
		if err != nil {
			return err
		}
		out[short] = s
		return nil
	})
	if err != nil {
		return nil, r.redact.wrap(err)
	}
	return out, nil
}

// fetchMoved is Branches once the store holds copies of the server's branches: one listing of
// the server's refs, then one request for the wanted branches that moved, naming as haves only
// the tips of them the store holds. go-git's fetch names the tip of every branch the store
// holds, so that with ten thousand node refs one moved ref cost the server ten thousand haves to
// parse and exclude (0.25 s of the git server's time per fetch at fleet-100k). The copies of
// branches gone from the server are removed.
func (r *Repository) fetchMoved(ctx context.Context, names []string) error {
	ctx = r.netContext(ctx, true)
	sess, tooLarge, err := r.session(r.maxFetch)
	if err != nil {
		return err
	}
	defer sess.Close()
	remote := map[plumbing.ReferenceName]plumbing.Hash{}
	ar, err := sess.AdvertisedReferencesContext(ctx)
	switch {
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
	case err != nil:
		return tooLarge(err)
	default:
		refs, err := ar.AllReferences()
		if err != nil {
			return err
		}
		for name, ref := range refs {
			if short, ok := strings.CutPrefix(name.String(), "refs/heads/"); ok && ref.Type() == plumbing.HashReference && wanted(short, names) {
				remote[plumbing.NewRemoteReferenceName("origin", short)] = ref.Hash()
			}
		}
	}
	local := map[plumbing.ReferenceName]plumbing.Hash{}
	iter, err := r.repo.References()
	if err != nil {
		return err
	}
	_ = iter.ForEach(func(ref *plumbing.Reference) error {
		if short, ok := strings.CutPrefix(ref.Name().String(), "refs/remotes/origin/"); ok && ref.Type() == plumbing.HashReference && wanted(short, names) {
			local[ref.Name()] = ref.Hash()
		}
		return nil
	})
	moved := map[plumbing.ReferenceName]plumbing.Hash{}
	var wants, haves []plumbing.Hash
	listed := map[plumbing.Hash]bool{}
	for name, h := range remote {
		old, had := local[name]
		if had && old == h {
			continue
		}
		moved[name] = h
		if _, err := r.repo.Storer.EncodedObject(plumbing.AnyObject, h); err != nil && !listed[h] {
			wants, listed[h] = append(wants, h), true
		}
		if !had || listed[old] {
			continue
		}
		if _, err := r.repo.Storer.EncodedObject(plumbing.AnyObject, old); err == nil {
			haves, listed[old] = append(haves, old), true
		}
	}
	if len(wants) > 0 {
		req := r.uploadRequest(ar)
		req.Wants, req.Haves = wants, haves
		if _, err := r.uploadPack(ctx, sess, req); err != nil {
			return tooLarge(err)
		}
	}
	// A branch moved back to an older commit than the store holds (the store is shallow): the
	// server, told the newer tip is here, sent nothing for it. Those tips are asked for again,
	// alone, one commit deep, as a first fetch is.
	var missing []plumbing.Hash
	for _, h := range wants {
		if _, err := r.repo.Storer.EncodedObject(plumbing.CommitObject, h); err != nil {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		if err := r.fetchShallow(ctx, sess, ar, missing); err != nil {
			return tooLarge(err)
		}
	}
	for name, h := range moved {
		if err := r.repo.Storer.SetReference(plumbing.NewHashReference(name, h)); err != nil {
			return err
		}
	}
	for name := range local {
		if _, ok := remote[name]; !ok {
			if err := r.repo.Storer.RemoveReference(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// Oversized lists the branches the last Branches call left out because what they hold is
// larger than the limits (WithLimits), with why: each was fetched on its own and refused, and
// its copy in the store, if any, stays where it was. A branch anyone can push to must not stop
// the reading of every other.
func (r *Repository) Oversized() map[string]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.oversized)
}

// fetchIsolating fetches the wanted branches after a fetch of all of them was refused as too
// large: it halves the set until each refused part is one branch, which it leaves out and
// records in r.oversized; the others are fetched.
func (r *Repository) fetchIsolating(ctx context.Context, names []string, depth int) error {
	refs, err := r.listRemote(ctx)
	if err != nil {
		return err
	}
	var shorts []string
	for _, ref := range refs {
		if short, ok := strings.CutPrefix(ref.Name().String(), "refs/heads/"); ok && ref.Type() == plumbing.HashReference && wanted(short, names) {
			if local, err := r.repo.Reference(plumbing.NewRemoteReferenceName("origin", short), true); err == nil && local.Hash() == ref.Hash() {
				continue // not moved
			}
			shorts = append(shorts, short)
		}
	}
	slices.Sort(shorts)
	var fetch func(part []string) error
	fetch = func(part []string) error {
		specs := make([]config.RefSpec, 0, len(part))
		for _, short := range part {
			specs = append(specs, config.RefSpec(fmt.Sprintf("+%s:%s", plumbing.NewBranchReferenceName(short), plumbing.NewRemoteReferenceName("origin", short))))
		}
		err := r.fetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: specs, Depth: depth, Auth: r.auth, Tags: git.NoTags, Force: true})
		switch {
		case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
			return nil
		case errors.Is(err, ErrTooLarge) && len(part) == 1:
			if r.oversized == nil {
				r.oversized = map[string]error{}
			}
			r.oversized[part[0]] = err
			return nil
		case errors.Is(err, ErrTooLarge):
			if err := fetch(part[:len(part)/2]); err != nil {
				return err
			}
			return fetch(part[len(part)/2:])
		}
		return err
	}
	if len(shorts) == 0 {
		return nil
	}
	return fetch(shorts)
}

func wanted(short string, names []string) bool {
	for _, n := range names {
		if short == n || (strings.HasSuffix(n, "/") && strings.HasPrefix(short, n) && len(short) > len(n)) {
			return true
		}
	}
	return false
}

// missingSpec finds the refspec a NoMatchingRefSpecError names.
func missingSpec(specs []config.RefSpec, err error) int {
	for i, s := range specs {
		if !s.IsWildcard() && strings.Contains(err.Error(), fmt.Sprintf("%q", s.Src())) {
			return i
		}
	}
	return -1
}

// ensureStore creates the object store on first use, or anew once it has grown too much.
func (r *Repository) ensureStore() error {
	if r.repo != nil && !r.overgrown() {
		return nil
	}
	storage := memory.NewStorage()
	// Every pack is checked before it inflates (boundedStorage): a file may be at most maxFile
	// bytes, and a fetch inflate to at most maxFetch, as it may bring at most that on the wire.
	repo, err := git.Init(&boundedStorage{Storage: storage, maxObject: r.maxFile, maxTotal: r.maxFetch}, nil)
	if err != nil {
		return fmt.Errorf("creating object store: %w", err)
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.url}}); err != nil {
		return fmt.Errorf("configuring remote: %w", err)
	}
	r.repo, r.storage, r.baseline = repo, storage, -1
	return nil
}

func (r *Repository) hasRemoteRefs() (bool, error) {
	refs, err := r.repo.References()
	if err != nil {
		return false, err
	}
	found := false
	_ = refs.ForEach(func(ref *plumbing.Reference) error {
		if ref.Name().IsRemote() {
			found = true
			return io.EOF
		}
		return nil
	})
	return found, nil
}

// TopLevel lists the names at the root of a Snapshot's tree; a folder's name ends in "/".
func TopLevel(s Snapshot) []string {
	if t, ok := s.(*treeSnapshot); ok {
		if t.root == nil {
			return nil
		}
		var out []string
		for _, e := range t.root.Entries {
			// A submodule is an entry, not a folder: owned as a folder, it would never be
			// listed, so never removed.
			if e.Mode == filemode.Dir {
				out = append(out, e.Name+"/")
			} else {
				out = append(out, e.Name)
			}
		}
		return out
	}
	files, _ := s.Files("")
	seen := map[string]bool{}
	var out []string
	for p := range files {
		top, _, dir := strings.Cut(p, "/")
		if dir {
			top += "/"
		}
		if !seen[top] {
			seen[top] = true
			out = append(out, top)
		}
	}
	return out
}

// Ref fetches one ref that need not be a branch, such as a pull request's head
// (refs/pull/7/head on GitHub, refs/merge-requests/7/head on GitLab), and returns its files. A
// name without "refs/" is a branch.
func (r *Repository) Ref(ctx context.Context, name string) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ensureStore(); err != nil {
		return nil, err
	}
	src := plumbing.ReferenceName(name)
	if !strings.HasPrefix(name, "refs/") {
		src = plumbing.NewBranchReferenceName(name)
	}
	if err := src.Validate(); err != nil {
		return nil, fmt.Errorf("invalid ref %q: %w", name, err)
	}
	dst := plumbing.ReferenceName("refs/gitbroker/fetched/" + strings.TrimPrefix(src.String(), "refs/"))
	err := r.fetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{config.RefSpec(fmt.Sprintf("+%s:%s", src, dst))},
		Depth:      r.depth,
		Auth:       r.auth,
		Tags:       git.NoTags,
		Force:      true,
	})
	var noRef git.NoMatchingRefSpecError
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.As(err, &noRef), errors.Is(err, transport.ErrEmptyRemoteRepository):
		return nil, fmt.Errorf("%w: %s at %s", ErrNoBranch, name, r.URL())
	default:
		return nil, r.redact.wrap(fmt.Errorf("fetching %s from %s: %w", name, r.URL(), err))
	}
	ref, err := r.repo.Reference(dst, true)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", name, err)
	}
	c, err := r.repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, fmt.Errorf("reading commit %s of %s: %w", ref.Hash(), name, err)
	}
	return snapshotOf(c, r.maxFile)
}

// OtherBranches lists, sorted, the branches the server has outside gitbroker/ (the writers'
// refs): what a person's branch could be called, for an error about one that does not exist.
// At most max are listed; more says how many were left out.
func (r *Repository) OtherBranches(ctx context.Context, max int) (names []string, more int, err error) {
	ctx = r.netContext(ctx, false)
	sess, _, err := r.session(0)
	if err != nil {
		return nil, 0, err
	}
	defer sess.Close()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, r.redact.wrap(err)
	}
	refs, err := ar.AllReferences()
	if err != nil {
		return nil, 0, err
	}
	for name := range refs {
		if short, ok := strings.CutPrefix(name.String(), "refs/heads/"); ok && !strings.HasPrefix(short, "gitbroker/") {
			names = append(names, short)
		}
	}
	slices.Sort(names)
	if len(names) > max {
		return names[:max], len(names) - max, nil
	}
	return names, 0, nil
}
