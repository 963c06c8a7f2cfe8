package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
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

// Verifier is a Signer that also tells its own commits: Verifies reports whether a raw commit
// object (Commit.Raw) carries a signature this Signer made.
type Verifier interface {
	Signer
	Verifies(raw []byte) bool
}

// ErrNotOwnHistory is returned by WithOwnHistory without a Signer that is a Verifier.
var ErrNotOwnHistory = errors.New("a writer that keeps its own history needs a signer that verifies its own commits")

// WithOwnHistory makes the Repository read and build only on what its writer itself signed: the
// branch's newest commit its Signer (a Verifier) signed, along first parents, is what Snapshot
// returns and Update builds on; whatever someone else pushed on top of it is dropped by the
// next Update, which moves the branch from the head it found (a compare-and-swap, as always)
// to the writer's new commit, or back to its own commit when it has nothing to change. A
// writer never signs what someone else planted on its ref. Once the Repository has pushed, a
// branch that no longer descends from that commit (moved back to an older one, replaced, or
// deleted) is built on that commit again, so the writer recovers by itself and nothing older
// of its own is ever made current again.
func WithOwnHistory() Option {
	return func(r *Repository) error { r.ownHistory = true; return nil }
}

// TrailerReplaces, on the first commit of a writer's new line (its ref was deleted, or holds
// none of its commits, and it has none in memory), names the writer's commit the renderer
// accepted last: the renderer takes the new line in its place, and only that one, so an old
// commit of the writer stays refused.
const TrailerReplaces = "Gitbroker-Replaces"

// WithRecoverFrom, with WithOwnHistory, tells a writer that must start a new line where to
// find the commit of its own the renderer accepted last (its shard of the accepted tips on
// gitbroker/accepted/<shard> says it, at a commit the renderer signed): the new line's first
// commit names it in TrailerReplaces. An error or "" starts the line without it, and a
// stale answer (the shard's branch moved back to an older commit) names a tip the renderer
// no longer holds; it refuses either. So a writer that read it keeps reading it again
// (WithAcceptedRecheck) until the renderer's accepted tip is on the writer's line, and starts
// a new line naming that tip whenever it reads one it did not build from: it recovers by
// itself once the renderer has put its branch back.
func WithRecoverFrom(f func(ctx context.Context) (string, error)) Option {
	return func(r *Repository) error { r.recoverFrom = f; return nil }
}

// DefaultAcceptedRecheck is how often a writer that recovered reads the accepted tip again
// until it sees its line accepted: each read fetches one small shard branch. A read that fails
// (the head not the renderer's, or larger than the writer's limits) doubles the wait,
// up to maxAcceptedRecheck, so a writer that cannot read it keeps trying at a bounded cost.
const DefaultAcceptedRecheck = 2 * time.Minute

// maxAcceptedRecheck bounds the wait between failed reads of the accepted tip.
const maxAcceptedRecheck = time.Hour

