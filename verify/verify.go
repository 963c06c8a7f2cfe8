// Package verify gathers the renderer's inputs from every writer's ref and keeps only what it
// verified (DESIGN.md, "Trust"): the source branch along first parents, each commit signed by a
// person; each node's inventory from a tip that node signed, holding only its own file and
// descending from the tip accepted last; the recorder's records from a tip it signed; and the
// previous rendered/ and history/ from the renderer's own last signed commit. A rejected input
// freezes only its writer's part: the part the renderer accepted before is used instead.
//
// Without .gitbroker/allowed_signers on the source branch nothing is verified but the layout
// (a node's ref holds only that node's file), and Inputs.Trust says so.
package verify

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
)

// The refs of a repository (DESIGN.md, "The GitOps repository").
const (
	InventoryPrefix = "gitbroker/inventory/"
	StatusBranch    = "gitbroker/status"
	RenderedBranch  = "gitbroker/rendered"
)

// Files on the source branch that say who is trusted.
const (
	AllowedSignersPath = ".gitbroker/allowed_signers"
	TrustPath          = ".gitbroker/trust.yaml"
	// RevokedKeysPath lists retired keys and certificates (git's gpg.ssh.revocationFile):
	// how a node enrolled through an SSH CA is decommissioned.
	RevokedKeysPath = ".gitbroker/revoked_keys"
	TrustedKeysDir  = ".gitbroker/trusted-keys"
	// RendererKeysDir holds the OpenPGP public keys (*.asc) of a renderer that signs with
	// OpenPGP (for Argo CD), so that a plan, check or history, which holds no renderer key,
	// knows the renderer's commits; allowed_signers lists SSH keys only.
	RendererKeysDir = ".gitbroker/renderer-keys"
)

// IsPeoplePath reports whether a path belongs to the people's branch: gitbroker.yaml,
// configurations/ and .gitbroker/.
func IsPeoplePath(p string) bool {
	return p == api.SettingsPath || api.IsConfigurationPath(p) || strings.HasPrefix(p, ".gitbroker/")
}

// InventoryBranch is the ref the agent of node writes.
func InventoryBranch(node string) string { return InventoryPrefix + node }

// maxSourceWalk bounds the first-parent walk of the source branch in one render.
const maxSourceWalk = 10000

// maxRenderedWalk bounds the search for the renderer's own last commit.
const maxRenderedWalk = 1000

// Reader reads refs and commits of a remote; *gitsync.Repository implements it.
type Reader interface {
	Branches(ctx context.Context, names ...string) (map[string]gitsync.Snapshot, error)
	CommitOf(ctx context.Context, branch, hash string) (*gitsync.Commit, error)
	IsAncestor(ctx context.Context, branch, ancestor, tip string) (bool, error)
	FirstParents(ctx context.Context, branch, tip, stop string, max int) ([]*gitsync.Commit, bool, error)
	SnapshotOf(ctx context.Context, branch, hash string) (gitsync.Snapshot, error)
}

// Sources are where the inputs come from.
type Sources struct {
	// Main holds the source branch, gitbroker/status and gitbroker/rendered.
	Main Reader
	// Inventory holds the node refs (--inventory-git); Main when nil.
	Inventory Reader
	// SourceBranch is the people's branch (--branch).
	SourceBranch string
	// RenderedBranch is the renderer's own branch; RenderedBranch when empty.
	RenderedBranch string
	// RendererKey is the public key of the renderer's --signing-key: a commit on the rendered
	// branch is the renderer's own when this key signed it. Required when allowed_signers exists.
	RendererKey ssh.PublicKey
	// RendererOpenPGP is the renderer's --signing-key when it is an OpenPGP key (for Argo CD):
	// a commit on the rendered branch is the renderer's own when this key signed it.
	RendererOpenPGP *trust.OpenPGPSigner
	// AnyListedRenderer, for a plan that holds no renderer key, takes a commit signed by any key
	// allowed_signers lists as renderer as the renderer's own. A plan writes nothing.
	AnyListedRenderer bool
	// Adopt, when set, is a commit of the rendered branch to start from although this key did
	// not sign it (the first render with verification on an existing branch, or a new key).
	Adopt string
	// Now is the clock certificates are checked against.
	Now func() time.Time
	// Known, when set, returns the files of a rendered-branch commit the caller already holds,
	// because it wrote that commit (the render daemon's last push), so they are not read from
	// the object store again: its rendered/ and history/, and everything else (the inputs
	// mirrored beside them). ok is false for any other commit. A commit's hash names its
	// content, so what Known returns for it is what the branch holds. Collect changes neither
	// map; rendered becomes Inputs.Rendered as it is.
	Known func(commit string) (rendered, inputs map[string][]byte, ok bool)
	// Signatures, when set, remembers the writers' signatures verified by earlier renders.
	Signatures *Signatures
	// LastPushed is the rendered branch's commit this renderer pushed (or rendered on) last, as
	// a render daemon remembers it (in memory and in its leader Lease). With verification, a
	// branch that does not descend from it is reported and rendered over from it, never
	// adopted: pushing an older render back must not bring back what it accepted.
	LastPushed string
}

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

