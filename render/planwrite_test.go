package render_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/render"
)

// fleetImageChange renders a fleet of devices on one camera Configuration, then changes its image:
// every instance's Pod is replaced the same way.
func fleetImageChange(t *testing.T, devices int) *render.Result {
	t.Helper()
	var entries []string
	for i := 0; i < devices; i++ {
		entries = append(entries, fmt.Sprintf("cam-%04d", i))
	}
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", entries...)),
	})
	tree = apply(tree, renderOK(t, tree))
	tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "onvif-video-broker:latest", "onvif-video-broker:v2", 1))
	res := render.Render(render.Request{Files: tree, AllowDeletions: true})
	require.Empty(t, res.Errors)
	require.Equal(t, devices, res.Plan.Summary.DeploymentsRolledOut)
	return res
}

// TestPlanGroupsIdenticalChanges: one image change on a large fleet was one line per broker
// (388 KB of markdown for 2,000). Instances that change the same way are one group with a sample;
// JSON keeps every instance.
func TestPlanGroupsIdenticalChanges(t *testing.T) {
	res := fleetImageChange(t, 2000)
	var text bytes.Buffer
	res.Plan.WriteText(&text)
	require.Contains(t, text.String(), "2000 instances (e.g. cam-")
	require.Contains(t, text.String(), "~ Deployment rolled out: spec.template.spec.containers[name=broker].image: ghcr.io/project-akri/akri/onvif-video-broker:latest → ghcr.io/project-akri/akri/onvif-video-broker:v2")
	require.Less(t, text.Len(), 2000, "one group, not 2,000 lines:\n%s", text.String())

	var md bytes.Buffer
	res.Plan.WriteMarkdown(&md)
	require.Contains(t, md.String(), "**2000 instances**")
	require.Contains(t, md.String(), "<details><summary><code>default/cam</code>: 2000 Deployments rolled out</summary>")
	require.Less(t, md.Len(), 4000)
	require.Len(t, res.Plan.Configurations[0].Instances, 2000, "JSON lists them all")
	require.Equal(t, []render.FieldChange{{Path: "spec.template.spec.containers[name=broker].image", Op: "changed",
		Before: "ghcr.io/project-akri/akri/onvif-video-broker:latest", After: "ghcr.io/project-akri/akri/onvif-video-broker:v2"}},
		res.Plan.Configurations[0].Instances[0].Changes[0].Fields, "and each change's fields, structured")

	// Few instances are listed one by one, with their devices.
	res = fleetImageChange(t, 4)
	text.Reset()
	res.Plan.WriteText(&text)
	require.Equal(t, 4, strings.Count(text.String(), "  instance cam-"), text.String())
}

// TestMarkdownPlanIsBounded: changes that cannot be grouped (each device's own property changed)
// still fit a pull-request comment; what is left out is counted and -o json has it.
func TestMarkdownPlanIsBounded(t *testing.T) {
	files := map[string]string{}
	var entries []string
	for c := 0; c < 40; c++ {
		name := fmt.Sprintf("cam%02d", c)
		files["configurations/"+name+".yaml"] = strings.Replace(podConfig, "name: cam\n", "name: "+name+"\n", 1)
		var ids []string
		for i := 0; i < 50; i++ {
			ids = append(ids, fmt.Sprintf("%s-device-with-a-long-identifier-%03d", name, i))
		}
		entries = append(entries, entry(name, ids...))
	}
	files["inventory/edge-a.yaml"] = inventory("edge-a", entries...)
	tree := repo(files)
	tree = apply(tree, renderOK(t, tree))
	// Every device reports a new value of its own property: 2,000 different changes.
	tree["inventory/edge-a.yaml"] = []byte(strings.ReplaceAll(string(tree["inventory/edge-a.yaml"]), "DEVICE: cam", "DEVICE: v2-cam"))
	res := render.Render(render.Request{Files: tree, AllowDeletions: true})
	require.Empty(t, res.Errors)
	var md bytes.Buffer
	res.Plan.WriteMarkdown(&md)
	var text bytes.Buffer
	res.Plan.WriteText(&text)
	require.Greater(t, text.Len(), 4*render.MaxMarkdown, "unbounded, the plan would be this long")
	require.LessOrEqual(t, md.Len(), render.MaxMarkdown)
	require.Contains(t, md.String(), "**Summary:** 2000 Deployments rolled out")
	require.Contains(t, md.String(), "more Configuration(s) are left out to keep this comment under 60000 characters; `gitbroker plan -o json` lists every change.")
	require.Contains(t, md.String(), "| `default/cam39` | Pod broker | 50 rolled out | – | – | – |", "the table still has every Configuration")
}

