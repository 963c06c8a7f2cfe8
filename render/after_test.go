package render_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
)

// TestAfterNamesAConfigurationWithAJob: an after: naming no Configuration, or one with no Job
// broker, would hold the Pods for ever and so delete the running ones (refused by the deletion
// budget, far from the mistake). It is an input error at the after: line instead, and the
// Configuration keeps its output.
func TestAfterNamesAConfigurationWithAJob(t *testing.T) {
	reader := strings.Replace(podConfig, "  name: cam\n", "  name: reader\n  annotations:\n    gitbroker.dev/after: fw\n", 1)
	tree := repo(map[string]string{
		"configurations/reader.yaml": reader,
		"configurations/fw.yaml":     jobConfig("fw", ""),
		"configurations/cam.yaml":    podConfig,
		"inventory/edge-a.yaml":      inventory("edge-a", entry("reader", "c1"), entry("fw", "c1"), entry("cam", "c2")),
	})
	tree = apply(tree, renderOK(t, tree))
	fw := jobs(tree, "default/fw")
	require.Len(t, fw, 1)
	tree = recordJob(t, tree, fw[0], "Succeeded")
	tree = apply(tree, renderOK(t, tree))
	before := tree.Owned()
	require.NotEmpty(t, filesUnder(before, "rendered/default/reader/", ""))
	line := strings.Count(reader[:strings.Index(reader, "gitbroker.dev/after")], "\n") + 1
	for _, tc := range []struct{ name, after, want string }{
		{"unknown", "fww", "no Configuration fww is defined (in namespace default: cam, fw, reader)"},
		{"a Pod broker", "cam", "Configuration cam has no brokerJobSpec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := maps.Clone(tree)
			broken["configurations/reader.yaml"] = []byte(strings.Replace(reader, "after: fw", "after: "+tc.after, 1))
			res := render.Render(render.Request{Files: broken})
			require.Nil(t, res.Refused, "an input error, not a deletion the budget refuses")
			require.Len(t, res.Errors, 1, res.Errors.Error())
			require.Equal(t, api.FieldError{File: "configurations/reader.yaml", Line: line, Field: "metadata.annotations." + api.AnnotationAfter},
				api.FieldError{File: res.Errors[0].File, Line: res.Errors[0].Line, Field: res.Errors[0].Field})
			require.Contains(t, res.Errors[0].Message, tc.want)
			for _, p := range filesUnder(before, "rendered/default/reader/", "") {
				require.Equal(t, before[p], res.Files[p], p)
			}
		})
	}
	// The Job broker itself invalid: after: still names it, and waits as before.
	broken := maps.Clone(tree)
	broken["configurations/fw.yaml"] = []byte(strings.Replace(jobConfig("fw", ""), "image:", "imagee:", 1))
	res := render.Render(render.Request{Files: broken})
	require.Len(t, res.Errors, 1, res.Errors.Error())
	require.Equal(t, "configurations/fw.yaml", res.Errors[0].File)
}

// TestFolderInInventoryIsAnError: inventory/ holds one file per node; a folder there (say
// inventory/edge-d.yaml/, made by a misplaced copy) is never read, and ignoring it silently would
// drop the node's brokers. It is an invalid input naming the folder, and a node's file turned
// into a folder keeps the node's output.
func TestFolderInInventoryIsAnError(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1")),
		"inventory/edge-d.yaml":   inventory("edge-d", entry("cam", "c2")),
	})
	tree = apply(tree, renderOK(t, tree))
	before := tree.Owned()
	moved := maps.Clone(tree)
	moved["inventory/edge-d.yaml/devices.yaml"] = moved["inventory/edge-d.yaml"]
	delete(moved, "inventory/edge-d.yaml")
	moved["inventory/site-b/edge-e.yaml"] = []byte(inventory("edge-e", entry("cam", "c3")))
	res := render.Render(render.Request{Files: moved})
	require.Nil(t, res.Refused)
	var got []string
	for _, e := range res.Errors {
		got = append(got, e.File+": "+e.Message)
	}
	require.Equal(t, []string{
		"inventory/edge-d.yaml: " + api.InventoryFolderError("inventory/edge-d.yaml/devices.yaml"),
		"inventory/site-b: " + api.InventoryFolderError("inventory/site-b/edge-e.yaml"),
	}, got)
	require.True(t, render.Equal(before, res.Files.Owned()), "edge-d keeps its broker; nothing of site-b is read")
}

// With spec.clusters, after: naming a Configuration that does not select a cluster the waiting
// one selects would hold its Pods for ever in that cluster: an error at the after: line there,
// while the clusters both select render it.
func TestAfterAcrossClusters(t *testing.T) {
	reader := strings.Replace(podConfig, "  name: cam\n", "  name: reader\n  annotations:\n    gitbroker.dev/after: fw\n", 1)
	fw := strings.Replace(jobConfig("fw", ""), "  name: fw\n", "  name: fw\n  annotations:\n    gitbroker.dev/clusters: ring=canary\n", 1)
	require.Contains(t, fw, "gitbroker.dev/clusters")
	tree := repo(map[string]string{
		"gitbroker.yaml":             "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  clusters:\n  - name: site-a\n    labels: {ring: canary}\n    nodes: [edge-a]\n  - name: site-b\n    nodes: [edge-b]\n",
		"configurations/reader.yaml": reader,
		"configurations/fw.yaml":     fw,
		"inventory/edge-a.yaml":      inventory("edge-a", entry("reader", "c1"), entry("fw", "c1")),
		"inventory/edge-b.yaml":      inventory("edge-b", entry("reader", "c2"), entry("fw", "c2")),
	})
	res := render.Render(render.Request{Files: tree})
	require.Len(t, res.Errors, 1, res.Errors.Error())
	require.Equal(t, "configurations/reader.yaml", res.Errors[0].File)
	require.Equal(t, "metadata.annotations."+api.AnnotationAfter, res.Errors[0].Field)
	require.Contains(t, res.Errors[0].Message, "Configuration fw does not select cluster site-b")
	require.NotEmpty(t, filesUnder(res.Files, "rendered/site-a/default/fw/", ""), "site-a runs fw")
	require.Empty(t, filesUnder(res.Files, "rendered/site-b/default/", ""), "nothing waits for ever in site-b")
}