// filesOf returns every file of a rendered-branch commit: its rendered/ and history/, and the
// rest.
func (s Sources) filesOf(snap gitsync.Snapshot) (rendered, rest map[string][]byte, err error) {
	if rendered, rest, ok := s.known(snap.Commit()); ok {
		return rendered, rest, nil
	}
	files, err := snap.Files("")
	if err != nil {
		return nil, nil, err
	}
	rendered, rest = map[string][]byte{}, map[string][]byte{}
	for p, b := range files {
		if render.IsOwned(p) {
			rendered[p] = b
		} else {
			rest[p] = b
		}
	}
	return rendered, rest, nil
}

func (s Sources) known(commit string) (rendered, rest map[string][]byte, ok bool) {
	if s.Known == nil || commit == "" {
		return nil, nil, false
	}
	return s.Known(commit)
}

// Inputs are the verified inputs of one render.
type Inputs struct {
	// Inputs hold the inputs: gitbroker.yaml, configurations/, .gitbroker/, inventory/, status/.
	Inputs render.Tree
	// Rendered holds the previous rendered/ and history/, those of the commit Previous names
	// (render.Request.Previous). It is the very map Sources.Known handed over, when it did.
	Rendered render.Tree
	// Source is the source commit rendered, SourceTime its committer time; SourceTip is the
	// branch's head, which differs when an unsigned commit stopped the source.
	Source     string
	SourceTime time.Time
	SourceTip  string
	// Newest is the newest committer time among the commits rendered: the source and every
	// accepted tip. The time from it to the pushed render is what a writer waits.
	Newest time.Time
	// Writers are the accepted tips, by ref, for the metadata.
	Writers map[string]string
	// Untrusted lists each refused input with why.
	Untrusted []string
	// Trust is the guarantee in force, for the plan.
	Trust string
	// Verified is true when allowed_signers governed this render.
	Verified bool
	// Previous is the rendered branch's commit the previous rendered/ and history/ came from;
	// Overwrite says the branch's head is not that commit (something else was pushed there),
	// so the render must commit over it even when nothing else changed.
	Previous  string
	Overwrite bool
	// Own reports whether a commit is this renderer's own, as the previous render was checked;
	// nil when the repository has no allowed_signers and any commit counts.
	Own func(*gitsync.Commit) bool
}

// put adds an input.
func (in *Inputs) put(p string, b []byte) {
	in.Inputs[p] = b
}

// Tree returns a new tree of the inputs and the previous rendered/ and history/: a repository's
// files, as a work tree holds them.
func (in *Inputs) Tree() render.Tree {
	t := maps.Clone(in.Rendered)
	if t == nil {
		t = render.Tree{}
	}
	maps.Copy(t, in.Inputs)
	return t
}

// mode is how the source branch is trusted at one commit.
type mode struct {
	allowed   *trust.AllowedSigners // nil: no allowed_signers, nothing verified
	people    *trust.KeyRing        // people's OpenPGP keys, for merges a git host signs
	renderers *trust.KeyRing        // the OpenPGP keys of renderers that sign with OpenPGP
	protected bool                  // the host protects the branch; people's commits need no signature
	bound     bool                  // a person's signature counts only up to a commit bound to the branch
	err       error                 // allowed_signers or trust.yaml does not parse
}

