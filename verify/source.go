package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/trust"
)

// maxSourceWalk bounds the first-parent walk of the source branch in one render.
const maxSourceWalk = 10000

// source walks the source branch from the last rendered source commit and returns the newest
// commit every step to which is trusted, with the mode in force there.
func source(ctx context.Context, s Sources, tip gitsync.Snapshot, tipMode mode, last string, prev map[string][]byte, in *Inputs) (gitsync.Snapshot, mode, error) {
	reject := func(c, why string) {
		in.reject(Rejection{Writer: WriterPeople, Ref: s.SourceBranch, Commit: c,
			Reason: fmt.Sprintf("commit %s %s; rendering stops at the commit before it", short(c), why)})
	}
	if last == "" || last == tip.Commit() {
		if err := firstSource(ctx, s, tip, tipMode, last); err != nil {
			return nil, mode{}, err
		}
		return tip, tipMode, nil
	}
	commits, found, err := s.Main.FirstParents(ctx, s.SourceBranch, tip.Commit(), last, maxSourceWalk)
	if err != nil {
		return nil, mode{}, err
	}
	lastSnap, err := s.Main.SnapshotOf(ctx, s.SourceBranch, last)
	if err != nil && !found {
		// The last rendered commit is gone from the branch (history rewritten): keep rendering
		// the inputs the renderer mirrored from it.
		reject(tip.Commit(), fmt.Sprintf("does not descend from the last rendered source commit %s", short(last)))
		return treeSnapshot(last, prev), modeOfTree(prev), nil
	}
	if err != nil {
		return nil, mode{}, err
	}
	cur, curMode := lastSnap, modeAt(lastSnap)
	if !found {
		reject(tip.Commit(), fmt.Sprintf("does not descend from the last rendered source commit %s (or is more than %d commits after it)", short(last), maxSourceWalk))
		return cur, curMode, nil
	}
	// settled is the newest commit that may be rendered; with spec.sourceBranch: bound, the
	// commits after it (unbound, newest last) wait for a person to bind one to the branch.
	// curMode is the trust of the newest commit whose trust files parse: a commit whose trust
	// files do not parse, or that would turn verification off, is never rendered, and the
	// commits after it are checked against the last good files until one repairs them.
	settled, settledMode := cur, curMode
	var unbound []string
	var held *Rejection // the trust change holding rendering at settled, if nothing repairs it
	if curMode.err != nil {
		// Only a render made before trust failed closed can have rendered such a commit: no
		// signature can be checked after it, so nothing after it is taken.
		reject(tip.Commit(), fmt.Sprintf("follows %s, rendered last, whose trust files do not parse (%v)", short(last), curMode.err))
		return nil, mode{}, fmt.Errorf("%s at %s: %w", s.SourceBranch, short(last), curMode.err)
	}
	for i := len(commits) - 1; i >= 0; i-- {
		c := commits[i]
		signed := true
		if curMode.allowed != nil && !curMode.protected {
			err := person(curMode, c)
			if err != nil && !accepted(curMode, c.Hash, commits[:i]) {
				reject(c.Hash, "is not signed by a person: "+err.Error()+fmt.Sprintf(" (a person's signed commit on %s with the trailer \"%s: %s\" accepts it)", s.SourceBranch, TrailerAccept, c.Hash))
				return settled, settledMode, nil
			}
			signed = err == nil
		}
		binds := curMode.allowed == nil || !curMode.bound || signed && boundTo(c, s.SourceBranch)
		next := tip
		if c.Hash != tip.Commit() {
			if next, err = s.Main.SnapshotOf(ctx, s.SourceBranch, c.Hash); err != nil {
				return nil, mode{}, err
			}
		}
		nextMode := modeAt(next)
		if why := weakens(curMode, nextMode); why != "" {
			held = &Rejection{Writer: WriterPeople, Ref: s.SourceBranch, Commit: c.Hash,
				Reason: fmt.Sprintf("commit %s %s; rendering stays at %s and every writer is verified with the trust files before it until a signed commit repairs them", short(c.Hash), why, short(settled.Commit()))}
			continue
		}
		// A commit holding a file too large to read (which the fetch left out) is never
		// rendered; a later signed commit that removes the file is.
		if _, err := next.Files(""); errors.Is(err, gitsync.ErrTooLarge) {
			held = &Rejection{Writer: WriterPeople, Ref: s.SourceBranch, Commit: c.Hash,
				Reason: fmt.Sprintf("commit %s holds a file too large to read (%v); rendering stays at %s until a signed commit removes it", short(c.Hash), err, short(settled.Commit()))}
			continue
		} else if err != nil {
			return nil, mode{}, err
		}
		cur, curMode = next, nextMode
		if binds {
			settled, settledMode, unbound, held = cur, curMode, nil, nil
		} else {
			unbound = append(unbound, c.Hash)
		}
	}
	if held != nil {
		in.reject(*held)
	}
	if len(unbound) > 0 {
		in.reject(Rejection{Writer: WriterPeople, Ref: s.SourceBranch, Commit: unbound[len(unbound)-1],
			Reason: fmt.Sprintf("%d commit(s) up to %s are signed but bound to no branch: %s declares spec.sourceBranch: bound, so rendering stays at %s until a person's signed commit on top says \"%s: %s\" (a merge commit, or git commit --trailer)",
				len(unbound), short(unbound[len(unbound)-1]), TrustPath, short(settled.Commit()), TrailerBranch, s.SourceBranch)})
	}
	if settledMode.err != nil {
		return nil, mode{}, fmt.Errorf("%s at %s: %w", s.SourceBranch, short(settled.Commit()), settledMode.err)
	}
	return settled, settledMode, nil
}

