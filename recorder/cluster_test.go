package recorder_test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/recorder"
)

// The recorder of one cluster of several writes what a recorder of one cluster writes, under
// status/<cluster>/, and leaves every other path of its ref, another cluster's records
// included, as they are (a cluster's ref holds its own records only; what else is there is the
// renderer's to refuse).
func TestClusterRecorderWritesUnderItsCluster(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	other := api.ClusterStatusPath("site-b", api.NodeLossPath("edge-z"))
	srv := gitsynctest.NewServer(t, "main", map[string]string{
		other: "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeLoss\nmetadata:\n  name: edge-z\nspec:\n  reason: Gone\n  since: \"2026-12-01T00:00:00Z\"\n",
	})
	client := fake.NewClientset(
		succeeded(job("fw-a-job")),
		node("edge-c", corev1.ConditionFalse, c.Now().Add(-10*time.Minute)),
	)
	startWith(t, client, srv, func(o *recorder.Options) {
		o.Store = recorder.ForCluster(o.Store, "site-a")
		o.Now, o.NodeLossGrace, o.Log = c.Now, 5*time.Minute, testr.New(t)
	})
	rec := waitFile(t, srv, "status/site-a/jobs/plant/fw-a-job.yaml")
	require.Contains(t, rec, "outcome: Succeeded")
	loss := waitFile(t, srv, "status/site-a/nodes/edge-c.yaml")
	require.Contains(t, loss, "reason: NotReady")
	for _, f := range srv.Files() {
		require.True(t, strings.HasPrefix(f, "status/site-a/") || f == other, "the cluster's recorder wrote %s", f)
	}
	_, ok := srv.File(other)
	require.True(t, ok, "another cluster's record is left as it was")
}
