package verify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/trust"
)

// nodes takes each node's inventory from its ref. With mirrored, prev holds the file of each
// tip meta.Writers names as it was read: a tip that has not moved is taken from there (its
// signature is still checked, against today's allowed_signers and clock).
func (w *writers) nodes(ctx context.Context, refs map[string]gitsync.Snapshot, oversized map[string]error, mirrored bool) error {
	s, m, meta, prev, now, in := w.s, w.trust, w.meta, w.prev, w.now, w.in
	keep := w.keepNode
	seen := map[string]bool{}
	// A ref too large to read is not read: the node's part stays as it was accepted.
	for _, ref := range slices.Sorted(maps.Keys(oversized)) {
		node, ok := strings.CutPrefix(ref, InventoryPrefix)
		if !ok || len(validation.IsDNS1123Subdomain(node)) > 0 {
			continue
		}
		seen[node] = true
		if why := w.revoked(ctx, ref); why != "" {
			in.reject(Rejection{Writer: trust.NodePrincipal(node), Ref: ref, Reason: why})
			continue
		}
		in.reject(Rejection{Writer: trust.NodePrincipal(node), Ref: ref,
			Reason: fmt.Sprintf("too large to read (%v); the node's last verified inventory is kept", oversized[ref])})
		keep(ref, node)
	}
	for _, ref := range slices.Sorted(maps.Keys(refs)) {
		if !strings.HasPrefix(ref, InventoryPrefix) || oversized[ref] != nil {
			continue
		}
		node := strings.TrimPrefix(ref, InventoryPrefix)
		if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
			in.reject(Rejection{Writer: trust.NodePrincipal(node), Ref: ref, Commit: refs[ref].Commit(),
				Reason: fmt.Sprintf("%q is not a node name: %s", node, strings.Join(msgs, "; "))})
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
			if dropped := w.revoked(ctx, ref); dropped != "" {
				in.reject(Rejection{Writer: trust.NodePrincipal(node), Ref: ref, Commit: snap.Commit(),
					Reason: fmt.Sprintf("commit %s %s; %s", short(snap.Commit()), why, dropped)})
				continue
			}
			kept := "the node's last verified inventory is kept"
			if _, ok := prev[api.InventoryPath(node)]; !ok {
				kept = "nothing of this node is rendered"
			}
			in.reject(Rejection{Writer: trust.NodePrincipal(node), Ref: ref, Commit: snap.Commit(),
				Reason: fmt.Sprintf("commit %s %s; %s", short(snap.Commit()), why, kept)})
			keep(ref, node)
			continue
		}
		b := mirror
		if !unmoved {
			if b, err = snap.ReadFile(p); errors.Is(err, gitsync.ErrTooLarge) {
				in.reject(Rejection{Writer: trust.NodePrincipal(node), Ref: ref, Commit: snap.Commit(),
					Reason: fmt.Sprintf("commit %s: %v; the node's last verified inventory is kept", short(snap.Commit()), err)})
				keep(ref, node)
				continue
			} else if err != nil {
				return err
			}
		}
		in.put(p, b)
		in.Writers[ref] = snap.Commit()
	}
	w.goneNodes(ctx, seen)
	return nil
}

// keepNode keeps a node's part as the previous render verified it: its mirrored inventory and
// its accepted tip.
func (w *writers) keepNode(ref, node string) {
	p := api.InventoryPath(node)
	if b, ok := w.prev[p]; ok {
		w.in.put(p, b)
	}
	if t := w.meta.Writers[ref]; t != "" {
		w.in.Writers[ref] = t
	}
}

// revoked says, when the tip of ref accepted last was signed by a key .gitbroker/revoked_keys
// now revokes, that the node is decommissioned and its inventory dropped, as removing its
// enrolment does: for a fleet enrolled through an SSH CA, revocation is the only way to retire
// one node. "" when the node's part may be kept.
func (w *writers) revoked(ctx context.Context, ref string) string {
	accepted := w.meta.Writers[ref]
	if w.trust.allowed == nil || accepted == "" {
		return ""
	}
	c, err := w.s.Inventory.CommitOf(ctx, ref, accepted)
	if err != nil {
		return "" // gone with its ref: the enrolment decides (goneNodes)
	}
	sig, err := w.s.Signatures.verify(c)
	if err != nil || !w.trust.allowed.Revoked(sig.Key) {
		return ""
	}
	return fmt.Sprintf("the tip accepted last, %s, was signed by a key %s revokes: the node is decommissioned and nothing of it is rendered", short(accepted), RevokedKeysPath)
}

// goneNodes keeps the last verified inventory of each node whose ref is gone (not in seen)
// while it is enrolled: deleting a ref needs no signature. Unverified, a gone ref is a gone
// node.
func (w *writers) goneNodes(ctx context.Context, seen map[string]bool) {
	if w.trust.allowed == nil {
		return
	}
	for p := range w.prev {
		if !api.IsInventoryPath(p) {
			continue
		}
		node := strings.TrimSuffix(strings.TrimPrefix(p, api.InventoryDir+"/"), ".yaml")
		if seen[node] || !w.trust.allowed.Enrolled(trust.NodePrincipal(node), w.now) {
			continue // removed from allowed_signers by a person: decommissioned
		}
		ref := InventoryBranch(node)
		if why := w.revoked(ctx, ref); why != "" {
			w.in.reject(Rejection{Writer: trust.NodePrincipal(node), Ref: ref, Reason: why})
			continue
		}
		w.in.reject(Rejection{Writer: trust.NodePrincipal(node), Ref: ref,
			Reason: fmt.Sprintf("the ref is gone, but node %s is still enrolled; its last verified inventory is kept (remove its line from %s to decommission it)", node, AllowedSignersPath)})
		w.keepNode(ref, node)
	}
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