// trustSettings is .gitbroker/trust.yaml.
type trustSettings struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		// SourceBranch is "signed" (every first-parent commit signed by a person, the default),
		// "bound" (signed, and rendered only up to the newest commit a person signed that names
		// the branch in a TrailerBranch: a signature made on another branch does not count for
		// this one) or "protected" (the git host requires reviews and refuses direct pushes).
		SourceBranch string `json:"sourceBranch"`
	} `json:"spec"`
}

func modeAt(s gitsync.Snapshot) mode {
	data, err := s.ReadFile(AllowedSignersPath)
	if errors.Is(err, fs.ErrNotExist) {
		return mode{}
	}
	if err != nil {
		return mode{err: err}
	}
	if len(data) > trust.MaxAllowedSignersSize {
		return mode{err: fmt.Errorf("%s: larger than %d bytes", AllowedSignersPath, trust.MaxAllowedSignersSize)}
	}
	a, err := trust.ParseAllowedSigners(AllowedSignersPath, data)
	if err != nil {
		return mode{err: err}
	}
	if a.Empty() {
		return mode{} // enrolls nobody yet: nothing to verify against
	}
	if data, err := s.ReadFile(RevokedKeysPath); err == nil {
		if err := a.Revoke(RevokedKeysPath, data); err != nil {
			return mode{err: err}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return mode{err: err}
	}
	m := mode{allowed: a}
	keys, err := s.Files(TrustedKeysDir)
	if err != nil {
		return mode{err: err}
	}
	for p := range keys {
		if !strings.HasSuffix(p, ".asc") {
			delete(keys, p)
		}
	}
	if m.people, err = trust.ParseKeyRing(keys); err != nil {
		return mode{err: err}
	}
	rkeys, err := s.Files(RendererKeysDir)
	if err != nil {
		return mode{err: err}
	}
	for p := range rkeys {
		if !strings.HasSuffix(p, ".asc") {
			delete(rkeys, p)
		}
	}
	if m.renderers, err = trust.ParseKeyRing(rkeys); err != nil {
		return mode{err: err}
	}
	if data, err := s.ReadFile(TrustPath); err == nil {
		var ts trustSettings
		if err := yaml.UnmarshalStrict(data, &ts); err != nil {
			return mode{err: fmt.Errorf("%s: %v", TrustPath, err)}
		}
		switch ts.Spec.SourceBranch {
		case "", "signed":
		case "bound":
			m.bound = true
		case "protected":
			m.protected = true
		default:
			return mode{err: fmt.Errorf("%s: spec.sourceBranch: %q is not signed, bound or protected", TrustPath, ts.Spec.SourceBranch)}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return mode{err: err}
	}
	return m
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

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Collect fetches every writer's ref and returns the inputs of the next render. rendered is
// the rendered branch's head as the caller's write will see it.
func Collect(ctx context.Context, s Sources, rendered gitsync.Snapshot) (*Inputs, error) {
	if s.Inventory == nil {
		s.Inventory = s.Main
	}
	if s.RenderedBranch == "" {
		s.RenderedBranch = RenderedBranch
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	now := s.Now()
	names := []string{s.SourceBranch, StatusBranch}
	if s.Inventory == s.Main {
		names = append(names, InventoryPrefix)
	}
	refs, err := s.Main.Branches(ctx, names...)
	if err != nil {
		return nil, err
	}
	nodeRefs := refs
	if s.Inventory != s.Main {
		if nodeRefs, err = s.Inventory.Branches(ctx, InventoryPrefix); err != nil {
			return nil, err
		}
	}
	oversized := map[string]error{}
	for _, r := range []Reader{s.Main, s.Inventory} {
		if o, ok := r.(interface{ Oversized() map[string]error }); ok {
			maps.Copy(oversized, o.Oversized())
		}
	}
	if err := oversized[s.SourceBranch]; err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.SourceBranch, err)
	}
	tip, ok := refs[s.SourceBranch]
	if !ok {
		return nil, fmt.Errorf("%w: %s", gitsync.ErrNoBranch, s.SourceBranch)
	}
	in := &Inputs{Inputs: render.Tree{}, Writers: map[string]string{}, SourceTip: tip.Commit()}

	// The mode at the source tip decides whether the renderer's own commits must be found; the
	// mode that governs the walk is the one at the last rendered source commit.
	tipMode := modeAt(tip)
	// prev are the inputs the previous render mirrored beside its output.
	owned, prev, err := previous(ctx, s, rendered, tipMode, in)
	if err != nil {
		return nil, err
	}
	meta := render.ParseMetadata(owned[render.MetadataPath])
	in.Rendered = owned

	src, m, err := source(ctx, s, tip, tipMode, meta.SourceCommit, prev, in)
	if err != nil {
		return nil, err
	}
	in.Source, in.SourceTime = src.Commit(), src.CommitTime()
	files, err := src.Files("")
	if err != nil {
		return nil, err
	}
	for p, b := range files {
		if IsPeoplePath(p) {
			in.put(p, b)
		}
	}
	in.Verified = m.allowed != nil
	switch {
	case m.allowed == nil:
		in.Trust = fmt.Sprintf("unverified: %s has no %s that enrolls anyone, so every writer's commits are rendered as they are", s.SourceBranch, AllowedSignersPath)
	case m.protected:
		in.Trust = fmt.Sprintf("verified: node, recorder and renderer signatures checked against %s; people's commits on %s are trusted because %s declares the branch protected by its host", AllowedSignersPath, s.SourceBranch, TrustPath)
	case m.bound:
		in.Trust = fmt.Sprintf("verified: every commit on %s signed by a person and rendered up to the newest one a person bound to %s (trailer \"%s: %s\"), and node, recorder and renderer signatures checked against %s", s.SourceBranch, s.SourceBranch, TrailerBranch, s.SourceBranch, AllowedSignersPath)
	default:
		in.Trust = fmt.Sprintf("verified: every commit on %s signed by a person, and node, recorder and renderer signatures checked against %s", s.SourceBranch, AllowedSignersPath)
	}

	// Whether prev is the caller's own render held in memory: its inventories are then exactly
	// the files of the tips it accepted, so a tip that has not moved need not be read again.
	_, _, mirrored := s.known(in.Previous)
	if err := nodes(ctx, s, nodeRefs, oversized, m, meta, prev, mirrored, now, in); err != nil {
		return nil, err
	}
	if err := status(ctx, s, refs[StatusBranch], oversized[StatusBranch], m, meta, prev, now, in); err != nil {
		return nil, err
	}
	in.Newest = in.SourceTime
	for ref, hash := range in.Writers {
		snap := nodeRefs[ref]
		if ref == StatusBranch {
			snap = refs[StatusBranch]
		}
		if snap != nil && snap.Commit() == hash && snap.CommitTime().After(in.Newest) {
			in.Newest = snap.CommitTime()
		}
	}
	slices.Sort(in.Untrusted)
	s.Signatures.rotate()
	return in, nil
}

// previous finds the rendered branch's commit to render on top of, the head or with
// verification the newest first-parent render commit the renderer's own key signed, and
// returns its files as filesOf does. A render commit carries the render metadata and
// api.TrailerSourceCommit: the renderer's key also signs its folder branches' commits, and
// pushing one of those onto the rendered branch must not make it the previous render. With
// LastPushed, a branch that does not descend from the commit this renderer pushed last (moved
// back to an older render, or replaced) is never adopted: the render is made over it from that
// commit.
func previous(ctx context.Context, s Sources, rendered gitsync.Snapshot, tip mode, in *Inputs) (owned, rest map[string][]byte, err error) {
	head := rendered.Commit()
	if head == "" && s.LastPushed == "" {
		return map[string][]byte{}, map[string][]byte{}, nil
	}
	if tip.allowed == nil && tip.err == nil {
		if head == "" {
			return map[string][]byte{}, map[string][]byte{}, nil
		}
		in.Previous = head
		return s.filesOf(rendered)
	}
	want := ""
	switch {
	case s.RendererOpenPGP != nil:
		want = s.RendererOpenPGP.String()
	case s.RendererKey != nil:
		want = ssh.FingerprintSHA256(s.RendererKey)
	case s.AnyListedRenderer && tip.allowed != nil:
		want = "a key " + AllowedSignersPath + " lists as renderer"
	default:
		return nil, nil, fmt.Errorf("%s exists on %s, so the renderer must sign: give it --signing-key", AllowedSignersPath, s.SourceBranch)
	}
	own := func(c *gitsync.Commit) bool {
		if c.Hash == s.Adopt {
			return true
		}
		payload, armored := trust.SplitSignedCommit(c.Raw)
		if s.RendererOpenPGP != nil {
			return s.RendererOpenPGP.Verifies(payload, armored, c.When)
		}
		if trust.IsOpenPGP(armored) {
			// Only a plan, holding no key, gets here: the renderers' listed OpenPGP keys.
			if s.RendererKey != nil || tip.renderers.Empty() {
				return false
			}
			_, err := tip.renderers.Verify(payload, armored, c.When)
			return err == nil
		}
		sig, err := trust.VerifySignature(payload, armored)
		if err != nil {
			return false
		}
		if s.RendererKey == nil {
			return tip.allowed.Allows(sig, trust.PrincipalRenderer, c.When)
		}
		return sig.Fingerprint == ssh.FingerprintSHA256(s.RendererKey)
	}
	in.Own = own
	found, err := lastRender(ctx, s, rendered, own)
	if err != nil {
		return nil, nil, err
	}
	if last := s.LastPushed; last != "" && (found == nil || found.Commit() != last) {
		descends := false
		if found != nil {
			if descends, err = s.Main.IsAncestor(ctx, s.RenderedBranch, last, found.Commit()); err != nil {
				return nil, nil, err
			}
		}
		if !descends {
			what := "is gone"
			if head != "" {
				what = fmt.Sprintf("is at %s, which does not descend from it (moved back to an older commit, or replaced)", short(head))
				if ok, err := s.Main.IsAncestor(ctx, s.RenderedBranch, last, head); err == nil && ok {
					what = fmt.Sprintf("is at %s, with no render of its own within %d commits on top of it", short(head), maxRenderedWalk)
				}
			}
			in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: this renderer pushed %s last, and the branch %s; it is rendered over from %s",
				s.RenderedBranch, short(last), what, short(last)))
			in.Previous, in.Overwrite = last, true
			if rendered, rest, ok := s.known(last); ok {
				return rendered, rest, nil
			}
			snap, err := s.Main.SnapshotOf(ctx, s.RenderedBranch, last)
			if err != nil {
				return nil, nil, fmt.Errorf("%s does not descend from %s, the commit this renderer pushed last, which cannot be read (%v): push that commit back to %s, or check the branch and give --adopt-rendered <commit>",
					s.RenderedBranch, short(last), err, s.RenderedBranch)
			}
			return s.filesOf(snap)
		}
	}
	if found == nil {
		return nil, nil, fmt.Errorf("no render commit on %s is signed by this renderer's key (%s): if this is the first render with %s, or the renderer has a new key, check the branch and give --adopt-rendered <commit> once to start from that commit",
			s.RenderedBranch, want, AllowedSignersPath)
	}
	if found.Commit() != head {
		in.Overwrite = true
		in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: %s is not a render signed by this renderer; everything after its own commit %s is dropped and rendered over",
			s.RenderedBranch, short(head), short(found.Commit())))
	}
	in.Previous = found.Commit()
	return s.filesOf(found)
}

