package render

import (
	"fmt"

	"github.com/gitbroker/gitbroker/api"
)

// checkSafety refuses renders that would remove too much: more than maxDeletionPercent of the
// broker objects, or all of them. Jobs retired to history are not deletions, and neither is a
// bare broker Pod of an older render whose Deployment replaces it, nor a broker moved off a lost
// node.
func (p *pass) checkSafety() string {
	newIDs := p.outIndex()
	removed := 0
	gone := func(id objectKey) {
		if _, kept := newIDs[id]; !kept && !p.output.retired[id] && p.upgradedPod(id) == "" && !p.movedBroker(id) {
			removed++
		}
	}
	if p.index.outFromDiff {
		// Every object of prev has one file, and only the diff's files took theirs away.
		for _, f := range p.output.diff {
			if ref, ok := parseObjectPath(f); ok {
				if was, _ := p.prevID(ref.key()); was != f {
					continue
				}
				gone(ref.key())
			}
		}
	} else {
		for id := range p.prevIndex() {
			gone(id)
		}
	}
	total := p.prevLen()
	if total == 0 || removed == 0 || removed <= p.loaded.settings.DeletionAllowance {
		return ""
	}
	if len(newIDs) == 0 {
		return fmt.Sprintf("the render would remove all %d broker objects and leave rendered/ empty; if that is intended, render again with --allow-deletions", total)
	}
	if max := p.loaded.settings.MaxDeletionPercent; removed*100 > max*total {
		return fmt.Sprintf("the render would remove %d of %d broker objects (%d%%), more than maxDeletionPercent (%d%%); check the inventory and Configurations, or render again with --allow-deletions", removed, total, removed*100/total, max)
	}
	return ""
}

// overBudgetNodes is asked when a render would break the fleet-wide deletion budget. It finds
// the nodes whose inventory alone would remove more than maxDeletionPercent of the broker
// objects pinned to them: a node that suddenly reports nothing (wiped, misconfigured, or
// compromised) is then held as it was, and the rest of the fleet renders instead of the whole
// render being refused. An object counts against a node only when its Configuration still
// exists and its instance is gone from that node; a person's change to Configurations stays
// judged fleet-wide.
func (p *pass) overBudgetNodes() map[string]string {
	newIDs := p.outIndex()
	total, removed := map[string]int{}, map[string]int{}
	for _, f := range p.prevPaths() {
		ref, ok := parseObjectPath(f)
		if !ok {
			continue
		}
		h := p.head(f, p.prev[f])
		nodes := h.nodes()
		_, kept := newIDs[ref.key()]
		gone := !kept && !p.output.retired[ref.key()] && p.upgradedPod(ref.key()) == "" && !p.movedBroker(ref.key())
		_, cfgOK := p.loaded.configs[ref.namespace+"/"+ref.configuration]
		var sees map[string]bool
		if in := p.instance(ref.namespace + "/" + ref.configuration + "/" + h.Metadata.Labels[api.LabelInstance]); in != nil {
			sees = map[string]bool{}
			for _, n := range in.nodes {
				sees[n] = true
			}
		}
		for _, n := range nodes {
			total[n]++
			if gone && cfgOK && !sees[n] {
				removed[n]++
			}
		}
	}
	held := map[string]string{}
	limit := p.loaded.settings.MaxDeletionPercent
	for _, n := range sortedKeys(removed) {
		if r, t := removed[n], total[n]; r > p.loaded.settings.DeletionAllowance && r*100 > limit*t {
			held[n] = fmt.Sprintf("node %s: its inventory would remove %d of its %d broker objects (%d%%), more than maxDeletionPercent (%d%%); its part is kept as it was while the rest renders (check the node, or render with --allow-deletions)",
				n, r, t, r*100/t, limit)
		}
	}
	return held
}

// upgradedPod is, for a bare broker Pod that renders before Deployments wrote, the Deployment
// that now runs its broker on the same node: the file of the broker's new form, or "" when the
// object is not such a Pod or its broker is gone. The Pod's own labels say its instance and
// node; the Deployment is found by the name the renderer gives it, shared or not.
func (p *pass) upgradedPod(id objectKey) string {
	if id.kind != "pod" {
		return ""
	}
	f, ok := p.prevID(id)
	if !ok {
		return ""
	}
	h := p.head(f, p.prev[f])
	inst, node := h.Metadata.Labels[api.LabelInstance], h.Metadata.Labels[api.LabelTargetNode]
	if inst == "" || node == "" {
		return ""
	}
	out := p.outIndex()
	for _, shared := range []bool{true, false} {
		if nf, ok := out[objectKey{"deployment", id.namespace, brokerName(inst, node, shared)}]; ok {
			if nh := p.head(nf, p.output.files[nf]); nh.Metadata.Labels[api.LabelInstance] == inst && nh.Metadata.Labels[api.LabelTargetNode] == node {
				return nf
			}
		}
	}
	return ""
}
