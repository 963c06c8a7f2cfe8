package recorder_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/recorder"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func node(name string, ready corev1.ConditionStatus, since time.Time) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(since), Message: "Kubelet stopped posting node status.",
	}}}}
}

// The recorder writes status/nodes/<node>.yaml for a node NotReady or gone for longer than the
// grace, from the node's own Ready transition time, and removes it when the node is Ready again;
// a record of a node it never saw (deleted while it was down) stays.
func TestRecorderRecordsLostNodes(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	srv := gitsynctest.NewServer(t, "main", map[string]string{
		api.NodeLossPath("edge-x"): "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeLoss\nmetadata:\n  name: edge-x\nspec:\n  reason: Gone\n  since: \"2026-12-01T00:00:00Z\"\n",
	})
	client := fake.NewClientset(
		node("edge-a", corev1.ConditionTrue, c.Now().Add(-time.Hour)),
		node("edge-b", corev1.ConditionUnknown, c.Now().Add(-time.Minute)),
		node("edge-c", corev1.ConditionFalse, c.Now().Add(-10*time.Minute)),
	)
	startWith(t, client, srv, func(o *recorder.Options) { o.Now, o.NodeLossGrace, o.Log = c.Now, 5*time.Minute, testr.New(t) })
	ctx := context.Background()

	got := waitFile(t, srv, api.NodeLossPath("edge-c"))
	require.Equal(t, `apiVersion: gitbroker.dev/v1alpha1
kind: NodeLoss
metadata:
  name: edge-c
spec:
  message: Kubelet stopped posting node status.
  reason: NotReady
  since: "2026-12-05T09:50:00Z"
`, got)
	_, ok := srv.File(api.NodeLossPath("edge-b"))
	require.False(t, ok, "edge-b has been down for a minute of its five")
	_, ok = srv.File(api.NodeLossPath("edge-x"))
	require.True(t, ok, "a node the recorder never saw keeps its record")

	// edge-b's grace runs out. The clock here is not the timers' (the recorder's own timer looks
	// again within a minute of real time): a node event has the recorder look again. Without one,
	// the test passed only when the recorder's second look came after the clock moved.
	c.Advance(5 * time.Minute)
	require.Eventually(t, func() bool {
		_, err := client.CoreV1().Nodes().UpdateStatus(ctx, node("edge-b", corev1.ConditionUnknown, c.Now().Add(-6*time.Minute)), metav1.UpdateOptions{})
		require.NoError(t, err)
		_, ok := srv.File(api.NodeLossPath("edge-b"))
		return ok
	}, 60*time.Second, 200*time.Millisecond, "edge-b recorded lost")

	// edge-c is back; edge-a is deleted, and lost once its grace has passed.
	_, err := client.CoreV1().Nodes().UpdateStatus(ctx, node("edge-c", corev1.ConditionTrue, c.Now()), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := srv.File(api.NodeLossPath("edge-c")); return !ok }, 60*time.Second, 10*time.Millisecond, "edge-c's record removed")
	require.NoError(t, client.CoreV1().Nodes().Delete(ctx, "edge-a", metav1.DeleteOptions{}))
	// The clock here is not the timers': it moves a minute at a time, and a node event has the
	// recorder look again, until edge-a's grace, from when the recorder saw it deleted, is over.
	var a string
	require.Eventually(t, func() bool {
		c.Advance(time.Minute)
		_, err := client.CoreV1().Nodes().UpdateStatus(ctx, node("edge-b", corev1.ConditionUnknown, c.Now().Add(-time.Hour)), metav1.UpdateOptions{})
		require.NoError(t, err)
		a, ok = srv.File(api.NodeLossPath("edge-a"))
		return ok
	}, 60*time.Second, 200*time.Millisecond, "edge-a recorded lost")
	require.Contains(t, a, "reason: Gone")
	for _, p := range []string{api.NodeLossPath("edge-a"), api.NodeLossPath("edge-b"), api.NodeLossPath("edge-x")} {
		data, _ := srv.File(p)
		_, errs := api.ParseNodeLossFile(p, []byte(data))
		require.Empty(t, errs, p)
	}
}