// TestSummaryCountsKindsAndProblems: the summary counts each kind and action apart (two
// Kustomizations created were "1 Flux Kustomization changed") and names what needs a person, so
// "nothing to change" never stands above an invalid input.
func TestSummaryCountsKindsAndProblems(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"configurations/fw.yaml":  jobConfig("fw", ""),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1"), entry("fw", "plc-1")),
	})
	res := renderOK(t, tree)
	require.Equal(t, 2, res.Plan.Summary.FluxCreated)
	require.Contains(t, res.Plan.Headline(), "2 Flux Kustomizations created")
	tree = apply(tree, res)
	tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "image:", "imagee:", 1))
	res = render.Render(render.Request{Files: tree})
	require.Equal(t, "nothing to change; 1 invalid input(s), previous output kept", res.Plan.Headline())
	var md bytes.Buffer
	res.Plan.WriteMarkdown(&md)
	require.True(t, strings.HasPrefix(md.String(), "**Summary:** nothing to change; 1 invalid input(s), previous output kept\n\n#### Invalid inputs"), md.String())
}

// TestPlanJSONSchema: errors and untrusted inputs are objects a script can act on (file, line,
// field; writer, ref, commit), not prose; the summary counts each kind and action apart.
func TestPlanJSONSchema(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1")),
	})
	tree = apply(tree, renderOK(t, tree))
	tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "onvif-video-broker:latest", "onvif-video-broker:latest:v2", 1))
	res := render.Render(render.Request{Files: tree,
		Untrusted:  []string{"gitbroker/inventory/edge-b: signed by node:edge-a, not by node:edge-b"},
		Rejections: []render.Problem{render.RefProblem("node:edge-b", "gitbroker/inventory/edge-b", "0123456789abcdef0123456789abcdef01234567", "signed by node:edge-a, not by node:edge-b")},
	})
	data, err := json.Marshal(res.Plan)
	require.NoError(t, err)
	var got struct {
		Errors    []map[string]any `json:"errors"`
		Untrusted []map[string]any `json:"untrusted"`
		Summary   map[string]int   `json:"summary"`
	}
	require.NoError(t, json.Unmarshal(data, &got))
	require.Len(t, got.Errors, 1)
	line := strings.Count(podConfig[:strings.Index(podConfig, "image:")], "\n") + 1
	require.Equal(t, map[string]any{
		"file": "configurations/cam.yaml", "line": float64(line), "field": "spec.brokerSpec.brokerPodSpec.containers[0].image",
		"message": got.Errors[0]["message"], "text": got.Errors[0]["text"],
	}, got.Errors[0])
	require.Contains(t, got.Errors[0]["message"], "InvalidImageName")
	require.Equal(t, map[string]any{
		"writer": "node:edge-b", "ref": "gitbroker/inventory/edge-b", "commit": "0123456789abcdef0123456789abcdef01234567",
		"message": "signed by node:edge-a, not by node:edge-b", "text": "gitbroker/inventory/edge-b: signed by node:edge-a, not by node:edge-b",
	}, got.Untrusted[0])
	for _, k := range []string{"deploymentsCreated", "fluxKustomizationsCreated", "fluxKustomizationsUpdated", "fluxKustomizationsRemoved", "namespacesRendered", "jobsKept"} {
		require.Contains(t, got.Summary, k)
	}
}