// lastRender returns the newest render commit along the rendered branch's first parents that
// own accepts, or nil when there is none within maxRenderedWalk.
func lastRender(ctx context.Context, s Sources, rendered gitsync.Snapshot, own func(*gitsync.Commit) bool) (gitsync.Snapshot, error) {
	head := rendered.Commit()
	if head == "" {
		return nil, nil
	}
	if c := gitsync.HeadCommit(rendered); c != nil && (c.Hash == s.Adopt || isRender(c, own) && hasMetadata(s, rendered)) {
		return rendered, nil
	}
	commits, _, err := s.Main.FirstParents(ctx, s.RenderedBranch, head, "", maxRenderedWalk)
	if err != nil {
		return nil, err
	}
	for _, c := range commits {
		if c.Hash != s.Adopt && !isRender(c, own) {
			continue
		}
		snap := rendered
		if c.Hash != head {
			if snap, err = s.Main.SnapshotOf(ctx, s.RenderedBranch, c.Hash); err != nil {
				return nil, err
			}
		}
		if c.Hash == s.Adopt || hasMetadata(s, snap) {
			return snap, nil
		}
	}
	return nil, nil
}

// isRender reports whether c is a render commit that own accepts: one that names its source
// commit and is not a folder branch's commit. (A commit given as Sources.Adopt is taken as it
// is, by the caller.)
func isRender(c *gitsync.Commit, own func(*gitsync.Commit) bool) bool {
	if !own(c) {
		return false
	}
	if _, folder := gitsync.TrailerValue(c.Raw, gitsync.TrailerCompanion); folder {
		return false
	}
	_, ok := gitsync.TrailerValue(c.Raw, api.TrailerSourceCommit)
	return ok
}

