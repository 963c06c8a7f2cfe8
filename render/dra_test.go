package render_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

const draSettings = `apiVersion: gitbroker.dev/v1alpha1
kind: Settings
metadata:
  name: gitbroker
spec:
  deviceAllocation: dra
`

// strict decodes a rendered object into its Kubernetes type, refusing any field the type lacks.
func strict(t *testing.T, data []byte, into any) {
	t.Helper()
	js, err := yaml.YAMLToJSON(data)
	require.NoError(t, err)
	unknown, err := kjson.UnmarshalStrict(js, into)
	require.NoError(t, err)
	require.Empty(t, unknown, "%s decodes strictly", data)
}

// In DRA mode a shared capacity-1 camera seen by two nodes is one device in one ResourceSlice that
// selects both nodes, and its broker is one unpinned Deployment that claims it; a node's own device
// is a ResourceSlice on that node, with a broker pinned there. Nothing asks for akri.sh/ resources.
func TestDRAModeRendersSlicesClassesAndClaims(t *testing.T) {
	res := renderOK(t, repo(map[string]string{
		"gitbroker.yaml":          draSettings,
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:lobby", "desk")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:lobby")),
	}))
	folder := "rendered/default/cam/"
	slices := filesUnder(res.Files, folder, "/resourceslice-")
	require.Len(t, slices, 2, "files: %v", res.Files.Paths())
	var shared, own resourcev1.ResourceSlice
	for _, f := range slices {
		var s resourcev1.ResourceSlice
		strict(t, res.Files[f], &s)
		require.Equal(t, api.DRADriver, s.Spec.Driver)
		require.Equal(t, int64(1), s.Spec.Pool.ResourceSliceCount)
		require.Empty(t, s.Namespace, "ResourceSlices are cluster-wide")
		if s.Spec.NodeName == nil {
			shared = s
		} else {
			own = s
		}
	}
	inst := shared.Labels[api.LabelInstance]
	require.Equal(t, inst+".default", shared.Name)
	require.Equal(t, "default/"+inst, shared.Spec.Pool.Name)
	require.Equal(t, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
		Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"edge-a", "edge-b"}}}}},
		shared.Spec.NodeSelector.NodeSelectorTerms, "the nodes that report it reach it")
	require.Len(t, shared.Spec.Devices, 1, "capacity 1: one device for the whole cluster")
	attrs := shared.Spec.Devices[0].Attributes
	require.Equal(t, inst, *attrs["instance"].StringValue)
	require.Equal(t, "default", *attrs["namespace"].StringValue)
	require.Equal(t, "cam", *attrs["configuration"].StringValue)
	require.True(t, *attrs["shared"].BoolValue)
	require.Equal(t, "lobby", *attrs["property.gitbroker.dev/ONVIF_DEVICE"].StringValue)

	require.Equal(t, "edge-a", *own.Spec.NodeName)
	ownInst := own.Labels[api.LabelInstance]
	require.Equal(t, "edge-a/default/"+ownInst, own.Spec.Pool.Name)
	require.False(t, *own.Spec.Devices[0].Attributes["shared"].BoolValue)

	var class resourcev1.DeviceClass
	strict(t, res.Files[folder+"deviceclass-cam.default.gitbroker.dev.yaml"], &class)
	require.Equal(t, `device.driver == "gitbroker.dev"`, class.Spec.Selectors[0].CEL.Expression)
	require.Equal(t, `device.attributes["gitbroker.dev"].namespace == "default" && device.attributes["gitbroker.dev"].configuration == "cam"`,
		class.Spec.Selectors[1].CEL.Expression)

	var tmpl resourcev1.ResourceClaimTemplate
	strict(t, res.Files[folder+"resourceclaimtemplate-"+inst+".yaml"], &tmpl)
	req := tmpl.Spec.Spec.Devices.Requests[0].Exactly
	require.Equal(t, "cam.default.gitbroker.dev", req.DeviceClassName)
	require.Equal(t, `device.attributes["gitbroker.dev"].instance=="`+inst+`"`, req.Selectors[0].CEL.Expression)
	require.Equal(t, int64(1), req.Count)

	var d appsv1.Deployment
	strict(t, res.Files[folder+"deployment-"+inst+".yaml"], &d)
	require.Equal(t, int32(1), *d.Spec.Replicas, "capacity 1 of a device two nodes see: one broker")
	ps := d.Spec.Template.Spec
	require.Nil(t, ps.Affinity.NodeAffinity, "a shared device's broker goes where the scheduler allocates the device")
	require.NotContains(t, d.Spec.Selector.MatchLabels, api.LabelTargetNode)
	require.Equal(t, []corev1.PodResourceClaim{{Name: "gitbroker-device", ResourceClaimTemplateName: &inst}}, ps.ResourceClaims)
	require.Equal(t, []corev1.ResourceClaim{{Name: "gitbroker-device"}}, ps.Containers[0].Resources.Claims)
	require.Empty(t, ps.Containers[0].Resources.Limits, "no akri.sh/ resource in DRA mode")
	require.Contains(t, ps.Containers[0].Env, corev1.EnvVar{Name: "ONVIF_DEVICE", Value: "lobby"})

	var pinned appsv1.Deployment
	strict(t, res.Files[folder+"deployment-"+ownInst+".yaml"], &pinned)
	require.Equal(t, "edge-a", pinned.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0])
	require.Equal(t, "edge-a", pinned.Spec.Selector.MatchLabels[api.LabelTargetNode])

	for _, f := range res.Files.Paths() {
		require.NotContains(t, string(res.Files[f]), "akri.sh/"+inst, f)
	}
	text := planText(res.Plan)
	require.Contains(t, text, "ResourceSlice "+inst+".default")
	require.Contains(t, text, "DeviceClass cam.default.gitbroker.dev")

	// The same repository in device-plugin mode renders none of it.
	dp := renderOK(t, repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:lobby", "desk")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:lobby")),
	}))
	for _, f := range dp.Files.Paths() {
		require.NotContains(t, string(dp.Files[f]), "resource.k8s.io", f)
	}
}

