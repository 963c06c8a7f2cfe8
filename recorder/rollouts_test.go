package recorder_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/recorder"
)

// deployment is a staged broker Deployment at generation 2 with inputs hash, observed up to
// observed, with updated, total and available replicas.
func deployment(name, hash string, observed int64, updated, total, available int32) *appsv1.Deployment {
	one := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "plant", Generation: 2,
			Labels:      map[string]string{api.LabelManagedBy: api.ManagedByGitbroker, api.LabelRollout: api.RolloutStaged},
			Annotations: map[string]string{api.AnnotationInputsHash: hash}},
		Spec: appsv1.DeploymentSpec{Replicas: &one},
		Status: appsv1.DeploymentStatus{ObservedGeneration: observed, UpdatedReplicas: updated, Replicas: total,
			AvailableReplicas: available},
	}
}

func waitContent(t *testing.T, srv *gitsynctest.Server, path, want string) {
	t.Helper()
	require.Eventually(t, func() bool { got, _ := srv.File(path); return got == want }, 20*time.Second, 10*time.Millisecond,
		"waiting for %s to say %q", path, want)
}

// The recorder keeps a RolloutRecord per staged broker Deployment, judged as `kubectl rollout
// status` judges it, rewrites it when that changes and removes it with the Deployment; it leaves
// Deployments that are not staged, or not the renderer's, alone, and the records of namespaces
// it does not watch.
func TestRecorderRecordsRollouts(t *testing.T) {
	other := api.RolloutPath("elsewhere", "cam-9")
	otherRec := "apiVersion: gitbroker.dev/v1alpha1\nkind: RolloutRecord\nmetadata:\n  name: cam-9\n  namespace: elsewhere\nspec:\n  available: true\n  inputsHash: 00ff\n"
	srv := gitsynctest.NewServer(t, "main", map[string]string{other: otherRec})
	unstaged := deployment("cam-2", "aa", 2, 1, 1, 1)
	delete(unstaged.Labels, api.LabelRollout)
	noHash := deployment("cam-3", "", 2, 1, 1, 1)
	client := fake.NewClientset(deployment("cam-1", "ab12", 1, 0, 1, 1), unstaged, noHash)
	startWith(t, client, srv, func(o *recorder.Options) { o.Namespaces = []string{"plant"}; o.NodeLossGrace = -1 })
	ctx := context.Background()
	deployments := client.AppsV1().Deployments("plant")

	path := api.RolloutPath("plant", "cam-1")
	head := "apiVersion: gitbroker.dev/v1alpha1\nkind: RolloutRecord\nmetadata:\n  name: cam-1\n  namespace: plant\nspec:\n"
	waitContent(t, srv, path, head+"  available: false\n  inputsHash: ab12\n  message: its controller has not observed this spec yet\n")
	for _, step := range []struct {
		d    *appsv1.Deployment
		says string
	}{
		{deployment("cam-1", "ab12", 2, 0, 1, 0), "  available: false\n  inputsHash: ab12\n  message: 0 of 1 replicas updated\n"},
		{deployment("cam-1", "ab12", 2, 1, 2, 1), "  available: false\n  inputsHash: ab12\n  message: 1 old replicas pending termination\n"},
		{deployment("cam-1", "ab12", 2, 1, 1, 0), "  available: false\n  inputsHash: ab12\n  message: 0 of 1 updated replicas available\n"},
		{deployment("cam-1", "ab12", 2, 1, 1, 1), "  available: true\n  inputsHash: ab12\n"},
	} {
		_, err := deployments.Update(ctx, step.d, metav1.UpdateOptions{})
		require.NoError(t, err)
		waitContent(t, srv, path, head+step.says)
	}
	stuck := deployment("cam-1", "cd34", 2, 0, 1, 0)
	stuck.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded",
		Message: `ReplicaSet "cam-1-5d4f" has timed out progressing.`}}
	_, err := deployments.Update(ctx, stuck, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitContent(t, srv, path, head+"  available: false\n  inputsHash: cd34\n  message: ReplicaSet \"cam-1-5d4f\" has timed out progressing.\n  progressDeadlineExceeded: true\n")

	for _, p := range []string{api.RolloutPath("plant", "cam-2"), api.RolloutPath("plant", "cam-3")} {
		_, ok := srv.File(p)
		require.False(t, ok, "%s: no record of a Deployment that is not staged or has no inputs hash", p)
	}
	require.NoError(t, deployments.Delete(ctx, "cam-1", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, ok := srv.File(path); return !ok }, 20*time.Second, 10*time.Millisecond, "the record goes with its Deployment")
	got, _ := srv.File(other)
	require.Equal(t, otherRec, got, "a namespace this recorder does not watch keeps its records")
	data, _ := srv.File(other)
	_, errs := api.ParseRolloutFile(other, []byte(data))
	require.Empty(t, errs)
}

// TestEveryStatusKindHasAWriter: a kind of record added to api.StatusKinds is verified and
// rendered from the recorder's ref, so the recorder must write it.
func TestEveryStatusKindHasAWriter(t *testing.T) {
	written := recorder.StatusWriterKinds()
	for _, k := range api.StatusKinds {
		if k.Kind != api.KindJobRecord {
			require.Contains(t, written, k.Kind, "no writer for %s (%s) in the recorder's statusWriters", k.Kind, k.Layout)
		}
	}
}
