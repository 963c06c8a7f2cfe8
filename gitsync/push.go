package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

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