// A shared device of capacity 3 seen by two nodes is three devices of one pool, and its broker runs
// two Pods, one per node where it can (Akri places one broker per node), each with its own claim.
// When one node is lost the slice selects the other alone, with no broker pinned anywhere.
func TestDRASharedCapacityAndLostNodes(t *testing.T) {
	files := map[string]string{
		"gitbroker.yaml":          draSettings,
		"configurations/cam.yaml": fixtures.PodConfiguration("akri.sh/v0", "cam", 3),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:lobby")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:lobby")),
	}
	res := renderOK(t, repo(files))
	slices := filesUnder(res.Files, "rendered/default/cam/", "/resourceslice-")
	require.Len(t, slices, 1)
	var s resourcev1.ResourceSlice
	strict(t, res.Files[slices[0]], &s)
	var names []string
	for _, d := range s.Spec.Devices {
		names = append(names, d.Name)
	}
	require.Equal(t, []string{"slot-0", "slot-1", "slot-2"}, names)
	deps := filesUnder(res.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, deps, 1)
	var d appsv1.Deployment
	strict(t, res.Files[deps[0]], &d)
	require.Equal(t, int32(2), *d.Spec.Replicas)
	require.Equal(t, "kubernetes.io/hostname", d.Spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey)

	files["status/nodes/edge-b.yaml"] = nodeLoss("edge-b", "NotReady")
	lost := renderOK(t, apply(repo(files), res))
	strict(t, lost.Files[slices[0]], &s)
	require.Equal(t, []string{"edge-a"}, s.Spec.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Values, "a lost node no longer reaches the device")
	strict(t, lost.Files[deps[0]], &d)
	require.Equal(t, int32(1), *d.Spec.Replicas)
}

// A node writes its devices' properties: a property named like one of gitbroker's attributes
// stays in property.gitbroker.dev's domain, so it cannot make a device pass for another instance
// in a selector; one an attribute cannot hold is left out with a warning.
func TestDRAPropertiesCannotPassForGitbrokerAttributes(t *testing.T) {
	inv := inventory("edge-a", entry("cam", "desk")) + "        instance: cam-000000\n        configuration: other\n        LONG_VALUE: " + strings.Repeat("x", 70) + "\n"
	cfg := strings.Replace(fixtures.PodConfiguration("gitbroker.dev/v1alpha1", "cam", 1), "spec:\n", "spec:\n  allowedDeviceProperties: [instance, configuration, LONG_VALUE]\n", 1)
	res := renderOK(t, repo(map[string]string{
		"gitbroker.yaml":          draSettings,
		"configurations/cam.yaml": cfg,
		"inventory/edge-a.yaml":   inv,
	}))
	slices := filesUnder(res.Files, "rendered/default/cam/", "/resourceslice-")
	require.Len(t, slices, 1)
	var s resourcev1.ResourceSlice
	strict(t, res.Files[slices[0]], &s)
	attrs := s.Spec.Devices[0].Attributes
	require.Equal(t, s.Labels[api.LabelInstance], *attrs["instance"].StringValue)
	require.Equal(t, "cam", *attrs["configuration"].StringValue)
	require.Equal(t, "cam-000000", *attrs["property.gitbroker.dev/instance"].StringValue)
	require.Equal(t, "other", *attrs["property.gitbroker.dev/configuration"].StringValue)
	require.NotContains(t, attrs, resourcev1.QualifiedName("property.gitbroker.dev/LONG_VALUE"))
	require.Contains(t, strings.Join(res.Plan.Warnings, "\n"), "LONG_VALUE")
}

