package verify

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/trust"
)

// Signatures remembers which key made a commit's SSH signature, by commit: the hash names the
// commit's bytes, so whether its signature verifies, and with which key, never changes. Who that
// key may sign as is still asked of the allowed_signers and the clock in force at each render. A
// render daemon keeps one, so the tips of ten thousand nodes that did not move are not verified
// again on every render (about 0.1 ms each). Each Collect keeps only what it used.
type Signatures struct {
	mu       sync.Mutex
	old, cur map[string]verifiedSignature
}

type verifiedSignature struct {
	sig *trust.Signature
	err error
}

// verify is trust.VerifySignature of the commit, remembered; a nil Signatures remembers nothing.
func (v *Signatures) verify(c *gitsync.Commit) (*trust.Signature, error) {
	if v == nil {
		payload, armored := trust.SplitSignedCommit(c.Raw)
		return trust.VerifySignature(payload, armored)
	}
	v.mu.Lock()
	e, ok := v.cur[c.Hash]
	if !ok {
		e, ok = v.old[c.Hash]
	}
	v.mu.Unlock()
	if !ok {
		payload, armored := trust.SplitSignedCommit(c.Raw)
		e.sig, e.err = trust.VerifySignature(payload, armored)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur == nil {
		v.cur = map[string]verifiedSignature{}
	}
	v.cur[c.Hash] = e
	return e.sig, e.err
}

// rotate forgets what the last Collect did not use.
func (v *Signatures) rotate() {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.old, v.cur = v.cur, nil
}

// signers returns the principals that signed the commit, or why none did.
func signers(a *trust.AllowedSigners, c *gitsync.Commit, when time.Time) ([]string, error) {
	payload, armored := trust.SplitSignedCommit(c.Raw)
	sig, err := trust.VerifySignature(payload, armored)
	if err != nil {
		return nil, err
	}
	if a.Revoked(sig.Key) {
		return nil, fmt.Errorf("signed by %s, a key %s revokes", sig.Fingerprint, RevokedKeysPath)
	}
	ps := a.Principals(sig, when)
	if len(ps) == 0 {
		return nil, fmt.Errorf("signed by %s, a key %s does not list", sig.Fingerprint, AllowedSignersPath)
	}
	return ps, nil
}

func signedBy(sigs *Signatures, a *trust.AllowedSigners, c *gitsync.Commit, principal string, when time.Time) error {
	sig, err := sigs.verify(c)
	if err != nil {
		return err
	}
	if a.Allows(sig, principal, when) {
		return nil
	}
	if a.Revoked(sig.Key) {
		return fmt.Errorf("signed by %s, a key %s revokes", sig.Fingerprint, RevokedKeysPath)
	}
	if ps := a.Principals(sig, when); len(ps) > 0 {
		return fmt.Errorf("signed by %s (%s), not by %s", sig.Fingerprint, strings.Join(ps, ", "), principal)
	}
	return fmt.Errorf("signed by %s, which %s does not list as %s", sig.Fingerprint, AllowedSignersPath, principal)
}

// maxWriterWalk bounds the commits a writer's ref may gain between two renders.
const maxWriterWalk = 1000

// signedSince says why tip may not follow accepted, the tip accepted last, on a writer's ref,
// or "" when it may: tip must descend from accepted along first parents, and every commit
// after accepted, the tip and each one before it, must be signed as principal and have one
// parent. A writer never signs on top of what someone else planted, so a planted commit below
// a signed tip is refused as well as a planted tip.
func signedSince(ctx context.Context, r Reader, sigs *Signatures, a *trust.AllowedSigners, ref, principal, accepted, tip string, now time.Time) (string, error) {
	c, err := r.CommitOf(ctx, ref, tip)
	if err != nil {
		return "", err
	}
	if err := signedBy(sigs, a, c, principal, now); err != nil {
		return err.Error(), nil
	}
	if accepted == "" || accepted == tip {
		return "", nil
	}
	commits, found, err := r.FirstParents(ctx, ref, tip, accepted, maxWriterWalk)
	if err != nil {
		return "", err
	}
	if !found {
		if len(commits) >= maxWriterWalk {
			return fmt.Sprintf("is more than %d commits after %s, the tip accepted last", maxWriterWalk, short(accepted)), nil
		}
		// A writer whose ref was deleted starts a new line whose first commit names the tip it
		// replaces: taken when that is exactly the accepted tip, and every commit of the line
		// is the writer's.
		if commits, _, err = r.FirstParents(ctx, ref, tip, "", maxWriterWalk); err != nil {
			return "", err
		}
		root := commits[len(commits)-1]
		if v, ok := gitsync.TrailerValue(root.Raw, gitsync.TrailerReplaces); !ok || v != accepted || len(root.Parents) > 0 {
			return fmt.Sprintf("does not descend from %s, the tip accepted last (a replay or a rollback)", short(accepted)), nil
		}
	}
	for _, c := range commits {
		if len(c.Parents) > 1 {
			return fmt.Sprintf("has a merge, %s, after %s, the tip accepted last; a writer's ref is a line of its own commits", short(c.Hash), short(accepted)), nil
		}
		if c.Hash == tip {
			continue
		}
		if err := signedBy(sigs, a, c, principal, now); err != nil {
			return fmt.Sprintf("is signed, but %s before it, after %s, the tip accepted last, is not the writer's: %v", short(c.Hash), short(accepted), err), nil
		}
	}
	return "", nil
}