// hasMetadata reports whether a rendered-branch commit holds the render metadata.
func hasMetadata(s Sources, snap gitsync.Snapshot) bool {
	if rendered, _, ok := s.known(snap.Commit()); ok {
		_, has := rendered[render.MetadataPath]
		return has
	}
	_, err := snap.ReadFile(render.MetadataPath)
	return err == nil
}

// source walks the source branch from the last rendered source commit and returns the newest
// commit every step to which is trusted, with the mode in force there.
func source(ctx context.Context, s Sources, tip gitsync.Snapshot, tipMode mode, last string, prev map[string][]byte, in *Inputs) (gitsync.Snapshot, mode, error) {
	reject := func(c, why string) {
		in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: commit %s %s; rendering stops at the commit before it", s.SourceBranch, short(c), why))
	}
	if last == "" || last == tip.Commit() {
		// The first render: the tip is taken on its own allowed_signers.
		if tipMode.err != nil {
			return nil, mode{}, fmt.Errorf("%s at %s: %w", s.SourceBranch, short(tip.Commit()), tipMode.err)
		}
		if tipMode.allowed != nil && !tipMode.protected && last == "" {
			c, err := s.Main.CommitOf(ctx, s.SourceBranch, tip.Commit())
			if err != nil {
				return nil, mode{}, err
			}
			if err := person(tipMode, c); err != nil {
				return nil, mode{}, fmt.Errorf("%s: the first verified render needs its head %s signed by a person in its own %s: %v", s.SourceBranch, short(tip.Commit()), AllowedSignersPath, err)
			}
			if tipMode.bound && !boundTo(c, s.SourceBranch) {
				return nil, mode{}, fmt.Errorf("%s: the first verified render needs its head %s bound to the branch by the trailer \"%s: %s\" (%s declares spec.sourceBranch: bound)", s.SourceBranch, short(tip.Commit()), TrailerBranch, s.SourceBranch, TrustPath)
			}
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
	settled, settledMode := cur, curMode
	var unbound []string
	for i := len(commits) - 1; i >= 0; i-- {
		c := commits[i]
		if curMode.err != nil {
			reject(c.Hash, fmt.Sprintf("follows a commit whose trust files do not parse (%v)", curMode.err))
			return settled, settledMode, nil
		}
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
		cur, curMode = next, modeAt(next)
		if binds {
			settled, settledMode, unbound = cur, curMode, nil
		} else {
			unbound = append(unbound, c.Hash)
		}
	}
	if len(unbound) > 0 {
		in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: %d commit(s) up to %s are signed but bound to no branch: %s declares spec.sourceBranch: bound, so rendering stays at %s until a person's signed commit on top says \"%s: %s\" (a merge commit, or git commit --trailer)",
			s.SourceBranch, len(unbound), short(unbound[len(unbound)-1]), TrustPath, short(settled.Commit()), TrailerBranch, s.SourceBranch))
	}
	if settledMode.err != nil {
		return nil, mode{}, fmt.Errorf("%s at %s: %w", s.SourceBranch, short(settled.Commit()), settledMode.err)
	}
	return settled, settledMode, nil
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

// nodes takes each node's inventory from its ref. With mirrored, prev holds the file of each
// tip meta.Writers names as it was read: a tip that has not moved is taken from there (its
// signature is still checked, against today's allowed_signers and clock).
func nodes(ctx context.Context, s Sources, refs map[string]gitsync.Snapshot, oversized map[string]error, m mode, meta render.Metadata, prev map[string][]byte, mirrored bool, now time.Time, in *Inputs) error {
	keep := func(ref, node string) {
		p := api.InventoryPath(node)
		if b, ok := prev[p]; ok {
			in.put(p, b)
		}
		if t := meta.Writers[ref]; t != "" {
			in.Writers[ref] = t
		}
	}
	seen := map[string]bool{}
	// A ref too large to read is not read: the node's part stays as it was accepted.
	for _, ref := range slices.Sorted(maps.Keys(oversized)) {
		node, ok := strings.CutPrefix(ref, InventoryPrefix)
		if !ok || len(validation.IsDNS1123Subdomain(node)) > 0 {
			continue
		}
		seen[node] = true
		in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: too large to read (%v); the node's last verified inventory is kept", ref, oversized[ref]))
		keep(ref, node)
	}
	for _, ref := range slices.Sorted(maps.Keys(refs)) {
		if !strings.HasPrefix(ref, InventoryPrefix) || oversized[ref] != nil {
			continue
		}
		node := strings.TrimPrefix(ref, InventoryPrefix)
		if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
			in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: %q is not a node name: %s", ref, node, strings.Join(msgs, "; ")))
			continue
		}
		seen[node] = true
		snap := refs[ref]
		p := api.InventoryPath(node)
		mirror, unmoved := prev[p]
		unmoved = unmoved && mirrored && snap.Commit() == meta.Writers[ref]
		why, err := nodeTip(ctx, s, ref, node, snap, m, meta.Writers[ref], unmoved, now)
		if err != nil {
			return err
		}
		if why != "" {
			kept := "the node's last verified inventory is kept"
			if _, ok := prev[api.InventoryPath(node)]; !ok {
				kept = "nothing of this node is rendered"
			}
			in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: commit %s %s; %s", ref, short(snap.Commit()), why, kept))
			keep(ref, node)
			continue
		}
		b := mirror
		if !unmoved {
			if b, err = snap.ReadFile(p); err != nil {
				return err
			}
		}
		in.put(p, b)
		in.Writers[ref] = snap.Commit()
	}
	// A node whose ref is gone keeps its last verified inventory while it is enrolled: deleting
	// a ref needs no signature. Unverified, a gone ref is a gone node.
	for p := range prev {
		if !api.IsInventoryPath(p) {
			continue
		}
		node := strings.TrimSuffix(strings.TrimPrefix(p, api.InventoryDir+"/"), ".yaml")
		ref := InventoryBranch(node)
		if seen[node] || m.allowed == nil {
			continue
		}
		if !m.allowed.Enrolled(trust.NodePrincipal(node), now) {
			continue // removed from allowed_signers by a person: decommissioned
		}
		in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: the ref is gone, but node %s is still enrolled; its last verified inventory is kept (remove its line from %s to decommission it)", ref, node, AllowedSignersPath))
		keep(ref, node)
	}
	return nil
}

