package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/go-logr/logr"
)

// Repository is one branch of a remote repository, fetched into memory.
// It is safe for concurrent use; updates through one Repository are
// serialized.
type Repository struct {
	url         string
	branch      plumbing.ReferenceName
	auth        transport.AuthMethod
	authSet     bool
	redact      redactor
	depth       int
	backoff     Backoff
	pushOptions map[string]string
	resetFactor int
	signer      Signer
	ownHistory  bool
	recoverFrom func(ctx context.Context) (string, error)
	// recheck is how often a writer that recovered reads recoverFrom again until it sees its
	// line accepted (WithAcceptedRecheck).
	recheck time.Duration
	// refetching: fetch is fetching the branch afresh after it moved back past the store.
	refetching bool
	// accepted is recoverFrom's answer, read by a writer that starts with nothing pushed.
	// pending: the writer has not yet seen the renderer accept the line it built from that
	// answer, and reads it again every recheck (at checked last) until it does; failures in a
	// row double the wait (recheckDelay).
	accepted struct {
		tip      string
		read     bool
		pending  bool
		checked  time.Time
		failures int
	}
	maxFetch int64
	maxFile  int64
	stall    time.Duration
	create   bool
	failFast bool
	log      logr.Logger
	// throttled counts the answers of a git host that throttles (throttle.go).
	throttled atomic.Int64
	// noV2 says the server answered in protocol v0 when asked for v2 (lsrefs.go).
	noV2  bool
	quiet atomic.Int64

	mu         sync.Mutex
	deepen     bool
	contention int
	repo       *git.Repository
	storage    *memory.Storage
	baseline   int
	// oversized are the branches the last Branches call left out as too large.
	oversized map[string]error
	// keptCompanions are the companion tips KeepCompanion accepted at the last look.
	keptCompanions map[plumbing.Hash]bool
	// pushed is the commit this Repository last pushed, or found to be its own newest, with
	// WithOwnHistory; zero until then.
	pushed plumbing.Hash
	// unreadable, with WithOwnHistory, is the branch's head when the last fetch refused it as
	// too large to read (never the writer's own): the writer then builds as if the branch were
	// gone, and its push replaces this commit.
	unreadable plumbing.Hash
}

var _ Store = &Repository{}

// Backoff bounds the retries of one Update. Delays grow exponentially from
// Initial to Max with full jitter, so writers that collided spread out.
type Backoff struct {
	Initial     time.Duration
	Max         time.Duration
	MaxAttempts int
	MaxElapsed  time.Duration
}

// DefaultBackoff suits a handful of writers on one branch.
var DefaultBackoff = Backoff{
	Initial:     100 * time.Millisecond,
	Max:         10 * time.Second,
	MaxAttempts: 30,
	MaxElapsed:  5 * time.Minute,
}

// delay returns the wait before retry n (0-based).
func (b Backoff) delay(n int) time.Duration {
	d := b.Initial
	for i := 0; i < n && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// Option configures a Repository.
type Option func(*Repository) error

// WithAuth sets the credentials. They are kept out of every error.
func WithAuth(a Auth) Option {
	return func(r *Repository) error {
		url, a, err := endpoint(r.url, a)
		if err != nil {
			return err
		}
		m, err := a.method(url)
		if err != nil {
			return err
		}
		r.url, r.auth, r.authSet = url, m, true
		r.redact.secrets = append(r.redact.secrets, a.secrets()...)
		return nil
	}
}

// WithDepth sets the depth of the first fetch into an empty object store;
// 0 fetches full history. The default, 1, is all a writer needs: it reads
// the head and commits on top of it. Later fetches bring only what is new.
func WithDepth(depth int) Option {
	return func(r *Repository) error { r.depth = depth; return nil }
}

// WithBackoff replaces DefaultBackoff.
func WithBackoff(b Backoff) Option {
	return func(r *Repository) error { r.backoff = b; return nil }
}

// WithPushOptions sends git push options (`git push -o`), for hosts that
// act on them, such as GitLab's merge_request.create.
func WithPushOptions(opts map[string]string) Option {
	return func(r *Repository) error { r.pushOptions = opts; return nil }
}

// ErrNoBranch is returned when the branch does not exist and the Repository may not create it:
// a typo in --branch must be an error, never a new branch that nothing reads.
var ErrNoBranch = errors.New("branch does not exist")

// WithCreateBranch lets Update create the branch when it does not exist, for a writer whose
// branch is its own (a rendered branch kept in step with the source).
func WithCreateBranch() Option {
	return func(r *Repository) error { r.create = true; return nil }
}

// WithFailFast makes Update give up at the first error that is not a conflict, for one-shot
// commands: a remote that is not there is reported at once. Conflicts are still recomputed.
func WithFailFast() Option {
	return func(r *Repository) error { r.failFast = true; return nil }
}

// WithLogger logs each retry after an error (conflicts are ordinary and not logged), so a
// daemon that keeps failing says why while it waits.
func WithLogger(log logr.Logger) Option {
	return func(r *Repository) error { r.log = log; return nil }
}

// WithSigner signs every commit the Repository makes.
func WithSigner(s Signer) Option {
	return func(r *Repository) error { r.signer = s; return nil }
}

// WithResetAfterGrowth starts from an empty object store once it holds
// factor times the objects it held right after its first fetch, so a
// long-running writer does not keep every commit it ever saw, while small
// updates never cost a fresh clone. The default is 3; 0 never resets.
func WithResetAfterGrowth(factor int) Option {
	return func(r *Repository) error { r.resetFactor = factor; return nil }
}

// New returns a Repository for branch at url. It does not connect until
// the first Snapshot or Update.
func New(url, branch string, opts ...Option) (*Repository, error) {
	if branch == "" {
		return nil, errors.New("no branch given")
	}
	r := &Repository{
		branch:      plumbing.NewBranchReferenceName(branch),
		depth:       1,
		backoff:     DefaultBackoff,
		resetFactor: 3,
		recheck:     DefaultAcceptedRecheck,
		maxFetch:    DefaultMaxFetchBytes,
		maxFile:     DefaultMaxFileSize,
		stall:       DefaultStallTimeout,
		log:         logr.Discard(),
	}
	r.url = url
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, r.redact.wrap(err)
		}
	}
	if !r.authSet {
		// Credentials in the URL alone still go through WithAuth, which
		// moves them out of the URL.
		if err := WithAuth(Auth{})(r); err != nil {
			return nil, r.redact.wrap(err)
		}
	}
	if _, ok := r.signer.(Verifier); r.ownHistory && !ok {
		return nil, ErrNotOwnHistory
	}
	if !r.branch.IsBranch() || strings.ContainsAny(branch, " ~^:?*[\\") {
		return nil, fmt.Errorf("invalid branch name %q", branch)
	}
	return r, nil
}