// Akri's own example Configurations render in both modes, and the DRA tree builds with kustomize
// into objects that decode strictly; a Job broker claims its device too.
func TestAkriExamplesRenderInBothModes(t *testing.T) {
	base := readDir(t, "../fixtures/akri-examples/repo")
	base["configurations/fw.yaml"] = []byte(jobConfig("fw", "") + `            resources: {limits: {"{{PLACEHOLDER}}": "2"}}
`)
	base["inventory/edge-1.yaml"] = append(append([]byte{}, base["inventory/edge-1.yaml"]...), entry("fw", "plc")...)
	dp := renderOK(t, base)
	dra := render.Tree{}
	for p, b := range base {
		dra[p] = b
	}
	dra["gitbroker.yaml"] = []byte(draSettings)
	res := renderOK(t, dra)
	require.Equal(t, len(filesUnder(dp.Files, "rendered/", "/deployment-")) > 0, len(filesUnder(res.Files, "rendered/", "/deployment-")) > 0)
	require.NotEmpty(t, filesUnder(res.Files, "rendered/", "/resourceslice-"))

	objs, _ := buildRendered(t, res.Files)
	kinds := map[string]int{}
	for _, target := range objs {
		kinds[strings.TrimPrefix(fmt.Sprintf("%T", target), "*v1.")]++
		if tmpl, ok := target.(*resourcev1.ResourceClaimTemplate); ok && tmpl.Labels[api.LabelConfiguration] == "fw" {
			require.Equal(t, int64(2), tmpl.Spec.Spec.Devices.Requests[0].Exactly.Count, "the Job asks for 2 of its device's slots")
		}
		if job, ok := target.(*batchv1.Job); ok {
			require.Len(t, job.Spec.Template.Spec.ResourceClaims, 1, "the Job claims its device")
			require.Empty(t, job.Spec.Template.Spec.Containers[0].Resources.Limits)
		}
	}
	for _, k := range []string{"Deployment", "Job", "ResourceSlice", "ResourceClaimTemplate", "DeviceClass"} {
		require.NotZero(t, kinds[k], k)
	}
}

// A capacity a ResourceSlice cannot hold is an input error at its line in DRA mode, and the
// Configuration keeps what it rendered.
func TestDRACapacityOverASliceIsRefused(t *testing.T) {
	res := render.Render(render.Request{Files: repo(map[string]string{
		"gitbroker.yaml":          draSettings,
		"configurations/cam.yaml": fixtures.PodConfiguration("akri.sh/v0", "cam", 200),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "desk")),
	})})
	require.Len(t, res.Errors, 1)
	require.Equal(t, "configurations/cam.yaml", res.Errors[0].File)
	require.Equal(t, "spec.capacity", res.Errors[0].Field)
	require.NotZero(t, res.Errors[0].Line)
	require.Empty(t, filesUnder(res.Files, "rendered/default/cam/", ".yaml"))
}

// A deviceAllocation the renderer does not know is an error at its line: nothing renders in a
// mode the repository did not ask for, and nothing rendered before is lost.
func TestUnknownDeviceAllocationIsRefused(t *testing.T) {
	res := render.Render(render.Request{Files: repo(map[string]string{
		"gitbroker.yaml":          strings.Replace(draSettings, "dra", "DRA", 1),
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "desk")),
	})})
	require.Len(t, res.Errors, 1)
	require.Equal(t, "spec.deviceAllocation", res.Errors[0].Field)
	require.Equal(t, 6, res.Errors[0].Line)
	require.Contains(t, res.Errors[0].Message, `must be devicePlugin or dra, got "DRA"`)
	require.Empty(t, res.Files)
}

// A daemon's Renderer that switches mode renders what a fresh one does, both ways: nothing it
// remembers from one mode is reused in the other.
func TestKeptRendererSwitchesModes(t *testing.T) {
	files := map[string]string{
		"configurations/cam.yaml": podConfig,
		"configurations/fw.yaml": jobConfig("fw", "") + `            resources: {limits: {"{{PLACEHOLDER}}": "1"}}
`,
		"inventory/edge-a.yaml": inventory("edge-a", entry("cam", "shared:lobby", "desk"), entry("fw", "plc")),
		"inventory/edge-b.yaml": inventory("edge-b", entry("cam", "shared:lobby")),
	}
	r := render.New()
	tree := repo(files)
	for i, settings := range []string{"", draSettings, ""} {
		if settings == "" {
			delete(tree, "gitbroker.yaml")
		} else {
			tree["gitbroker.yaml"] = []byte(settings)
		}
		kept := r.Render(render.Request{Files: tree, AllowDeletions: true})
		fresh := render.Render(render.Request{Files: tree, AllowDeletions: true})
		require.Empty(t, kept.Errors)
		require.Equal(t, fresh.Files.Paths(), kept.Files.Paths(), "render %d", i)
		for _, f := range fresh.Files.Paths() {
			require.Equal(t, string(fresh.Files[f]), string(kept.Files[f]), "render %d: %s", i, f)
		}
		tree = apply(tree, kept)
	}
}