// WithAcceptedRecheck sets how often a recovering writer reads WithRecoverFrom's tip again
// (DefaultAcceptedRecheck); 0 reads it at every Update.
func WithAcceptedRecheck(d time.Duration) Option {
	return func(r *Repository) error {
		if d < 0 {
			return fmt.Errorf("negative accepted-tip recheck interval %s", d)
		}
		r.recheck = d
		return nil
	}
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

// Replaces reports whether a Snapshot a WithOwnHistory Repository returned is not the branch's
// head (someone else pushed on top of the writer's own commit, or the branch moved away from
// it): the writer's next Update puts the branch back even when it has nothing to change.
func Replaces(s Snapshot) bool {
	t, ok := s.(*treeSnapshot)
	return ok && t.replaces
}

// maxOwnWalk bounds the search for a writer's own newest commit below commits pushed by others.
const maxOwnWalk = 1000

// ownBase returns what a writer with WithOwnHistory reads and builds on, given the branch's
// head (nil when the branch is gone): the head itself without WithOwnHistory.
func (r *Repository) ownBase(ctx context.Context, head *object.Commit) (*object.Commit, error) {
	if !r.ownHistory {
		return head, nil
	}
	own := func(c *object.Commit) bool {
		k, err := r.commitOf(ctx, r.branch.Short(), c.Hash.String(), false)
		return err == nil && r.signer.(Verifier).Verifies(k.Raw)
	}
	var pushed *object.Commit
	if !r.pushed.IsZero() {
		c, err := r.repo.CommitObject(r.pushed)
		if err == nil {
			pushed = c
		}
	}
	var found *object.Commit
	for c, n := head, 0; c != nil && n < maxOwnWalk; n++ {
		if c.Hash == r.pushed || own(c) {
			found = c
			break
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		k, err := r.commitOf(ctx, r.branch.Short(), c.ParentHashes[0].String(), true)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		if c, err = r.repo.CommitObject(plumbing.NewHash(k.Hash)); err != nil {
			return nil, err
		}
	}
	if pushed != nil && (found == nil || found.Hash != pushed.Hash && !r.descends(ctx, found, pushed.Hash, false)) {
		found = pushed // moved back, replaced or deleted: build on what this writer pushed
	}
	if pushed == nil && found != nil && r.recoverFrom != nil {
		// A writer that starts anew knows nothing it pushed: its own commit on the ref may be an
		// older one the ref was moved back to. Building on that would never be accepted again,
		// so it starts from what the renderer accepted last: on its own commit when that
		// descends from it, else a new line that names it (TrailerReplaces).
		if !r.accepted.read {
			// Unreadable (the rendered branch too large for this writer's limits, say), the
			// writer builds on its own commit as before: the renderer still refuses a line that
			// does not descend from what it accepted, so nothing unverified is taken.
			r.readAccepted(ctx, "building on the writer's own commit on the branch")
		}
		if a := r.accepted.tip; a != "" && a != found.Hash.String() && !r.descends(ctx, found, plumbing.NewHash(a), true) {
			r.log.Info("the branch holds an own commit that does not descend from the one the renderer accepted last (moved back?): starting a new line that replaces it",
				"branch", r.branch.Short(), "found", found.Hash.String(), "accepted", a)
			found = nil
		}
	} else if pushed != nil && found != nil && r.accepted.pending && found.Hash.String() != r.accepted.tip && time.Since(r.accepted.checked) >= r.recheckDelay() {
		found = r.recheckAccepted(ctx, found)
	}
	if found != nil {
		r.pushed = found.Hash
	} else {
		r.pushed = plumbing.ZeroHash
	}
	return found, nil
}

// readAccepted reads the tip the renderer accepted last (WithRecoverFrom) and keeps it as what
// the writer's line builds from, pending until the writer sees the renderer accept that line.
// onErr says what the writer does when it cannot be read.
func (r *Repository) readAccepted(ctx context.Context, onErr string) {
	tip, err := r.recoverFrom(ctx)
	if err != nil {
		r.log.Info("cannot read the tip the renderer accepted last; "+onErr, "branch", r.branch.Short(), "error", r.redact.wrap(err).Error())
	}
	r.accepted.tip, r.accepted.read = tip, true
	r.accepted.pending, r.accepted.checked = true, time.Now()
}

// recheckAccepted reads the accepted tip again for a writer whose line the renderer has not
// been seen to accept, at its own newest commit found, which it pushed since it read the tip
// it built from (until then there is nothing of its own to accept, and nothing is read). The
// line is accepted once the tip read is a commit of the line other than the one it was built
// from; a tip off the line means the renderer will refuse the line for good (it was built from
// a rendered branch moved back to an older render, or unreadable then), so the writer starts a
// new one that names the tip read now (nil is returned). An error, or the tip it was built from,
// changes nothing: the renderer has not rendered the line yet.
func (r *Repository) recheckAccepted(ctx context.Context, found *object.Commit) *object.Commit {
	tip, err := r.recoverFrom(ctx)
	r.accepted.checked = time.Now()
	if err != nil {
		r.accepted.failures++
	} else {
		r.accepted.failures = 0
	}
	switch {
	case err != nil:
		r.log.Info("cannot read the tip the renderer accepted last; reading it again later", "branch", r.branch.Short(), "after", r.recheckDelay().String(), "error", r.redact.wrap(err).Error())
	case tip == "" || tip == r.accepted.tip:
	case tip == found.Hash.String() || r.descends(ctx, found, plumbing.NewHash(tip), true):
		r.accepted.pending = false
	default:
		r.log.Info("the renderer accepted a commit this writer's line does not build on: starting a new line that replaces it",
			"branch", r.branch.Short(), "line", found.Hash.String(), "accepted", tip, "built from", r.accepted.tip)
		r.accepted.tip = tip
		return nil
	}
	return found
}

// recheckDelay is how long a recovering writer waits before it reads the accepted tip again:
// the recheck interval, doubled for every failed read in a row, at most maxAcceptedRecheck.
func (r *Repository) recheckDelay() time.Duration {
	d := r.recheck
	for i := 0; i < r.accepted.failures && d < maxAcceptedRecheck; i++ {
		d *= 2
	}
	return min(d, maxAcceptedRecheck)
}

// Restore puts a WithOwnHistory writer's branch back on its own commit when someone else pushed
// on top of it or moved it (the same compare-and-swap an Update makes), and does nothing
// otherwise (ErrNoChanges): a writer with nothing to write calls it now and then, so its ref
// is repaired within an interval even when it has nothing new.
func (r *Repository) Restore(ctx context.Context) (Result, error) {
	if !r.ownHistory {
		return Result{}, ErrNoChanges
	}
	return r.Update(ctx, nil)
}

// descends reports whether c is ancestor or has it among its ancestors; with deepen, history
// older than the store holds is fetched when the walk needs it.
func (r *Repository) descends(ctx context.Context, c *object.Commit, ancestor plumbing.Hash, deepen bool) bool {
	seen := map[plumbing.Hash]bool{}
	queue := []plumbing.Hash{c.Hash}
	for len(queue) > 0 && len(seen) < 100*maxOwnWalk {
		h := queue[0]
		queue = queue[1:]
		if h == ancestor {
			return true
		}
		k, err := r.commitOf(ctx, r.branch.Short(), h.String(), deepen)
		if err != nil {
			continue
		}
		for _, p := range k.Parents {
			ph := plumbing.NewHash(p)
			if !seen[ph] {
				seen[ph] = true
				queue = append(queue, ph)
			}
		}
	}
	return false
}

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

// Update implements Store. It retries until the change lands, the writer
// has nothing to change (ErrNoChanges), a permanent error occurs or the
// backoff is exhausted; the last error is returned then, and nothing
// partial is ever on the branch.
func (r *Repository) Update(ctx context.Context, fn UpdateFunc) (Result, error) {
	return r.update(ctx, fn, func(base *object.Commit, _ Snapshot) (plumbing.ReferenceName, plumbing.Hash, error) {
		if base == nil {
			return r.branch, r.unreadable, nil
		}
		return r.branch, base.Hash, nil
	})
}

// ErrBranchExists is returned by UpdateNewBranch when the branch it would
// create is already there.
var ErrBranchExists = errors.New("branch already exists")

// UpdateNewBranch writes fn's change on top of the branch head, but pushes
// it to a new branch named by name instead: a review branch. The branch
// is created only if it does not exist; if it does, nothing is pushed and
// the error is ErrBranchExists.
func (r *Repository) UpdateNewBranch(ctx context.Context, name func(head Snapshot) string, fn UpdateFunc) (Result, error) {
	return r.update(ctx, fn, func(_ *object.Commit, head Snapshot) (plumbing.ReferenceName, plumbing.Hash, error) {
		ref := plumbing.NewBranchReferenceName(name(head))
		if err := ref.Validate(); err != nil || ref == r.branch {
			return "", plumbing.ZeroHash, fmt.Errorf("invalid new branch name %q", ref.Short())
		}
		return ref, plumbing.ZeroHash, nil
	})
}

// destination says which ref a write goes to and the value it must have
// there before (zero: it must not exist).
type destination func(base *object.Commit, head Snapshot) (plumbing.ReferenceName, plumbing.Hash, error)

func (r *Repository) update(ctx context.Context, fn UpdateFunc, dest destination) (Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := time.Now()
	var res Result
	finish := func(err error) (Result, error) {
		res.Elapsed = time.Since(start)
		// Contention carries over into the next write and decays by one
		// per write without conflicts: a writer that keeps landing backs
		// off like the ones it keeps beating, so none of them starves.
		switch {
		case res.Conflicts > 0:
			r.contention = min(r.contention+res.Conflicts, maxContention)
		case r.contention > 0:
			r.contention--
		}
		return res, r.redact.wrap(err)
	}
	// The write as a whole lands within MaxElapsed (--push-timeout), a stalled attempt included.
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if r.backoff.MaxElapsed > 0 {
		wctx, cancel = context.WithDeadlineCause(ctx, start.Add(r.backoff.MaxElapsed), errWriteTimeout)
	}
	defer cancel()
	// A writer that met contention on its last write waits before its
	// first attempt too, so writers that keep landing leave room for
	// the ones still backing off.
	if r.contention > 0 {
		if err := sleep(wctx, r.backoff.delay(r.contention-1)); err != nil {
			return finish(err)
		}
	}
	outOfTime := func(attempts int, err error) (Result, error) {
		return finish(fmt.Errorf("giving up on %s after %d attempts: %w (last error: %v)",
			r.branch.Short(), attempts, &writeTimeoutError{r.backoff.MaxElapsed}, err))
	}
	for n := 0; ; n++ {
		err := r.attempt(wctx, fn, dest, &res)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), errWriteTimeout) {
			return outOfTime(n+1, err)
		}
		if err == nil || errors.Is(err, ErrNoChanges) || !retryable(ctx, err) {
			return finish(err)
		}
		if r.failFast && !errors.Is(err, errConflict) {
			return finish(err)
		}
		if n+1 >= r.backoff.MaxAttempts || time.Since(start) >= r.backoff.MaxElapsed {
			return finish(fmt.Errorf("giving up on %s after %d attempts in %s: %w",
				r.branch.Short(), n+1, time.Since(start).Round(time.Millisecond), err))
		}
		wait := r.backoff.delay(max(n, r.contention))
		if errors.Is(err, errConflict) {
			res.Conflicts++
		} else {
			res.Retries++
			r.log.Info("write failed; retrying", "branch", r.branch.Short(), "attempt", n+1, "wait", wait.Round(time.Millisecond).String(), "error", r.redact.wrap(err).Error())
		}
		if serr := sleep(wctx, wait); serr != nil {
			if ctx.Err() == nil {
				return outOfTime(n+1, err)
			}
			return finish(fmt.Errorf("%w (last error: %v)", serr, err))
		}
	}
}