// weakens says why the trust files of a commit (next) may not replace those in force before it
// (cur), or "" when they may: files that do not parse are an invalid input, not an absence, and
// once anyone is enrolled verification never turns off (docs/DESIGN.md, "Trust fails closed").
func weakens(cur, next mode) string {
	switch {
	case next.err != nil:
		return fmt.Sprintf("changes the trust files so that they do not parse (%v)", next.err)
	case cur.allowed != nil && next.allowed == nil:
		return fmt.Sprintf("leaves %s enrolling nobody, which would turn verification off; once anyone is enrolled it stays on", AllowedSignersPath)
	}
	return ""
}

// TrailerBranch, in a commit a person signed, binds the signature to a branch: with
// spec.sourceBranch: bound, the source branch renders only up to its newest such commit that
// names it, so a commit signed for work in progress on another branch, pushed onto the source
// branch, is not rendered.
const TrailerBranch = "Gitbroker-Branch"

// boundTo reports whether c names branch in a TrailerBranch.
func boundTo(c *gitsync.Commit, branch string) bool {
	for _, t := range gitsync.CommitTrailers(c.Raw) {
		if t.Key == TrailerBranch && strings.TrimSpace(t.Value) == branch {
			return true
		}
	}
	return false
}

// firstSource checks the tip of the source branch for the first render (last is ""), or for a
// render of the source commit rendered last: it is taken on its own allowed_signers, and the
// first verified render needs it signed (and bound) by a person.
func firstSource(ctx context.Context, s Sources, tip gitsync.Snapshot, tipMode mode, last string) error {
	if tipMode.err != nil {
		return fmt.Errorf("%s at %s: %w", s.SourceBranch, short(tip.Commit()), tipMode.err)
	}
	if tipMode.allowed == nil || tipMode.protected || last != "" {
		return nil
	}
	c, err := s.Main.CommitOf(ctx, s.SourceBranch, tip.Commit())
	if err != nil {
		return err
	}
	if err := person(tipMode, c); err != nil {
		return fmt.Errorf("%s: the first verified render needs its head %s signed by a person in its own %s: %v", s.SourceBranch, short(tip.Commit()), AllowedSignersPath, err)
	}
	if tipMode.bound && !boundTo(c, s.SourceBranch) {
		return fmt.Errorf("%s: the first verified render needs its head %s bound to the branch by the trailer \"%s: %s\" (%s declares spec.sourceBranch: bound)", s.SourceBranch, short(tip.Commit()), TrailerBranch, s.SourceBranch, TrustPath)
	}
	return nil
}

