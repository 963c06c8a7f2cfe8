// Package verify gathers the renderer's inputs from every writer's ref and keeps only what it
// verified (docs/DESIGN.md, "Trust: an edge credential reaches only its own node"): the source
// branch along first parents, each commit signed by a person; each node's inventory from a tip that
// node signed, holding only its own file and descending from the tip accepted last; the recorder's
// records from a tip it signed; and the previous rendered/ and history/ from the renderer's own
// last signed commit. A rejected input freezes only its writer's part: the part the renderer
// accepted before is used instead.
//
// Without .gitbroker/allowed_signers on the source branch nothing is verified but the layout
// (a node's ref holds only that node's file), and Inputs.Trust says so.
package verify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
)

// The refs of a repository (docs/FORMATS.md, the repository's layout).
const (
	InventoryPrefix = api.InventoryPrefix
	StatusBranch    = api.StatusBranch
	RenderedBranch  = api.RenderedBranch
)

// Files on the source branch that say who is trusted (api's, named here too).
const (
	AllowedSignersPath = api.AllowedSignersPath
	TrustPath          = api.TrustPath
	RevokedKeysPath    = api.RevokedKeysPath
	TrustedKeysDir     = api.TrustedKeysDir
	RendererKeysDir    = api.RendererKeysDir
)

// IsPeoplePath reports whether a path belongs to the people's branch: gitbroker.yaml,
// configurations/ and .gitbroker/.
func IsPeoplePath(p string) bool {
	return p == api.SettingsPath || api.IsConfigurationPath(p) || strings.HasPrefix(p, ".gitbroker/")
}

// InventoryBranch is the ref the agent of node writes.
func InventoryBranch(node string) string { return api.InventoryBranch(node) }

// ErrNoPreviousRender is a verified render that finds no previous render to start from and was
// not told that this is the repository's first (Sources.FirstRender). The caller refuses it: it
// renders and commits nothing.
var ErrNoPreviousRender = errors.New("no previous render")

// FlagFirstRender is the render command's flag that sets Sources.FirstRender, named in messages.
const FlagFirstRender = "first-render"

// Reader reads refs and commits of a remote; *gitsync.Repository implements it.
type Reader interface {
	Branches(ctx context.Context, names ...string) (map[string]gitsync.Snapshot, error)
	CommitOf(ctx context.Context, branch, hash string) (*gitsync.Commit, error)
	IsAncestor(ctx context.Context, branch, ancestor, tip string) (bool, error)
	FirstParents(ctx context.Context, branch, tip, stop string, max int) ([]*gitsync.Commit, bool, error)
	SnapshotOf(ctx context.Context, branch, hash string) (gitsync.Snapshot, error)
	// FetchCommit asks the server for a commit no branch may hold any more, by its hash.
	FetchCommit(ctx context.Context, hash string) error
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
	// Renderer is the renderer's --signing-key, SSH or OpenPGP (for Argo CD): a commit on the
	// rendered branch is the renderer's own when this key signed it. Required when
	// allowed_signers exists, except for a plan (AnyListedRenderer).
	Renderer trust.Identity
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
	// PublishedBefore, when set, says whether this renderer published before (a commit of
	// ConfigurationsBranch it signed): with verification on, a rendered branch that is gone is
	// then not a first render, and is never started over from nothing, which would accept
	// replayed writer commits and forget every record.
	PublishedBefore func(ctx context.Context) (string, error)
	// FirstRender is the caller's word that the repository has never been rendered: with
	// verification on, a rendered branch that does not exist (and no LastPushed) is rendered
	// from nothing only then, and is otherwise ErrNoPreviousRender. Every other trace of a
	// previous render lives on refs that a writer's credential may delete, so only a person
	// (render --first-render) or the render daemon's own Lease, which no writer reaches, can
	// say a start from nothing is the repository's first.
	FirstRender bool
	// LastPushed is the rendered branch's commit this renderer pushed (or rendered on) last, as
	// a render daemon remembers it (in memory and in its leader Lease). With verification, a
	// branch that does not descend from it is reported and rendered over from it, never
	// adopted: pushing an older render back must not bring back what it accepted.
	LastPushed string
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
	// Rejections are the inputs refused for who wrote them, sorted as Untrusted.
	Rejections []Rejection
	// Untrusted are the rejections as sentences (Rejection.String), sorted.
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
	refs, err := fetchRefs(ctx, s)
	if err != nil {
		return nil, err
	}
	tip := refs.main[s.SourceBranch]
	in := &Inputs{Inputs: render.Tree{}, Writers: map[string]string{}}
	var src gitsync.Snapshot
	var m mode
	var owned, prev map[string][]byte
	var meta render.Metadata
	if tooLarge := refs.oversized[s.SourceBranch]; tooLarge != nil {
		// A source branch too large to read is an input refused, not a failed render: the
		// people's part stays as rendered last (verified as then), and the writers' parts keep
		// rendering. The renderer's own previous commit is found as under verification.
		if owned, prev, err = previous(ctx, s, rendered, mode{err: tooLarge}, in); err != nil {
			return nil, err
		}
		meta = render.ParseMetadata(owned[render.MetadataPath])
		if meta.SourceCommit == "" {
			return nil, fmt.Errorf("reading %s: %w", s.SourceBranch, tooLarge)
		}
		in.reject(Rejection{Writer: WriterPeople, Ref: s.SourceBranch,
			Reason: fmt.Sprintf("too large to read (%v); rendering stays at %s, rendered last, and the writers' parts keep rendering", tooLarge, short(meta.SourceCommit))})
		src, m = treeSnapshot(meta.SourceCommit, prev), modeOfTree(prev)
		in.SourceTip = meta.SourceCommit
	} else {
		in.SourceTip = tip.Commit()
		// The mode at the source tip decides whether the renderer's own commits must be found;
		// the mode that governs the walk is the one at the last rendered source commit.
		tipMode := modeAt(tip)
		// prev are the inputs the previous render mirrored beside its output.
		if owned, prev, err = previous(ctx, s, rendered, tipMode, in); err != nil {
			return nil, err
		}
		meta = render.ParseMetadata(owned[render.MetadataPath])
		if src, m, err = source(ctx, s, tip, tipMode, meta.SourceCommit, prev, in); err != nil {
			return nil, err
		}
	}
	in.Rendered = owned
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
	in.Trust = m.guarantee(s.SourceBranch)

	// Whether prev is the caller's own render held in memory: its inventories are then exactly
	// the files of the tips it accepted, so a tip that has not moved need not be read again.
	_, _, mirrored := s.known(in.Previous)
	w := &writers{s: s, trust: m, meta: meta, prev: prev, now: s.Now(), in: in}
	if err := w.nodes(ctx, refs.nodes, refs.oversized, mirrored); err != nil {
		return nil, err
	}
	if err := w.status(ctx, oneRecorder(), refs.main[StatusBranch], refs.oversized[StatusBranch]); err != nil {
		return nil, err
	}
	if err := w.clusterStatus(ctx, refs); err != nil {
		return nil, err
	}
	in.Newest = newest(in, refs)
	in.sentences()
	s.Signatures.rotate()
	return in, nil
}