var errWriteTimeout = errors.New("out of time")

// writeTimeoutError is a write that did not land within its time (Backoff.MaxElapsed).
type writeTimeoutError struct{ after time.Duration }

func (e *writeTimeoutError) Error() string {
	return fmt.Sprintf("the write did not land within %s (--%s)", e.after, FlagPushTimeout)
}
func (e *writeTimeoutError) Timeout() bool { return true }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting to retry: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// attempt is one fetch, recompute, commit and push.
func (r *Repository) attempt(ctx context.Context, fn UpdateFunc, dest destination, res *Result) error {
	head, err := r.fetch(ctx)
	if err != nil {
		return err
	}
	if head == nil && !r.create && r.pushed.IsZero() {
		return r.noBranch()
	}
	base, err := r.ownBase(ctx, head)
	if err != nil {
		return err
	}
	snap, err := snapshotOf(base, r.maxFile)
	if err != nil {
		return err
	}
	res.Base = snap.Commit()
	var change *Change
	if fn != nil {
		if change, err = fn(ctx, snap); err != nil {
			return &writerError{err}
		}
	}
	if base == nil && r.ownHistory && r.recoverFrom != nil && change != nil {
		// A new line of the writer's own: it names what it replaces.
		if !r.accepted.read {
			r.readAccepted(ctx, "starting a new line of commits without naming the accepted one")
		}
		if accepted := r.accepted.tip; accepted != "" {
			change.Trailers = append(slices.Clip(change.Trailers), Trailer{Key: TrailerReplaces, Value: accepted})
		}
	}
	b := &commitBuilder{s: r.repo.Storer, signer: r.signer}
	var commit plumbing.Hash
	var objects []plumbing.Hash
	if change != nil {
		commit, objects, err = b.build(base, change, snap.(*treeSnapshot).known)
	} else {
		err = ErrNoChanges // Restore: nothing to write, only the branch to put back
	}
	ref, old, derr := dest(head, snap)
	if errors.Is(err, ErrNoChanges) && base != nil && base != head && ref == r.branch && derr == nil {
		// Nothing to change on the writer's own commit, but the branch is not there: move it
		// back (what someone else pushed on top is dropped).
		commit, objects, err = base.Hash, nil, nil
		res.Replaced = hashString(head)
	} else if err == nil && base != head {
		res.Replaced = hashString(head)
	}
	if head == nil && !r.unreadable.IsZero() && (err == nil || res.Replaced != "") {
		res.Replaced = r.unreadable.String()
	}
	companions := change != nil && len(change.CompanionPrefixes) > 0 && ref == r.branch && derr == nil
	var tips map[plumbing.ReferenceName]plumbing.Hash
	if companions && errors.Is(err, ErrNoChanges) {
		// Nothing to push unless a companion is out of order: read their tips. (A push reads
		// them from the server's advertisement, and fetches only tips the store lacks.)
		tips = r.companionTips(ctx, change.CompanionPrefixes)
	}
	switch {
	case errors.Is(err, ErrNoChanges) && base != nil && companions:
		// Nothing to commit, but the companions may still need to move to the head: the first
		// render that has them, or a tip someone else pushed there.
		if moves, deletes, serr := r.staleCompanions(tips, base.Hash, change); tips != nil && serr == nil && len(moves)+len(deletes) == 0 {
			return ErrNoChanges
		}
		moved, err := r.push(ctx, ref, old, base.Hash, nil, change)
		res.CompanionsMoved, res.CompanionBranches = len(moved), moved
		if err != nil {
			return err
		}
		return ErrNoChanges
	case errors.Is(err, ErrNoChanges):
		return err
	case err != nil:
		return &writerError{fmt.Errorf("building commit: %w", err)}
	case derr != nil:
		return &writerError{derr}
	}
	res.Attempts++
	if ref != r.branch {
		change = nil
	}
	moved, err := r.push(ctx, ref, old, commit, objects, change)
	if err != nil {
		return err
	}
	res.Commit, res.CompanionsMoved, res.CompanionBranches = commit.String(), len(moved), moved
	if r.ownHistory && ref == r.branch {
		r.pushed = commit
	}
	if ref == r.branch {
		if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.remoteRef(), commit)); err != nil {
			return &writerError{fmt.Errorf("recording pushed head: %w", err)}
		}
	}
	return nil
}

