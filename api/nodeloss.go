package api

import (
	"path"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A NodeLoss is the recorder's statement that a node has been NotReady, or gone from the
// cluster, for longer than its node-loss grace (docs/DESIGN.md, "Brokers heal and fail over"). The
// recorder writes status/nodes/<node>.yaml on its own signed ref and removes it when the node is
// Ready again; the renderer then moves the brokers of the shared devices that node saw to other
// nodes that report them.
type NodeLoss struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NodeLossSpec `json:"spec"`
}

// NodeLossSpec says since when and why a node is lost.
type NodeLossSpec struct {
	// Since is when the node stopped being Ready (its Ready condition's last transition), or
	// when the recorder saw it deleted.
	Since metav1.Time `json:"since"`
	// Reason is NodeLossNotReady or NodeLossGone.
	Reason string `json:"reason"`
	// Message is the node's Ready condition's message, bounded.
	Message string `json:"message,omitempty"`
}

const (
	KindNodeLoss = "NodeLoss"
	// NodeLossNotReady is a node whose Ready condition is False or Unknown.
	NodeLossNotReady = "NotReady"
	// NodeLossGone is a node deleted from the cluster.
	NodeLossGone = "Gone"
	// NodeLossDir holds the NodeLoss records on the recorder's ref.
	NodeLossDir = "status/nodes"
	// MaxNodeLossMessageBytes bounds a NodeLoss message.
	MaxNodeLossMessageBytes = 1024
)

func init() {
	registerStatusKind(StatusKind{Kind: KindNodeLoss, Dir: NodeLossDir, IsPath: IsNodeLossPath, Layout: NodeLossDir + "/<node>.yaml"})
}

// NodeLossPath is where the recorder writes the loss of node.
func NodeLossPath(node string) string { return path.Join(NodeLossDir, node+".yaml") }

// IsNodeLossPath reports whether p is a NodeLoss record's path.
func IsNodeLossPath(p string) bool {
	rest, ok := strings.CutPrefix(p, NodeLossDir+"/")
	return ok && strings.HasSuffix(rest, ".yaml") && !strings.Contains(rest, "/")
}

// ParsedNodeLoss is one validated NodeLoss.
type ParsedNodeLoss struct {
	*NodeLoss
	Doc *Document
}

// ParseNodeLossFile decodes and validates status/nodes/<node>.yaml: one NodeLoss of a valid node
// name, the one its file names, with a time, a known reason and a bounded message.
func ParseNodeLossFile(file string, data []byte) (*ParsedNodeLoss, ErrorList) {
	var n NodeLoss
	d, errs := decodeOne(file, data, KindNodeLoss, &n)
	if len(errs) > 0 {
		return nil, errs
	}
	add := func(field, format string, args ...any) { errs = append(errs, d.Errorf(field, format, args...)) }
	switch {
	case n.Name == "":
		add("metadata.name", "required")
	case len(validation.IsDNS1123Subdomain(n.Name)) > 0:
		add("metadata.name", "%q is not a valid node name", n.Name)
	case file != NodeLossPath(n.Name):
		add("metadata.name", "the loss of node %s must be at %s", n.Name, NodeLossPath(n.Name))
	}
	if n.Namespace != "" {
		add("metadata.namespace", "a node has no namespace")
	}
	if n.Spec.Since.IsZero() {
		add("spec.since", "required")
	}
	if n.Spec.Reason != NodeLossNotReady && n.Spec.Reason != NodeLossGone {
		add("spec.reason", "must be %s or %s, got %q", NodeLossNotReady, NodeLossGone, n.Spec.Reason)
	}
	if len(n.Spec.Message) > MaxNodeLossMessageBytes || !utf8.ValidString(n.Spec.Message) {
		add("spec.message", "at most %d bytes of UTF-8", MaxNodeLossMessageBytes)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &ParsedNodeLoss{NodeLoss: &n, Doc: d}, nil
}
