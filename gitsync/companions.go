package gitsync

// Companion branches (Change.Companions), and the refs that stand in the way of a branch a push
// creates.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// companionCommands returns the ref updates that bring c's companions to commit (see
// Change.Companions), and the objects they need; advertised holds the server's refs.
func (r *Repository) companionCommands(advertised map[plumbing.ReferenceName]plumbing.Hash, commit plumbing.Hash, c *Change) ([]*packp.Command, []plumbing.Hash, error) {
	if c == nil || len(c.CompanionPrefixes) == 0 {
		return nil, nil, nil
	}
	moves, deletes, err := r.staleCompanions(advertised, commit, c)
	if err != nil {
		return nil, nil, err
	}
	var cmds []*packp.Command
	var objects []plumbing.Hash
	b := &commitBuilder{s: r.repo.Storer, signer: r.signer}
	author := object.Signature{Name: c.Author.Name, Email: c.Author.Email, When: c.Author.When}
	committer := object.Signature{Name: c.committer().Name, Email: c.committer().Email, When: c.committer().When}
	for _, m := range moves {
		h, err := b.commit(&object.Commit{Author: author, Committer: committer, TreeHash: m.root,
			Message: fmt.Sprintf("%s of %s at %s\n\n%s: %s\n", m.folder, r.branch.Short(), commit, TrailerCompanion, m.folder)})
		if err != nil {
			return nil, nil, err
		}
		cmds = append(cmds, &packp.Command{Name: m.ref, Old: advertised[m.ref], New: h})
		objects = append(objects, m.trees...)
	}
	for _, ref := range deletes {
		cmds = append(cmds, &packp.Command{Name: ref, Old: advertised[ref], New: plumbing.ZeroHash})
	}
	return cmds, append(objects, b.created...), nil
}

// lacksCompanionTips reports whether the store lacks the commit of a companion's tip the server
// advertised (one someone else pushed, or that a new Repository never read).
func (r *Repository) lacksCompanionTips(advertised map[plumbing.ReferenceName]plumbing.Hash, c *Change) bool {
	for name := range c.Companions {
		tip, ok := advertised[plumbing.NewBranchReferenceName(name)]
		if ok && r.repo.Storer.HasEncodedObject(tip) != nil {
			return true
		}
	}
	return false
}

// companionMove is a companion that needs a new commit, whose tree is root; trees are the tree
// objects that wrap the folder up to root, which the push must send.
type companionMove struct {
	ref    plumbing.ReferenceName
	folder string
	root   plumbing.Hash
	trees  []plumbing.Hash
}

// staleCompanions compares the companions' tips (branch to commit, as the server has them) with
// commit: the companions that need a new commit, and the branches under the prefix to delete.
func (r *Repository) staleCompanions(tips map[plumbing.ReferenceName]plumbing.Hash, commit plumbing.Hash, c *Change) ([]companionMove, []plumbing.ReferenceName, error) {
	head, err := object.GetCommit(r.repo.Storer, commit)
	if err != nil {
		return nil, nil, fmt.Errorf("reading commit %s: %w", commit, err)
	}
	headTree, err := head.Tree()
	if err != nil {
		return nil, nil, fmt.Errorf("reading tree of %s: %w", commit, err)
	}
	var moves []companionMove
	// The tips kept now are all the next call needs to remember.
	kept := map[plumbing.Hash]bool{}
	defer func() { r.keptCompanions = kept }()
	for _, name := range slices.Sorted(maps.Keys(c.Companions)) {
		ref, folder := plumbing.NewBranchReferenceName(name), c.Companions[name]
		sub, err := headTree.Tree(folder)
		if err != nil {
			return nil, nil, fmt.Errorf("companion %s: folder %s of %s: %w", name, folder, commit, err)
		}
		tb := &commitBuilder{s: r.repo.Storer}
		root, err := tb.folderTree(folder, sub.Hash)
		if err != nil {
			return nil, nil, err
		}
		if tip, ok := tips[ref]; !ok || !r.keepCompanion(tip, root, c.KeepCompanion, kept) {
			moves = append(moves, companionMove{ref, folder, root, tb.created})
		}
	}
	var deletes []plumbing.ReferenceName
	for _, ref := range slices.Sorted(maps.Keys(tips)) {
		// Not ReferenceName.Short, which tries every rule of git's rev-parse: tips holds every
		// ref of a fleet's repository.
		short, branch := strings.CutPrefix(ref.String(), "refs/heads/")
		if _, ok := c.Companions[short]; !ok && branch && c.companion(short) && ref != r.branch {
			deletes = append(deletes, ref)
		}
	}
	return moves, deletes, nil
}

