package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
)

// maxRenderedWalk bounds the search for the renderer's own last commit.
const maxRenderedWalk = 1000

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
		if (tip.allowed != nil || tip.err != nil) && s.PublishedBefore != nil && s.Adopt == "" {
			published, err := s.PublishedBefore(ctx)
			if err != nil {
				return nil, nil, err
			}
			if published != "" {
				return nil, nil, fmt.Errorf("%s is gone, but this renderer published %s on %s, so it rendered before: starting over would accept replayed writer commits and forget every record. Push its last render back to %s, or check a render commit and give --adopt-rendered <commit> (a render daemon that pushed last repairs the branch by itself)",
					s.RenderedBranch, short(published), ConfigurationsBranch, s.RenderedBranch)
			}
		}
		if (tip.allowed != nil || tip.err != nil) && s.Adopt == "" && !s.FirstRender {
			return nil, nil, fmt.Errorf("%w: %s does not exist, and %s enrolls writers, so this render would start from nothing: it would accept whatever each writer's ref holds now (an older commit pushed back included) and forget every JobRecord. A render from nothing happens once in a repository's life: if this is its first render, give --%s; if it was rendered before, someone deleted the renderer's branches: push its last render back to %s (from any clone, or the GitOps tool's copy), or check a render commit and give --adopt-rendered <commit>",
				ErrNoPreviousRender, s.RenderedBranch, AllowedSignersPath, FlagFirstRender, s.RenderedBranch)
		}
		return map[string][]byte{}, map[string][]byte{}, nil
	}
	if tip.allowed == nil && tip.err == nil {
		if head == "" {
			return map[string][]byte{}, map[string][]byte{}, nil
		}
		in.Previous = head
		return s.filesOf(rendered)
	}
	own, want, err := ownCheck(s, tip)
	if err != nil {
		return nil, nil, err
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
			in.reject(Rejection{Writer: WriterRenderer, Ref: s.RenderedBranch, Commit: head,
				Reason: fmt.Sprintf("this renderer pushed %s last, and the branch %s; it is rendered over from %s", short(last), what, short(last))})
			in.Previous, in.Overwrite = last, true
			if rendered, rest, ok := s.known(last); ok {
				return rendered, rest, nil
			}
			snap, err := pushedLast(ctx, s, last, own)
			if err != nil {
				return nil, nil, fmt.Errorf("%s does not descend from %s, the commit this renderer pushed last, which cannot be read (%v): push that commit back to %s, or check the branch and give --adopt-rendered <commit>",
					s.RenderedBranch, short(last), err, s.RenderedBranch)
			}
			return s.filesOf(snap)
		}
	}
	if found == nil {
		if wrong := wrongRendererKey(s, tip); wrong != "" {
			return nil, nil, fmt.Errorf("no render commit on %s is signed by this renderer's key (%s), and %s: give the renderer the key enrolled as %s (adopting the branch with this key would sign renders and the agents' publication as someone else)",
				s.RenderedBranch, want, wrong, trust.PrincipalRenderer)
		}
		return nil, nil, fmt.Errorf("no render commit on %s is signed by this renderer's key (%s): if this is the first render with %s, or the renderer has a new key, enroll the key as %s there (gitbroker enroll --principal %s), check the branch and give --adopt-rendered <commit> once to start from that commit",
			s.RenderedBranch, want, AllowedSignersPath, trust.PrincipalRenderer, trust.PrincipalRenderer)
	}
	if found.Commit() != head {
		in.Overwrite = true
		in.reject(Rejection{Writer: WriterRenderer, Ref: s.RenderedBranch, Commit: head,
			Reason: fmt.Sprintf("%s is not a render signed by this renderer; everything after its own commit %s is dropped and rendered over", short(head), short(found.Commit()))})
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

// ownCheck returns how a commit is told to be this renderer's own (its key, or for a plan, which
// holds none, a key allowed_signers lists as renderer), and that key named for messages.
// wrongRendererKey says how the renderer's own SSH key is enrolled when it is enrolled, but not
// as renderer: a node's or a person's key given as --signing-key by mistake ("" otherwise).
func wrongRendererKey(s Sources, tip mode) string {
	key, isSSH := s.Renderer.(*trust.Signer)
	if !isSSH || tip.allowed == nil {
		return ""
	}
	sig := &trust.Signature{Key: key.PublicKey(), Fingerprint: key.String()}
	principals := tip.allowed.Principals(sig, time.Now())
	switch {
	case slices.Contains(principals, trust.PrincipalRenderer):
		return ""
	case len(principals) == 0:
		// A new renderer key not enrolled yet: the usual hint (enroll it, adopt once).
		return ""
	}
	return fmt.Sprintf("%s enrolls that key as %s, not as %s", AllowedSignersPath, strings.Join(principals, ", "), trust.PrincipalRenderer)
}

func ownCheck(s Sources, tip mode) (own func(*gitsync.Commit) bool, want string, err error) {
	switch {
	case s.Renderer != nil:
		want = s.Renderer.String()
	case s.AnyListedRenderer && tip.allowed != nil:
		want = "a key " + AllowedSignersPath + " lists as renderer"
	default:
		return nil, "", fmt.Errorf("%s exists on %s, so the renderer must sign: give it --signing-key", AllowedSignersPath, s.SourceBranch)
	}
	own = func(c *gitsync.Commit) bool {
		if c.Hash == s.Adopt {
			return true
		}
		if s.Renderer != nil {
			return s.Renderer.Verifies(c.Raw)
		}
		// Only a plan, holding no key, gets here: the keys listed as renderer.
		payload, armored := trust.SplitSignedCommit(c.Raw)
		if trust.IsOpenPGP(armored) {
			if tip.renderers.Empty() {
				return false
			}
			_, err := tip.renderers.Verify(payload, armored, c.When)
			return err == nil
		}
		sig, err := trust.VerifySignature(payload, armored)
		return err == nil && tip.allowed.Allows(sig, trust.PrincipalRenderer, c.When)
	}
	return own, want, nil
}

// pushedLast reads the commit this renderer pushed last when the rendered branch no longer
// reaches it (deleted, or moved back, while the daemon was down): from the branch's history
// if it is there, else asked for by hash, as the server still holds it. The hash comes from
// the daemon's Lease, which no writer of the repository can change; the commit must still be
// a render signed by this renderer, as any previous render must.
func pushedLast(ctx context.Context, s Sources, last string, own func(*gitsync.Commit) bool) (gitsync.Snapshot, error) {
	snap, err := s.Main.SnapshotOf(ctx, s.RenderedBranch, last)
	if err == nil {
		return snap, nil
	}
	if ferr := s.Main.FetchCommit(ctx, last); ferr != nil {
		return nil, fmt.Errorf("%v; %v", err, ferr)
	}
	c, err := s.Main.CommitOf(ctx, s.RenderedBranch, last)
	if err != nil {
		return nil, err
	}
	if !isRender(c, own) {
		return nil, fmt.Errorf("%s is not a render commit signed by this renderer", short(last))
	}
	return s.Main.SnapshotOf(ctx, s.RenderedBranch, last)
}
