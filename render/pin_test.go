package render_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/render"
)

func readJob(t *testing.T, data []byte) batchv1.Job {
	t.Helper()
	var job batchv1.Job
	require.NoError(t, yaml.UnmarshalStrict(data, &job))
	return job
}

// jobTerms renders tree and returns the required node selector terms of its one fw Job.
func jobTerms(t *testing.T, tree render.Tree) []corev1.NodeSelectorTerm {
	t.Helper()
	tree = apply(tree, renderOK(t, tree))
	files := jobs(tree, "default/fw")
	require.Len(t, files, 1)
	job := readJob(t, tree[files[0]])
	return job.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
}

func nameTerm(node string, extra ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{
		MatchExpressions: extra,
		MatchFields:      []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}
}

// The API server accepts one value for a metadata.name field selector, so a Job on a device that
// several nodes see gets one node selector term per node (terms are ORed).
func TestSharedDeviceJobHasOneTermPerNode(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/fw.yaml": jobConfig("fw", ""),
		"inventory/edge-b.yaml":  inventory("edge-b", entry("fw", "shared:plc-1")),
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "shared:plc-1")),
		"inventory/edge-c.yaml":  inventory("edge-c", entry("fw", "shared:plc-1")),
	})
	require.Equal(t, []corev1.NodeSelectorTerm{nameTerm("edge-a"), nameTerm("edge-b"), nameTerm("edge-c")}, jobTerms(t, tree))
}

// A Configuration's own required terms keep their meaning: each is combined with each node.
func TestPinningKeepsConfigurationAffinity(t *testing.T) {
	cfg := strings.Replace(jobConfig("fw", ""), "          restartPolicy: Never\n", `          restartPolicy: Never
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms:
                - matchExpressions:
                  - {key: kubernetes.io/arch, operator: In, values: [arm64]}
                - matchExpressions:
                  - {key: plant.example/zone, operator: In, values: [north]}
`, 1)
	tree := repo(map[string]string{
		"configurations/fw.yaml": cfg,
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "shared:plc-1")),
		"inventory/edge-b.yaml":  inventory("edge-b", entry("fw", "shared:plc-1")),
	})
	terms := jobTerms(t, tree)
	arch := corev1.NodeSelectorRequirement{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}
	zone := corev1.NodeSelectorRequirement{Key: "plant.example/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"north"}}
	require.Equal(t, []corev1.NodeSelectorTerm{
		nameTerm("edge-a", arch), nameTerm("edge-b", arch),
		nameTerm("edge-a", zone), nameTerm("edge-b", zone),
	}, terms)

	// The plan still names each node once.
	require.Contains(t, planText(renderOK(t, repo(map[string]string{
		"configurations/fw.yaml": cfg,
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "shared:plc-1")),
		"inventory/edge-b.yaml":  inventory("edge-b", entry("fw", "shared:plc-1")),
	})).Plan), "nodes edge-a, edge-b)")
}

// A Job rendered by an earlier version with all nodes in one requirement was refused by the API
// server and never ran: it is rendered again, under the same name, pinned so it can be created.
// A Job pinned to one node is frozen as always.
func TestRefusedPinningIsRenderedAgain(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/fw.yaml": jobConfig("fw", ""),
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "shared:plc-1", "plc-2")),
		"inventory/edge-b.yaml":  inventory("edge-b", entry("fw", "shared:plc-1")),
	})
	tree = apply(tree, renderOK(t, tree))
	files := jobs(tree, "default/fw")
	require.Len(t, files, 2)
	var shared, local string
	for _, f := range files {
		if len(readJob(t, tree[f]).Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 2 {
			shared = f
		} else {
			local = f
		}
	}
	require.NotEmpty(t, shared)
	want := string(tree[shared])

	old := strings.Replace(want, `        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchFields:
              - key: metadata.name
                operator: In
                values:
                - edge-a
            - matchFields:
              - key: metadata.name
                operator: In
                values:
                - edge-b
`, `        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchFields:
              - key: metadata.name
                operator: In
                values:
                - edge-a
                - edge-b
`, 1)
	require.NotEqual(t, want, old, "the test must plant the old pinning")
	tree[shared] = []byte(old)
	// A hand-edit of a Job pinned to one node stays: it may be running.
	edited := strings.Replace(string(tree[local]), "image: busybox", "image: busybox:1.37", 1)
	tree[local] = []byte(edited)

	res := renderOK(t, tree)
	require.Equal(t, want, string(res.Files[shared]))
	require.Equal(t, edited, string(res.Files[local]), "a Job that may be running is never modified")
	require.Contains(t, planText(res.Plan), "never ran; it is rendered again")
	require.False(t, renderOK(t, apply(tree, res)).Changed(), "and the next render is a no-op")
}