// nodeTip says why a node ref's tip may not be rendered, or "" when it may. unmoved says the tip
// is the one accepted last, whose tree (named by the commit) was checked then.
func nodeTip(ctx context.Context, s Sources, ref, node string, snap gitsync.Snapshot, m mode, accepted string, unmoved bool, now time.Time) (string, error) {
	if !unmoved {
		// What the ref holds is checked before any of it is read.
		files, other, err := gitsync.Paths(snap)
		if err != nil {
			return fmt.Sprintf("cannot be read (%v)", err), nil
		}
		want := api.InventoryPath(node)
		if len(other) > 0 {
			slices.Sort(other)
			return fmt.Sprintf("holds %s, which is not a file (a symbolic link or a submodule); a node's ref may hold only the file %s", other[0], want), nil
		}
		for _, p := range files {
			if p != want {
				return fmt.Sprintf("holds %s; a node's ref may hold only %s", p, want), nil
			}
		}
		if len(files) == 0 {
			return "holds no " + want, nil
		}
	}
	if m.allowed == nil {
		return "", nil
	}
	return signedSince(ctx, s.Inventory, s.Signatures, m.allowed, ref, trust.NodePrincipal(node), accepted, snap.Commit(), now)
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

// status takes the JobRecords from the recorder's ref.
func status(ctx context.Context, s Sources, snap gitsync.Snapshot, oversized error, m mode, meta render.Metadata, prev map[string][]byte, now time.Time, in *Inputs) error {
	keep := func() {
		for p, b := range prev {
			if strings.HasPrefix(p, "status/") {
				in.put(p, b)
			}
		}
		if t := meta.Writers[StatusBranch]; t != "" {
			in.Writers[StatusBranch] = t
		}
	}
	if oversized != nil {
		in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: too large to read (%v); the records verified before are kept", StatusBranch, oversized))
		keep()
		return nil
	}
	if snap == nil {
		if m.allowed != nil {
			keep()
		}
		return nil
	}
	why := ""
	// What the ref holds is checked before any of it is read.
	paths, other, err := gitsync.Paths(snap)
	if err != nil {
		why = fmt.Sprintf("cannot be read (%v)", err)
	}
	if len(other) > 0 && why == "" {
		slices.Sort(other)
		why = fmt.Sprintf("holds %s, which is not a file (a symbolic link or a submodule); the recorder's ref may hold only files under status/jobs/", other[0])
	}
	for _, p := range paths {
		if !strings.HasPrefix(p, "status/jobs/") && why == "" {
			why = fmt.Sprintf("holds %s; the recorder's ref may hold only status/jobs/", p)
		}
	}
	var files map[string][]byte
	if why == "" {
		if files, err = snap.Files(""); err != nil {
			why = fmt.Sprintf("cannot be read (%v)", err)
		}
	}
	if why == "" && m.allowed != nil {
		if why, err = signedSince(ctx, s.Main, s.Signatures, m.allowed, StatusBranch, trust.PrincipalRecorder, meta.Writers[StatusBranch], snap.Commit(), now); err != nil {
			return err
		}
	}
	if why != "" {
		in.Untrusted = append(in.Untrusted, fmt.Sprintf("%s: commit %s %s; the records verified before are kept", StatusBranch, short(snap.Commit()), why))
		keep()
		return nil
	}
	for p, b := range files {
		in.put(p, b)
	}
	in.Writers[StatusBranch] = snap.Commit()
	return nil
}

// treeSnap is a Snapshot of files held in memory: the source inputs the renderer mirrored.
type treeSnap struct {
	commit string
	files  map[string][]byte
}

func treeSnapshot(commit string, prev map[string][]byte) *treeSnap {
	files := map[string][]byte{}
	for p, b := range prev {
		if IsPeoplePath(p) {
			files[p] = b
		}
	}
	return &treeSnap{commit: commit, files: files}
}

func modeOfTree(prev map[string][]byte) mode { return modeAt(treeSnapshot("", prev)) }

func (t *treeSnap) Commit() string        { return t.commit }
func (t *treeSnap) CommitTime() time.Time { return time.Time{} }
func (t *treeSnap) ReadFile(name string) ([]byte, error) {
	b, ok := t.files[name]
	if !ok {
		return nil, fmt.Errorf("reading %s: %w", name, fs.ErrNotExist)
	}
	return b, nil
}
func (t *treeSnap) Files(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for p, b := range t.files {
		if dir == "" || strings.HasPrefix(p, dir+"/") {
			out[p] = b
		}
	}
	return out, nil
}

// AcceptedTip returns what a writer that must start a new line on ref (gitsync.WithRecoverFrom)
// reads to name the tip it replaces: the tip of ref the renderer accepted last, from the render
// metadata at the head of the rendered branch. It is read, not verified: the renderer takes the
// new line only when it names exactly the tip it accepted itself. It reads the whole rendered
// branch once, only when a writer recovers.
func AcceptedTip(rendered interface {
	Snapshot(ctx context.Context) (gitsync.Snapshot, error)
}, ref string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		snap, err := rendered.Snapshot(ctx)
		if err != nil {
			return "", err
		}
		data, err := snap.ReadFile(render.MetadataPath)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return render.ParseMetadata(data).Writers[ref], nil
	}
}