// URL returns the remote URL without credentials.
func (r *Repository) URL() string { return redactString(r.url, r.redact.secrets) }

// Branch returns the branch name.
func (r *Repository) Branch() string { return r.branch.Short() }

func (r *Repository) remoteRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName("origin", r.branch.Short())
}

// Snapshot fetches the branch and returns its head.
func (r *Repository) Snapshot(ctx context.Context) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.fetch(ctx)
	if err != nil {
		return nil, r.redact.wrap(err)
	}
	if c == nil && !r.create && r.pushed.IsZero() {
		return nil, r.noBranch()
	}
	base, err := r.ownBase(ctx, c)
	if err != nil {
		return nil, r.redact.wrap(err)
	}
	snap, err := snapshotOf(base, r.maxFile)
	if err == nil && (base != c || !r.unreadable.IsZero()) {
		snap.(*treeSnapshot).replaces = true
	}
	return snap, err
}

// maxOwnWalk bounds the search for a writer's own newest commit below commits pushed by others.
const maxOwnWalk = 1000

func (r *Repository) noBranch() error {
	return fmt.Errorf("%w: %s at %s", ErrNoBranch, r.branch.Short(), r.URL())
}

// SnapshotAt returns the files at commit. A commit older than the fetched
// depth is fetched with the branch's full history first; a commit that is
// not on the branch is an error.
func (r *Repository) SnapshotAt(ctx context.Context, commit string) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := plumbing.NewHash(commit)
	if len(commit) != 40 || h.String() != strings.ToLower(commit) {
		return nil, fmt.Errorf("%q is not a full commit hash", commit)
	}
	if r.repo == nil {
		if _, err := r.fetch(ctx); err != nil {
			return nil, r.redact.wrap(err)
		}
	}
	c, err := r.repo.CommitObject(h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		r.deepen = true // the whole history, once
		_, err = r.fetch(ctx)
		r.deepen = false
		if err != nil {
			return nil, r.redact.wrap(err)
		}
		c, err = r.repo.CommitObject(h)
	}
	if err != nil {
		return nil, fmt.Errorf("reading commit %s of %s: %w", commit, r.branch.Short(), err)
	}
	return snapshotOf(c, r.maxFile)
}

func snapshotOf(c *object.Commit, maxFile int64) (Snapshot, error) {
	if c == nil {
		return &treeSnapshot{}, nil
	}
	t, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("reading tree of %s: %w", c.Hash, err)
	}
	return &treeSnapshot{c: c, commit: c.Hash.String(), when: c.Committer.When, root: t, maxFile: maxFile}, nil
}