// keepCompanion reports whether a companion at tip may stay: tip is a commit this store holds,
// keep accepts it, and its tree is root. A tip keep accepted once is not asked again (a commit
// does not change, and keep is the writer's own check of its signature): a render has a
// companion for each of 256 shards, whose signatures took a fifth of a fleet's re-render.
// The tips kept are added to kept.
func (r *Repository) keepCompanion(tip, root plumbing.Hash, keep func(*Commit) bool, kept map[plumbing.Hash]bool) bool {
	c, err := object.GetCommit(r.repo.Storer, tip)
	if err != nil || c.TreeHash != root {
		return false
	}
	if keep == nil || r.keptCompanions[tip] {
		kept[tip] = true
		return true
	}
	k, err := r.commitOf(context.Background(), r.branch.Short(), tip.String(), false)
	if err != nil || !keep(k) {
		return false
	}
	kept[tip] = true
	return true
}

// companionTips fetches the branches under prefixes into the store and returns their tips, so a
// render with nothing to commit can tell whether its companions are in order without opening a
// push, and keepCompanion can read them. It returns nil if they could not be read: a tip under
// the prefix is anyone's who can push there, so one too large to fetch must not stop the render;
// the push then replaces every companion whose tip the store lacks.
func (r *Repository) companionTips(ctx context.Context, prefixes []string) map[plumbing.ReferenceName]plumbing.Hash {
	snaps, err := r.branches(ctx, prefixes...)
	if err != nil {
		r.log.Info("reading the companion branches failed; the push replaces those it cannot read", "prefixes", prefixes, "error", r.redact.wrap(err).Error())
		return nil
	}
	tips := make(map[plumbing.ReferenceName]plumbing.Hash, len(snaps))
	for name, s := range snaps {
		tips[plumbing.NewBranchReferenceName(name)] = plumbing.NewHash(s.Commit())
	}
	return tips
}

// atomicFailure reports whether a command's status says only that the atomic push it was part of
// failed.
func atomicFailure(status string) bool {
	return strings.Contains(status, "atomic push failure") || strings.Contains(status, "atomic transaction failed")
}

// refBlockers lists the advertised refs, other than those the commands write, that keep git from
// creating a ref a command creates: a ref named as a folder of it, or under it as a folder. Only
// gitbroker's own refs (refs/heads/gitbroker and under it) are listed: a branch of the people's
// in the way of a rendered branch named by --rendered-branch stays, and the push fails.
func refBlockers(advertised map[plumbing.ReferenceName]plumbing.Hash, cmds []*packp.Command) []plumbing.ReferenceName {
	writes := map[plumbing.ReferenceName]bool{}
	for _, c := range cmds {
		writes[c.Name] = true
	}
	var out []plumbing.ReferenceName
	for name := range advertised {
		if writes[name] || name != "refs/heads/gitbroker" && !strings.HasPrefix(name.String(), "refs/heads/gitbroker/") {
			continue
		}
		for _, c := range cmds {
			n, b := c.Name.String(), name.String()
			if c.New != plumbing.ZeroHash && c.Old == plumbing.ZeroHash && (strings.HasPrefix(n, b+"/") || strings.HasPrefix(b, n+"/")) {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// deleteRefs deletes refs, each only from the value advertised (a compare-and-swap), in a push
// of its own on sess, and logs it.
func (r *Repository) deleteRefs(ctx context.Context, sess transport.ReceivePackSession, refs []plumbing.ReferenceName, advertised map[plumbing.ReferenceName]plumbing.Hash) error {
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return fmt.Errorf("pushing to %s: %w", r.URL(), err)
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	if ar.Capabilities.Supports(capability.Sideband64k) {
		_ = req.Capabilities.Set(capability.Sideband64k)
		req.Progress = io.Discard
	}
	names := make([]string, 0, len(refs))
	for _, ref := range refs {
		req.Commands = append(req.Commands, &packp.Command{Name: ref, Old: advertised[ref], New: plumbing.ZeroHash})
		names = append(names, ref.String())
	}
	r.log.Info("deleting refs that keep this writer from creating its branches (a branch named as a folder of one of them, or the other way round)", "refs", names)
	rs, err := sess.ReceivePack(ctx, req)
	if rs != nil {
		for _, cs := range rs.CommandStatuses {
			if cs.Status != "ok" && !movedRef(cs.Status) {
				return &writerError{fmt.Errorf("pushing to %s: the server refused to delete %s, which keeps this writer from creating its branches: %s", r.URL(), cs.ReferenceName, cs.Status)}
			}
		}
	}
	if err != nil && rs == nil {
		return fmt.Errorf("pushing to %s: %w", r.URL(), err)
	}
	return nil
}