func hashString(c *object.Commit) string {
	if c == nil {
		return ""
	}
	return c.Hash.String()
}

// writerError is an error of the writer or of the change it returned;
// trying again cannot help.
type writerError struct{ err error }

func (e *writerError) Error() string { return e.err.Error() }
func (e *writerError) Unwrap() error { return e.err }

// push sends objects and moves ref from old to commit, only if ref is
// still at old: a compare-and-swap on the server. A zero old means ref
// must not exist yet; commit equal to old leaves ref where it is. The
// companions of c move in the same atomic push, each also only from the
// value the server advertised. It returns how many companions it moved.
func (r *Repository) push(ctx context.Context, ref plumbing.ReferenceName, old, commit plumbing.Hash, objects []plumbing.Hash, c *Change) ([]string, error) {
	ep, err := transport.NewEndpoint(r.url)
	if err != nil {
		return nil, &writerError{fmt.Errorf("parsing git URL: %w", redactURLError(err))}
	}
	var forget func() bool
	ep.Proxy, forget = sshBounds(r.url, 0, r.stall)
	defer forget()
	ctx = r.netContext(ctx, false)
	cl, err := client.NewClient(ep)
	if err != nil {
		return nil, &writerError{err}
	}
	sess, err := cl.NewReceivePackSession(ep, r.auth)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", r.URL(), err)
	}
	defer sess.Close()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return nil, fmt.Errorf("pushing to %s: %w", r.URL(), err)
	}
	advertised := map[plumbing.ReferenceName]plumbing.Hash{}
	if ar != nil {
		refs, err := ar.AllReferences()
		if err != nil {
			return nil, fmt.Errorf("pushing to %s: %w", r.URL(), err)
		}
		for name, ref := range refs {
			if ref.Type() == plumbing.HashReference {
				advertised[name] = ref.Hash()
			}
		}
	}
	if advertised[ref] != old {
		if ref != r.branch {
			return nil, &writerError{fmt.Errorf("%s: %w", ref.Short(), ErrBranchExists)}
		}
		return nil, errConflict
	}
	caps := capability.NewList()
	if ar != nil {
		caps = ar.Capabilities
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(caps)
	// On the side band the server sends keepalives while it checks the pack
	// (receive.keepAlive), so a long check is not taken for a stall.
	if caps.Supports(capability.Sideband64k) {
		_ = req.Capabilities.Set(capability.Sideband64k)
		req.Progress = io.Discard
	}
	if len(r.pushOptions) > 0 {
		if !caps.Supports(capability.PushOptions) {
			return nil, &writerError{fmt.Errorf("pushing to %s: the server does not accept push options", r.URL())}
		}
		_ = req.Capabilities.Set(capability.PushOptions)
		for _, k := range slices.Sorted(maps.Keys(r.pushOptions)) {
			req.Options = append(req.Options, &packp.Option{Key: k, Value: r.pushOptions[k]})
		}
	}
	if commit != old {
		req.Commands = append(req.Commands, &packp.Command{Name: ref, Old: old, New: commit})
	}
	if c != nil && len(c.CompanionPrefixes) > 0 && r.lacksCompanionTips(advertised, c) {
		r.companionTips(ctx, c.CompanionPrefixes) // into the store, for keepCompanion
	}
	companions, more, err := r.companionCommands(advertised, commit, c)
	if err != nil {
		return nil, &writerError{err}
	}
	req.Commands = append(req.Commands, companions...)
	objects = append(objects, more...)
	if blockers := refBlockers(advertised, req.Commands); len(blockers) > 0 {
		// A ref whose name is a folder of one this push writes, or the other way round
		// (gitbroker/accepted beside gitbroker/accepted/00): git refuses to create ours while it
		// is there, in the same transaction too, so it is deleted first and the push made again.
		// No ref of that name can be anyone's: it only exists to block this writer.
		if err := r.deleteRefs(ctx, sess, blockers, advertised); err != nil {
			return nil, err
		}
		return nil, errConflict
	}
	switch {
	case len(req.Commands) == 0:
		return nil, nil
	case len(req.Commands) > 1:
		if !caps.Supports(capability.Atomic) {
			return nil, &writerError{fmt.Errorf("pushing to %s: the server does not accept atomic pushes, which companion branches need", r.URL())}
		}
		_ = req.Capabilities.Set(capability.Atomic)
	}
	done := make(chan error, 1)
	// A push that only deletes sends no pack (git's receive-pack expects none then).
	if slices.ContainsFunc(req.Commands, func(c *packp.Command) bool { return c.New != plumbing.ZeroHash }) {
		rd, wr := io.Pipe()
		req.Packfile = rd
		go func() {
			e := packfile.NewEncoder(wr, r.repo.Storer, !caps.Supports(capability.OFSDelta))
			if _, err := e.Encode(objects, 10); err != nil {
				done <- wr.CloseWithError(err)
				return
			}
			done <- wr.Close()
		}()
		defer rd.Close()
	} else {
		done <- nil
	}
	rs, err := sess.ReceivePack(ctx, req)
	if err != nil && req.Packfile != nil {
		_ = req.Packfile.Close()
	}
	if perr := <-done; perr != nil && err == nil {
		return nil, fmt.Errorf("encoding pack: %w", perr)
	}
	// The server's report comes back with an error when it refused the
	// update; read the report before the error.
	if rs != nil {
		if rs.UnpackStatus != "" && rs.UnpackStatus != "ok" {
			return nil, fmt.Errorf("pushing to %s: server could not unpack: %s", r.URL(), rs.UnpackStatus)
		}
		for _, cs := range rs.CommandStatuses {
			if cs.Status == "ok" {
				continue
			}
			if movedRef(cs.Status) {
				return nil, errConflict
			}
			// An atomic push refuses every other command for the one that failed; report that one.
			if atomicFailure(cs.Status) && len(rs.CommandStatuses) > 1 {
				continue
			}
			return nil, &writerError{fmt.Errorf("pushing to %s: the server refused %s: %s", r.URL(), cs.ReferenceName.Short(), cs.Status)}
		}
	}
	if rs != nil && len(rs.CommandStatuses) > 1 && !slices.ContainsFunc(rs.CommandStatuses, func(cs *packp.CommandStatus) bool { return !atomicFailure(cs.Status) }) {
		// Every command refused for the transaction alone: git checks the values the commands
		// expect when it commits, and reports a ref that moved meanwhile only on its error
		// channel. Try again from a new fetch.
		return nil, errConflict
	}
	if err != nil {
		return nil, fmt.Errorf("pushing to %s: %w", r.URL(), err)
	}
	moved := make([]string, 0, len(companions))
	for _, c := range companions {
		moved = append(moved, c.Name.Short())
	}
	return moved, nil
}

// movedRef reports whether a refused push means the branch moved under us,
// in the words git's receive-pack uses.
func movedRef(status string) bool {
	for _, s := range []string{"failed to update ref", "failed to lock", "cannot lock", "stale info", "fetch first", "non-fast-forward", "already exists"} {
		if strings.Contains(status, s) {
			return true
		}
	}
	return false
}

// retryable tells transient failures (network, server) and conflicts from
// errors that another attempt cannot fix.
func retryable(ctx context.Context, err error) bool {
	var we *writerError
	switch {
	case ctx.Err() != nil:
		return false
	case errors.Is(err, errConflict):
		return true
	case errors.As(err, &we),
		errors.Is(err, ErrNoBranch),
		errors.Is(err, transport.ErrAuthenticationRequired),
		errors.Is(err, transport.ErrAuthorizationFailed),
		errors.Is(err, transport.ErrRepositoryNotFound),
		errors.Is(err, transport.ErrInvalidAuthMethod):
		return false
	}
	msg := err.Error()
	for _, s := range []string{"knownhosts:", "no common algorithm for host key", "unable to authenticate", "no supported methods remain"} {
		if strings.Contains(msg, s) {
			return false
		}
	}
	return true
}