// writers is what checking the writers' refs (nodes, status) shares: the trust in force, the
// previous render's metadata and mirrored inputs, the render's clock, and the Inputs they fill.
type writers struct {
	s     Sources
	trust mode
	meta  render.Metadata
	prev  map[string][]byte
	now   time.Time
	in    *Inputs
}

// refsRead are the refs one Collect reads: the main repository's (source branch, status, and
// the node refs unless they have their own repository), the node refs, and those left out as
// too large to read.
type refsRead struct {
	main, nodes map[string]gitsync.Snapshot
	oversized   map[string]error
}

// fetchRefs fetches every ref a render reads, in one request per repository.
func fetchRefs(ctx context.Context, s Sources) (refsRead, error) {
	names := []string{s.SourceBranch, StatusBranch, StatusBranch + "/"}
	if s.Inventory == s.Main {
		names = append(names, InventoryPrefix)
	}
	var r refsRead
	var err error
	if r.main, err = s.Main.Branches(ctx, names...); err != nil {
		return r, err
	}
	r.nodes = r.main
	if s.Inventory != s.Main {
		if r.nodes, err = s.Inventory.Branches(ctx, InventoryPrefix); err != nil {
			return r, err
		}
	}
	r.oversized = map[string]error{}
	for _, reader := range []Reader{s.Main, s.Inventory} {
		if o, ok := reader.(interface{ Oversized() map[string]error }); ok {
			maps.Copy(r.oversized, o.Oversized())
		}
	}
	if _, ok := r.main[s.SourceBranch]; !ok && r.oversized[s.SourceBranch] == nil {
		return r, fmt.Errorf("%w: %s", gitsync.ErrNoBranch, s.SourceBranch)
	}
	return r, nil
}

// newest is the newest committer time among the source commit and the accepted tips.
func newest(in *Inputs, refs refsRead) time.Time {
	t := in.SourceTime
	for ref, hash := range in.Writers {
		snap := refs.nodes[ref]
		if ref == StatusBranch || strings.HasPrefix(ref, StatusBranch+"/") {
			snap = refs.main[ref]
		}
		if snap != nil && snap.Commit() == hash && snap.CommitTime().After(t) {
			t = snap.CommitTime()
		}
	}
	return t
}
