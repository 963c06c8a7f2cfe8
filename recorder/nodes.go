package recorder

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
)

// DefaultNodeLossGrace is how long a node is NotReady or gone before the recorder records it
// lost (DESIGN.md, "Seconds, not minutes"): Akri frees a node's slots when it turns NotReady,
// and the node controller has already waited its own monitor grace (40-50 s of silent
// kubelet) before it says NotReady, so 30 s more moves a dead node's shared brokers within
// about 90 s while a kubelet restart (NotReady for seconds) moves nothing.
const DefaultNodeLossGrace = 30 * time.Second

// nodeState is what the recorder knows of a node that is not Ready: since when and why.
type nodeState struct {
	since   time.Time
	reason  string
	message string
}

// nodes follows the cluster's nodes (get, list and watch on nodes; nothing else) and keeps
// status/nodes/ on the recorder's ref: a node NotReady or gone for longer than the grace has a
// NodeLoss there, removed when the node is Ready again.
type nodes struct {
	grace time.Duration
	now   func() time.Time
	// wake tells the flush loop that something changed.
	wake chan struct{}

	mu      sync.Mutex
	synced  bool
	present map[string]bool      // nodes in the cluster
	down    map[string]nodeState // nodes that are not Ready (or gone), by name
}

func newNodes(grace time.Duration, now func() time.Time) *nodes {
	return &nodes{grace: grace, now: now, wake: make(chan struct{}, 1), present: map[string]bool{}, down: map[string]nodeState{}}
}

func init() {
	registerStatusWriter(func(r *Recorder) statusWriter {
		r.nodes = newNodes(r.opts.NodeLossGrace, r.opts.Now)
		return statusWriter{kind: api.KindNodeLoss, what: "node losses", on: r.opts.NodeLossGrace > 0,
			watch: r.watchNodes, wake: r.nodes.wake, flush: r.FlushNodes}
	})
}

// observe takes a node's state from its Ready condition.
func (n *nodes) observe(node *corev1.Node) {
	var ready *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			ready = &node.Status.Conditions[i]
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.present[node.Name] = true
	if ready != nil && ready.Status == corev1.ConditionTrue {
		delete(n.down, node.Name)
		return
	}
	old, known := n.down[node.Name]
	st := nodeState{since: n.now(), reason: api.NodeLossNotReady}
	if ready != nil {
		st.message = ready.Message
		if !ready.LastTransitionTime.IsZero() {
			st.since = ready.LastTransitionTime.Time
		}
	}
	if known && old.reason == api.NodeLossNotReady && ready != nil && ready.LastTransitionTime.IsZero() {
		st.since = old.since // no transition time: keep the first time it was seen down
	}
	n.down[node.Name] = st
}

// gone records a node deleted from the cluster.
func (n *nodes) gone(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.present, name)
	n.down[name] = nodeState{since: n.now(), reason: api.NodeLossGone, message: "the Node was deleted from the cluster"}
}

// desired is status/nodes/ as it should be on a head that holds existing: a NodeLoss for every
// node down for longer than the grace, those of nodes the recorder never saw kept (a node deleted
// while it was not running), and the next time one becomes due.
func (n *nodes) desired(existing map[string][]byte) (map[string][]byte, time.Time, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	out := map[string][]byte{}
	for p, b := range existing {
		node := strings.TrimSuffix(strings.TrimPrefix(p, api.NodeLossDir+"/"), ".yaml")
		if _, down := n.down[node]; !n.present[node] && !down && api.IsNodeLossPath(p) {
			out[p] = b
		}
	}
	var next time.Time
	for _, name := range slices.Sorted(maps.Keys(n.down)) {
		st := n.down[name]
		due := st.since.Add(n.grace)
		if now.Before(due) {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		p := api.NodeLossPath(name)
		if b, ok := existing[p]; ok && sameLoss(b, st) {
			out[p] = b // as written before: the file changes only when the loss does
			continue
		}
		b, err := marshalNodeLoss(name, st)
		if err != nil {
			return nil, time.Time{}, err
		}
		out[p] = b
	}
	return out, next, nil
}

// sameLoss reports whether a written NodeLoss says what st says (its reason and when).
func sameLoss(b []byte, st nodeState) bool {
	var old api.NodeLoss
	if yaml.Unmarshal(b, &old) != nil {
		return false
	}
	return old.Spec.Reason == st.reason && old.Spec.Since.Time.Equal(st.since.Truncate(time.Second))
}

func marshalNodeLoss(name string, st nodeState) ([]byte, error) {
	msg := st.message
	for len(msg) > api.MaxNodeLossMessageBytes || !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg[:min(len(msg), api.MaxNodeLossMessageBytes)], "")
	}
	loss := api.NodeLoss{
		TypeMeta:   metav1.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNodeLoss},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       api.NodeLossSpec{Since: metav1.NewTime(st.since.UTC().Truncate(time.Second)), Reason: st.reason, Message: msg},
	}
	b, err := yaml.Marshal(loss)
	if err != nil {
		return nil, err
	}
	b = []byte(strings.Replace(string(b), "  creationTimestamp: null\n", "", 1))
	if _, errs := api.ParseNodeLossFile(api.NodeLossPath(name), b); len(errs) > 0 {
		return nil, fmt.Errorf("refusing to write a NodeLoss the renderer would reject: %w", errs)
	}
	return b, nil
}

// watchNodes starts the node informer (of the whole cluster: nodes have no namespace); synced
// reports when it has listed every node.
func (r *Recorder) watchNodes(ctx context.Context, _ []string) (func() bool, error) {
	factory := informers.NewSharedInformerFactory(r.opts.Client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	wake := func() { wakeUp(r.nodes.wake) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observeNode(obj); wake() },
		UpdateFunc: func(_, obj any) { r.observeNode(obj); wake() },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				r.nodes.gone(node.Name)
				wake()
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching Nodes: %w", err)
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	return inf.HasSynced, nil
}

func (r *Recorder) observeNode(obj any) {
	if node, ok := obj.(*corev1.Node); ok {
		r.nodes.observe(node)
	}
}

// FlushNodes brings status/nodes/ on the recorder's ref up to the nodes it has seen, and returns
// when it should look again (zero: on the next node event only).
func (r *Recorder) FlushNodes(ctx context.Context) (time.Time, error) {
	var next time.Time
	var lost, found []string
	commit, err := r.replaceDir(ctx, api.NodeLossDir, func(existing map[string][]byte) (map[string][]byte, string, error) {
		files, due, err := r.nodes.desired(existing)
		if err != nil {
			return nil, "", err
		}
		next = due
		lost, found = added(files, existing), added(existing, files)
		return files, nodesMessage(lost, found), nil
	})
	if err != nil {
		return time.Time{}, err
	}
	if commit != "" {
		r.opts.Log.Info("node losses written", "lost", lost, "back", found, "commit", commit)
	}
	return next, nil
}

func nodesMessage(lost, found []string) string {
	name := func(p string) string { return strings.TrimSuffix(strings.TrimPrefix(p, api.NodeLossDir+"/"), ".yaml") }
	var b strings.Builder
	fmt.Fprintf(&b, "nodes: %d lost, %d back\n\n", len(lost), len(found))
	for _, p := range lost {
		fmt.Fprintf(&b, "- %s: lost\n", name(p))
	}
	for _, p := range found {
		fmt.Fprintf(&b, "- %s: Ready again (or its record is no longer due)\n", name(p))
	}
	return b.String()
}