// TrailerAccept, in a commit a person signed on the source branch, names a commit before it
// that no person signed (a merge made with a git host's button, a commit made before its
// author enrolled), which the person vouches for: the source walk then goes on through it.
// Argo CD's "seal" commits are the precedent. One trailer per commit accepted, by full hash.
const TrailerAccept = "Gitbroker-Accept"

// accepted reports whether a commit of later, the source commits after an unsigned one, newest
// first, was signed by a person under m (the trust in force before the unsigned commit, so
// that the unsigned commit cannot enroll the signer who accepts it) and names hash in a
// TrailerAccept.
func accepted(m mode, hash string, later []*gitsync.Commit) bool {
	for _, c := range later {
		names := false
		for _, t := range gitsync.CommitTrailers(c.Raw) {
			names = names || t.Key == TrailerAccept && strings.EqualFold(strings.TrimSpace(t.Value), hash)
		}
		if names && person(m, c) == nil {
			return true
		}
	}
	return false
}

// Proposed says what proposed commits (a pull request's, newest first, those not on the source
// branch yet) would do to rendering once they land on the branch's first parents, as a
// fast-forward or a rebase puts them, under the trust in force at the branch's tip: each commit
// no person signed and no later proposed commit accepts would stop rendering at its parent. A
// merge the git host makes is a commit of its own: unless the host signs it with a key of
// .gitbroker/trusted-keys/ (or the branch is declared protected), it stops rendering too.
func Proposed(tip gitsync.Snapshot, branch, ref string, proposed []*gitsync.Commit) []string {
	m := modeAt(tip)
	if m.err != nil || m.allowed == nil || m.protected {
		return nil
	}
	var out []string
	for i := len(proposed) - 1; i >= 0; i-- {
		c := proposed[i]
		if err := person(m, c); err != nil && !accepted(m, c.Hash, proposed[:i]) {
			out = append(out, fmt.Sprintf("%s: commit %s is not signed by a person (%v): landed on %s as it is (fast-forward, rebase), it would stop rendering at its parent; sign it, or have a person's signed commit say \"%s: %s\"",
				ref, short(c.Hash), err, branch, TrailerAccept, c.Hash))
		}
	}
	if m.people.Empty() {
		out = append(out, fmt.Sprintf("%s: a merge commit the git host makes for it would stop rendering at its parent: %s/ holds no OpenPGP key of the host and %s does not declare %s protected",
			ref, TrustedKeysDir, TrustPath, branch))
	}
	if m.bound && !slices.ContainsFunc(proposed, func(c *gitsync.Commit) bool { return person(m, c) == nil && boundTo(c, branch) }) {
		out = append(out, fmt.Sprintf("%s: no commit a person signed binds it to %s (%s declares spec.sourceBranch: bound): landed, it renders once a person's signed commit on top says \"%s: %s\" (a merge commit, or git commit --trailer)",
			ref, branch, TrustPath, TrailerBranch, branch))
	}
	return out
}

// person checks that a person signed c: with an SSH key allowed_signers lists as a person, or
// with an OpenPGP key of .gitbroker/trusted-keys/ (git hosts sign the merges they make so). A
// commit's own time is the signer's claim; a source commit is checked at that time, as git
// verify-commit does, since people's keys are listed without certificates that expire.
func person(m mode, c *gitsync.Commit) error {
	payload, armored := trust.SplitSignedCommit(c.Raw)
	if trust.IsOpenPGP(armored) {
		_, err := m.people.Verify(payload, armored, c.When)
		return err
	}
	a := m.allowed
	ps, err := signers(a, c, c.When)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if trust.IsPerson(p) {
			return nil
		}
	}
	return fmt.Errorf("signed as %s, which is not a person", strings.Join(ps, ", "))
}
