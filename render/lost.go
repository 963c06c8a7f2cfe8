package render

import (
	"fmt"
	"strings"
	"time"

	"github.com/gitbroker/gitbroker/api"
)

// loadNodeLosses reads the nodes the recorder found lost (docs/DESIGN.md, "Brokers heal
// and fail over"), by name. An invalid record is an error naming its file and counts for
// nothing: its node is not lost, so nothing moves on a record the renderer cannot read.
func (p *pass) loadNodeLosses() map[string]*api.NodeLoss {
	lost := map[string]*api.NodeLoss{}
	loadStatus(p, api.IsNodeLossPath, api.ParseNodeLossFile, func(_ string, n *api.ParsedNodeLoss) {
		if n == nil {
			return
		}
		lost[n.Name] = n.NodeLoss
		why := "NotReady"
		if n.Spec.Reason == api.NodeLossGone {
			why = "gone from the cluster"
		}
		p.warn("node %s is lost (%s since %s, as the recorder saw it): the brokers of shared devices it reports move to other nodes that report them; those of its unshared devices stay",
			n.Name, why, n.Spec.Since.UTC().Format(time.RFC3339))
	})
	return lost
}

// liveNodes are the nodes a shared instance's brokers may be placed on: those that report it
// and are not lost, or, when every one of them is lost, all of them (nowhere else can reach the
// device, and its brokers stay where they are). An unshared device has one node, which keeps it.
func liveNodes(in *instance, lost map[string]*api.NodeLoss) []string {
	if !in.shared || len(lost) == 0 {
		return in.nodes
	}
	var live []string
	for _, n := range in.nodes {
		if lost[n] == nil {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return in.nodes
	}
	return live
}

// lostKey names the lost nodes among an instance's: its broker placement is worked out again
// when they change.
func lostKey(in *instance, lost map[string]*api.NodeLoss) string {
	if !in.shared || len(lost) == 0 {
		return ""
	}
	var b strings.Builder
	for _, n := range in.nodes {
		if lost[n] != nil {
			b.WriteString(n)
			b.WriteByte(0)
		}
	}
	return b.String()
}

// lostReason says why a broker Deployment on a lost node goes, or "".
func (p *pass) lostReason(h *objectHead) string {
	n := p.loaded.lost[h.Metadata.Labels[api.LabelTargetNode]]
	if n == nil {
		return ""
	}
	return fmt.Sprintf("node %s is lost (%s since %s); the broker of this shared device moves to a node that reports it",
		n.Name, n.Spec.Reason, n.Spec.Since.UTC().Format(time.RFC3339))
}

// movedBroker reports whether a broker Deployment of the previous render is gone because its
// node is lost and its instance has a broker on another node now: a move, which the deletion
// budget does not count.
func (p *pass) movedBroker(id objectKey) bool {
	if id.kind != "deployment" || len(p.loaded.lost) == 0 {
		return false
	}
	f, ok := p.prevID(id)
	if !ok {
		return false
	}
	h := p.head(f, p.prev[f])
	if p.loaded.lost[h.Metadata.Labels[api.LabelTargetNode]] == nil {
		return false
	}
	ref, _ := parseObjectPath(f)
	in := p.instance(ref.namespace + "/" + ref.configuration + "/" + h.Metadata.Labels[api.LabelInstance])
	return in != nil && in.broker != nil && len(in.broker.nodes) > 0
}