// fetch brings the branch head into the object store. A branch that does
// not exist yet gives a nil commit.
func (r *Repository) fetch(ctx context.Context) (*object.Commit, error) {
	if err := r.ensureStore(); err != nil {
		return nil, err
	}
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", r.branch, r.remoteRef()))
	// Only the first fetch into a store is shallow. Later fetches name what
	// the store has, so they bring only new objects; asking for a depth
	// again makes the server recompute the shallow boundary, which costs
	// time with the size of the tree (0.7 s against 18 ms for one changed
	// file on a 35,000-file branch).
	depth := r.depth
	if _, err := r.repo.Reference(r.remoteRef(), true); err == nil {
		depth = 0
	}
	if r.deepen {
		depth = math.MaxInt32
	}
	if c, quiet, err := r.quietFetch(ctx, depth); err != nil || quiet {
		return c, err
	}
	err := r.fetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{spec},
		Depth:      depth,
		Auth:       r.auth,
		Tags:       git.NoTags,
		Force:      true,
	})
	var noRef git.NoMatchingRefSpecError
	r.unreadable = plumbing.ZeroHash
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.Is(err, ErrTooLarge) && r.ownHistory:
		// Someone pushed more onto the writer's own ref than it reads: nothing of its own is
		// that large, so the writer takes the branch as gone (building on what it pushed last,
		// or starting a new line that names its accepted tip) and replaces the head it cannot
		// read, instead of being stopped by it for good.
		head, lerr := r.remoteHead(ctx)
		if lerr != nil {
			return nil, fmt.Errorf("fetching %s from %s: %w (and listing it: %v)", r.branch.Short(), r.URL(), err, lerr)
		}
		r.log.Error(err, "the writer's own branch holds a commit too large to read; replacing it", "branch", r.branch.Short(), "head", head.String())
		r.unreadable = head
		return nil, nil
	case errors.Is(err, transport.ErrEmptyRemoteRepository), errors.As(err, &noRef):
		_ = r.repo.Storer.RemoveReference(r.remoteRef())
		if r.baseline < 0 {
			r.baseline = 0
		}
		return nil, nil
	default:
		return nil, fmt.Errorf("fetching %s from %s: %w", r.branch.Short(), r.URL(), err)
	}
	if r.baseline < 0 {
		r.baseline = len(r.storage.Objects)
	}
	ref, err := r.repo.Reference(r.remoteRef(), true)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", r.branch.Short(), err)
	}
	c, err := r.repo.CommitObject(ref.Hash())
	if errors.Is(err, plumbing.ErrObjectNotFound) && !r.refetching {
		// The branch was moved back to an older commit than the (shallow) store holds: the
		// server, told the newer one is here, sent nothing. The store starts anew and the
		// branch is fetched as at first; a writer then finds its own base again, and reads the
		// tip the renderer accepted again (WithRecoverFrom).
		r.log.Info("the branch moved back past what the store holds; fetching it afresh", "branch", r.branch.Short(), "head", ref.Hash().String())
		r.repo, r.accepted.read, r.refetching = nil, false, true
		defer func() { r.refetching = false }()
		if err := r.ensureStore(); err != nil {
			return nil, err
		}
		return r.fetch(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("reading commit %s: %w", ref.Hash(), err)
	}
	return c, nil
}

// listRemote lists the server's refs, fetching nothing.
func (r *Repository) listRemote(ctx context.Context) ([]*plumbing.Reference, error) {
	remotes, err := r.repo.Remotes()
	if err != nil || len(remotes) == 0 {
		return nil, fmt.Errorf("listing the remote's branches: no remote (%v)", err)
	}
	proxy, forget := sshBounds(r.url, 0, r.stall)
	defer forget()
	refs, err := remotes[0].ListContext(r.netContext(ctx, false), &git.ListOptions{Auth: r.auth, ProxyOptions: proxy})
	if err != nil {
		return nil, fmt.Errorf("listing the remote's branches: %w", err)
	}
	return refs, nil
}

// remoteHead returns the branch's head as the server lists it, without fetching it.
func (r *Repository) remoteHead(ctx context.Context) (plumbing.Hash, error) {
	refs, err := r.listRemote(ctx)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	for _, ref := range refs {
		if ref.Name() == r.branch && ref.Type() == plumbing.HashReference {
			return ref.Hash(), nil
		}
	}
	return plumbing.ZeroHash, nil
}

// maxContention caps the contention carried between writes.
const maxContention = 8

// overgrown reports whether the object store holds much more than the
// head needs. The head's size is counted again before deciding, so a
// branch that grew (a first render) does not cost a fresh clone.
func (r *Repository) overgrown() bool {
	if r.resetFactor <= 0 || len(r.storage.Objects) <= r.resetFactor*r.baseline+1000 {
		return false
	}
	ref, err := r.repo.Reference(r.remoteRef(), true)
	if err != nil {
		return true
	}
	n, err := reachable(r.repo.Storer, ref.Hash())
	if err != nil {
		return true
	}
	r.baseline = max(r.baseline, n)
	return len(r.storage.Objects) > r.resetFactor*r.baseline+1000
}

// reachable counts the objects of a commit's tree (and the commit).
func reachable(s storer.EncodedObjectStorer, commit plumbing.Hash) (int, error) {
	c, err := object.GetCommit(s, commit)
	if err != nil {
		return 0, err
	}
	t, err := c.Tree()
	if err != nil {
		return 0, err
	}
	n := 2
	w := object.NewTreeWalker(t, true, nil)
	defer w.Close()
	for {
		_, _, err := w.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		n++
	}
}

// errConflict means the branch moved between the fetch and the push.
var errConflict = errors.New("branch moved since it was fetched")

// ErrBranchExists is returned by UpdateNewBranch when the branch it would
// create is already there.
var ErrBranchExists = errors.New("branch already exists")

var errWriteTimeout = errors.New("out of time")
