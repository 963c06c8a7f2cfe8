package gitsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

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

// Replaces reports whether a Snapshot a WithOwnHistory Repository returned is not the branch's
// head (someone else pushed on top of the writer's own commit, or the branch moved away from
// it): the writer's next Update puts the branch back even when it has nothing to change.
func Replaces(s Snapshot) bool {
	t, ok := s.(*treeSnapshot)
	return ok && t.replaces
}

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
			if c := r.acceptedOwn(ctx, a); c != nil {
				r.log.Info("the branch holds an own commit that does not descend from the one the renderer accepted last (moved back?): building on the accepted one again",
					"branch", r.branch.Short(), "found", found.Hash.String(), "accepted", a)
				found = c
			} else {
				r.log.Info("the branch holds an own commit that does not descend from the one the renderer accepted last (moved back?), and the server does not send that one: starting a new line that replaces it, without what the accepted one held",
					"branch", r.branch.Short(), "found", found.Hash.String(), "accepted", a)
				found = nil
			}
		}
	} else if pushed == nil && found == nil && r.recoverFrom != nil {
		// The branch is gone, or holds nothing of this writer's: what it wrote lives on in the
		// commit the renderer accepted last, which the server may still send by its hash (git
		// keeps it until its gc prunes it). Building on it keeps every record it held; without
		// it the writer starts a new line that names it (push.go) and has lost what it held.
		if !r.accepted.read {
			r.readAccepted(ctx, "starting a new line of commits without naming the accepted one")
		}
		if a := r.accepted.tip; a != "" {
			if c := r.acceptedOwn(ctx, a); c != nil {
				r.log.Info("the branch holds nothing of this writer's: building on the commit the renderer accepted last", "branch", r.branch.Short(), "accepted", a)
				found = c
			}
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

// acceptedOwn is the commit the renderer accepted last, hash, when the store has it or the
// server sends it by its hash and this writer signed it; else nil (and the reason logged). A
// line built on it is one the renderer takes as it is: it descends from what it accepted.
func (r *Repository) acceptedOwn(ctx context.Context, hash string) *object.Commit {
	if err := r.fetchCommit(ctx, hash); err != nil {
		r.log.Info("cannot read the commit the renderer accepted last", "branch", r.branch.Short(), "accepted", hash, "error", r.redact.wrap(err).Error())
		return nil
	}
	k, err := r.commitOf(ctx, r.branch.Short(), hash, false)
	if err != nil || !r.signer.(Verifier).Verifies(k.Raw) {
		r.log.Info("the commit the renderer accepted last is not this writer's", "branch", r.branch.Short(), "accepted", hash)
		return nil
	}
	c, err := r.repo.CommitObject(plumbing.NewHash(hash))
	if err != nil {
		return nil
	}
	return c
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
		built := r.accepted.tip
		r.accepted.tip = tip
		if c := r.acceptedOwn(ctx, tip); c != nil {
			r.log.Info("the renderer accepted a commit this writer's line does not build on: building on that one",
				"branch", r.branch.Short(), "line", found.Hash.String(), "accepted", tip, "built from", built)
			return c
		}
		r.log.Info("the renderer accepted a commit this writer's line does not build on: starting a new line that replaces it",
			"branch", r.branch.Short(), "line", found.Hash.String(), "accepted", tip, "built from", built)
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
