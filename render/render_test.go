package render_test

import (
	"bytes"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

func TestAkriInstanceNamesAndEnvironment(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/akri-debug-echo.yaml": strings.Replace(podConfig, "name: cam", "name: akri-debug-echo", 1),
		"inventory/edge-a.yaml":               inventory("edge-a", entry("akri-debug-echo", "shared:foo0", "bar0")),
		"inventory/edge-b.yaml":               inventory("edge-b", entry("akri-debug-echo", "shared:foo0")),
	})
	res := renderOK(t, tree)
	// foo0 is shared: Akri names its instance akri-debug-echo-8120fe on every node (BLAKE2b-24 of
	// the id); bar0 is not shared, so the node name is part of the digest.
	folder := "rendered/default/akri-debug-echo/"
	broker := res.Files[folder+"deployment-edge-a-akri-debug-echo-8120fe.yaml"]
	require.NotNil(t, broker, "files: %v", res.Files.Paths())
	require.Nil(t, res.Files[folder+"deployment-edge-b-akri-debug-echo-8120fe.yaml"], "capacity 1 caps the shared device to one node")
	unshared := filesUnder(res.Files, folder, "deployment-akri-debug-echo-")
	require.Len(t, unshared, 1)

	var d appsv1.Deployment
	require.NoError(t, yaml.UnmarshalStrict(broker, &d))
	labels := map[string]string{
		"akri.sh/configuration":        "akri-debug-echo",
		"akri.sh/instance":             "akri-debug-echo-8120fe",
		"akri.sh/target-node":          "edge-a",
		"controller":                   "akri.sh",
		"app.kubernetes.io/managed-by": "gitbroker",
	}
	require.Equal(t, labels, d.Labels)
	require.Equal(t, labels, d.Spec.Template.Labels, "Akri's labels are on the broker Pods")
	// One Pod, the old one gone before the new one starts: never two brokers on a device.
	require.Equal(t, int32(1), *d.Spec.Replicas)
	require.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type)
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	require.NoError(t, err)
	require.True(t, sel.Matches(k8slabels.Set(d.Spec.Template.Labels)), "the selector selects the template")
	require.Equal(t, "akri-debug-echo-8120fe", d.Spec.Selector.MatchLabels["akri.sh/instance"])
	p := d.Spec.Template
	c := p.Spec.Containers[0]
	require.Equal(t, []corev1.EnvVar{{Name: "ONVIF_DEVICE", Value: "foo0"}, {Name: "ONVIF_DEVICE_8120FE", Value: "foo0"}}, c.Env)
	// Akri's placeholder becomes the instance's device plugin resource, served by the node's agent.
	require.Equal(t, corev1.ResourceList{"akri.sh/akri-debug-echo-8120fe": resource.MustParse("1")}, c.Resources.Limits)
	terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	require.Equal(t, []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"edge-a"}}}, terms[0].MatchFields)

	var svc corev1.Service
	require.NoError(t, yaml.UnmarshalStrict(res.Files[folder+"service-akri-debug-echo-8120fe-svc.yaml"], &svc))
	require.Equal(t, map[string]string{"akri.sh/instance": "akri-debug-echo-8120fe", "controller": "akri.sh"}, svc.Spec.Selector)
}

// An init container that names the placeholder gets the resource and the device's environment as
// a container does (Akri's controller treats both alike); one that does not gets neither. Job
// brokers request the resource too, with the quantity the Configuration gave.
func TestPlaceholderBecomesTheInstanceResource(t *testing.T) {
	cfg := strings.Replace(podConfig, "      containers:\n", `      initContainers:
      - name: probe
        image: busybox:1.36
        resources:
          limits: {"{{PLACEHOLDER}}": "1"}
          requests: {"{{PLACEHOLDER}}": "1"}
      - name: setup
        image: busybox:1.36
      containers:
`, 1)
	require.NotEqual(t, podConfig, cfg)
	res := renderOK(t, repo(map[string]string{
		"configurations/cam.yaml": cfg,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1")),
	}))
	pods := filesUnder(res.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, pods, 1)
	var d appsv1.Deployment
	require.NoError(t, yaml.UnmarshalStrict(res.Files[pods[0]], &d))
	instance := d.Labels["akri.sh/instance"]
	want := corev1.ResourceList{corev1.ResourceName("akri.sh/" + instance): resource.MustParse("1")}
	pod := d.Spec.Template
	probe, setup := pod.Spec.InitContainers[0], pod.Spec.InitContainers[1]
	require.Equal(t, want, probe.Resources.Limits)
	require.Equal(t, want, probe.Resources.Requests)
	require.Equal(t, pod.Spec.Containers[0].Env, probe.Env)
	require.NotEmpty(t, probe.Env)
	require.Empty(t, setup.Env)
	require.Nil(t, setup.Resources.Limits)
	require.Equal(t, want, pod.Spec.Containers[0].Resources.Limits)

	res = renderOK(t, repo(map[string]string{
		"configurations/fw.yaml": jobConfig("fw", "") + `            resources: {limits: {"{{PLACEHOLDER}}": "2"}}
`,
		"inventory/edge-a.yaml": inventory("edge-a", entry("fw", "plc")),
	}))
	jobs := filesUnder(res.Files, "rendered/default/fw/", "/job-")
	require.Len(t, jobs, 1)
	var job batchv1.Job
	require.NoError(t, yaml.UnmarshalStrict(res.Files[jobs[0]], &job))
	limits := job.Spec.Template.Spec.Containers[0].Resources.Limits
	require.Equal(t, "2", limits.Name(corev1.ResourceName("akri.sh/"+job.Labels["akri.sh/instance"]), resource.DecimalSI).String())
	require.NotContains(t, limits, corev1.ResourceName("{{PLACEHOLDER}}"))
}

func TestDigestCollisionUsesLongerDigests(t *testing.T) {
	a, b := findCollision(t)
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:"+a, "shared:"+b, "shared:other")),
	})
	res := renderOK(t, tree)
	pods := filesUnder(res.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, pods, 3, "two devices must never share a name")
	long := 0
	for _, p := range pods {
		// edge-a-cam-<12 hex> for the colliding pair, 6 hex for the other device.
		name := strings.TrimSuffix(strings.TrimPrefix(p, "rendered/default/cam/deployment-edge-a-cam-"), ".yaml")
		if len(name) == 12 {
			long++
		} else {
			require.Len(t, name, 6)
		}
	}
	require.Equal(t, 2, long)
	require.Contains(t, strings.Join(res.Plan.Warnings, "\n"), "share the Akri digest")
	again := renderOK(t, tree)
	require.True(t, render.Equal(res.Files, again.Files))
}

// findCollision brute-forces two device ids whose 3-byte Akri digests collide.
func findCollision(t *testing.T) (string, string) {
	t.Helper()
	seen := map[string]string{}
	for i := 0; i < 1<<20; i++ {
		id := fmt.Sprintf("dev-%d", i)
		d := digest3(id)
		if other, ok := seen[d]; ok {
			return other, id
		}
		seen[d] = id
	}
	t.Fatal("no collision found")
	return "", ""
}

func TestDeterministic(t *testing.T) {
	tree := generateFleet(fleetSpec{nodes: 40, configurations: 6, devices: 300, seed: 7})
	a := render.Render(render.Request{Files: tree, SourceCommit: "abc"})
	b := render.Render(render.Request{Files: tree, SourceCommit: "abc"})
	require.Empty(t, a.Errors)
	require.True(t, render.Equal(a.Files, b.Files))
	require.Equal(t, planText(a.Plan), planText(b.Plan))
	// A reused Renderer (with its memo) gives the same bytes as a fresh one.
	r := render.New()
	r.Render(render.Request{Files: tree})
	c := r.Render(render.Request{Files: tree, SourceCommit: "abc"})
	require.True(t, render.Equal(a.Files, c.Files))

	// The memo knows what parsing depends on: a new default namespace re-reads every input.
	tree["gitbroker.yaml"] = []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: edge\n")
	fresh := render.Render(render.Request{Files: tree, SourceCommit: "abc", AllowDeletions: true})
	kept := r.Render(render.Request{Files: tree, SourceCommit: "abc", AllowDeletions: true})
	require.NotEmpty(t, filesUnder(fresh.Files, "rendered/edge/", "/deployment-"))
	require.True(t, render.Equal(fresh.Files, kept.Files))
}

func TestRenderOfOwnOutputIsNoOp(t *testing.T) {
	tree := generateFleet(fleetSpec{nodes: 5, configurations: 4, devices: 20, seed: 1})
	res := render.Render(render.Request{Files: tree, SourceCommit: "commit-1"})
	require.True(t, res.Changed())
	tree = apply(tree, res)
	// The renderer's own commit, or any commit that changes no output, changes nothing: not even
	// the metadata file, so there is never a commit loop.
	again := render.Render(render.Request{Files: tree, SourceCommit: "commit-2"})
	require.False(t, again.Changed(), "diff: %v", render.Diff(again.Previous, again.Files))
	require.True(t, again.Plan.Summary.Empty())
	require.Contains(t, string(tree[render.MetadataPath]), "sourceCommit: commit-1")
}

func TestRenderedTreeBuildsWithKustomize(t *testing.T) {
	tree := generateFleet(fleetSpec{nodes: 12, configurations: 6, devices: 60, seed: 3, shards: 3})
	res := renderOK(t, tree)
	objs, fs := buildRendered(t, res.Files)
	objects := 0
	for _, kind := range []string{"/deployment-", "/job-", "/service-", "/namespace-", "/rolebinding-", "/recorder-rolebinding-"} {
		objects += len(filesUnder(res.Files, "rendered/", kind))
	}
	require.Equal(t, objects, len(objs), "every rendered object is built exactly once")
	require.NotEmpty(t, filesUnder(res.Files, render.NamespacesDir, "/namespace-"), "the broker namespaces are rendered")
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	// Each Flux Kustomization's folder builds on its own too.
	for _, p := range filesUnder(res.Files, "rendered/flux/", ".yaml") {
		var fk struct {
			Spec struct {
				Path string `json:"path"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal(res.Files[p], &fk))
		_, err := k.Run(fs, "/repo/"+strings.TrimPrefix(fk.Spec.Path, "./"))
		require.NoError(t, err, p)
	}
}

// buildRendered builds rendered/ with kustomize, as Flux builds it, and decodes every object
// strictly into its Kubernetes type (a field the type lacks fails the test, as a kind no render
// writes does). It returns the objects and the file system it built from.
func buildRendered(t *testing.T, files render.Tree) ([]any, filesys.FileSystem) {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	for p, b := range files {
		require.NoError(t, fs.WriteFile("/repo/"+p, b))
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/repo/rendered")
	require.NoError(t, err)
	var out []any
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		require.NoError(t, err)
		var target any
		switch r.GetKind() {
		case "Deployment":
			target = &appsv1.Deployment{}
		case "Job":
			target = &batchv1.Job{}
		case "Service":
			target = &corev1.Service{}
		case "Namespace":
			target = &corev1.Namespace{}
		case "RoleBinding":
			target = &rbacv1.RoleBinding{}
		case "ResourceSlice":
			target = &resourcev1.ResourceSlice{}
		case "ResourceClaimTemplate":
			target = &resourcev1.ResourceClaimTemplate{}
		case "DeviceClass":
			target = &resourcev1.DeviceClass{}
		default:
			t.Fatalf("unexpected kind %s", r.GetKind())
		}
		strict, err := kjson.UnmarshalStrict(data, target)
		require.NoError(t, err)
		require.Empty(t, strict, "%s %s decodes strictly", r.GetKind(), r.GetName())
		out = append(out, target)
	}
	return out, fs
}

func TestShardsSplitFoldersAndFluxKustomizations(t *testing.T) {
	cfg := strings.Replace(podConfig, "kind: Configuration\n", "kind: Configuration\n", 1)
	cfg = strings.Replace(cfg, "apiVersion: akri.sh/v0", "apiVersion: gitbroker.dev/v1alpha1", 1) + "  shards: 4\n"
	var devs []string
	for i := 0; i < 40; i++ {
		devs = append(devs, fmt.Sprintf("shared:cam-%d", i))
	}
	tree := repo(map[string]string{
		"configurations/cam.yaml": cfg,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", devs...)),
	})
	res := renderOK(t, tree)
	require.Len(t, filesUnder(res.Files, "rendered/flux/", "default-cam-shard-"), 4)
	root := string(res.Files["rendered/default/cam/kustomization.yaml"])
	for i := 0; i < 4; i++ {
		require.Contains(t, root, fmt.Sprintf("- shard-%d\n", i))
	}
	tree = apply(tree, res)
	// Going back to one folder moves every object between Flux Kustomizations, and plan says so.
	tree["configurations/cam.yaml"] = []byte(strings.Replace(cfg, "shards: 4", "shards: 1", 1))
	res = renderOK(t, tree)
	require.Contains(t, planText(res.Plan), "move between Flux Kustomizations")
	require.Equal(t, 0, res.Plan.Summary.DeploymentsRemoved)
}

func TestFolderSizeWarning(t *testing.T) {
	var devs []string
	for i := 0; i < 30; i++ {
		devs = append(devs, fmt.Sprintf("shared:cam-%d", i))
	}
	tree := repo(map[string]string{
		"gitbroker.yaml":          "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  maxObjectsPerFolder: 10\n",
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", devs...)),
	})
	res := renderOK(t, tree)
	require.Contains(t, strings.Join(res.Plan.Warnings, "\n"), "more than maxObjectsPerFolder (10)")
}

func TestInvalidConfigurationKeepsItsOutput(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"configurations/fw.yaml":  jobConfig("fw", ""),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1"), entry("fw", "plc-1")),
	})
	tree = apply(tree, renderOK(t, tree))
	before := tree.Owned()
	tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "image:", "imagee:", 1))
	// fw changes too, and still renders.
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("cam", "c1"), entry("fw", "plc-1", "plc-2")))
	res := render.Render(render.Request{Files: tree})
	require.Len(t, res.Errors, 1)
	require.Equal(t, "configurations/cam.yaml", res.Errors[0].File)
	require.Equal(t, 13, res.Errors[0].Line)
	for _, p := range filesUnder(before, "rendered/default/cam/", "") {
		require.Equal(t, before[p], res.Files[p], p)
	}
	require.Equal(t, before["rendered/flux/default-cam.yaml"], res.Files["rendered/flux/default-cam.yaml"])
	require.Len(t, jobs(res.Files, "default/fw"), 2)
	// Still invalid on the next render: still kept.
	tree = apply(tree, res)
	res = render.Render(render.Request{Files: tree})
	for _, p := range filesUnder(before, "rendered/default/cam/", "") {
		require.Equal(t, before[p], res.Files[p], p)
	}
}

func TestInvalidInventoryKeepsItsInstances(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": strings.Replace(podConfig, "capacity: 1", "capacity: 2", 1),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:c1", "a1")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:c1", "b1")),
	})
	tree = apply(tree, renderOK(t, tree))
	before := tree.Owned()
	tree["inventory/edge-b.yaml"] = []byte(strings.Replace(inventory("edge-b", entry("cam", "shared:c1", "b1")), "name: edge-b", "name: edge-c", 1))
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("cam", "shared:c1", "a1", "a2")))
	res := render.Render(render.Request{Files: tree})
	require.Len(t, res.Errors, 1)
	require.Contains(t, res.Errors[0].Error(), "inventory/edge-b.yaml:4: metadata.name")
	for _, p := range before.Paths() {
		if strings.Contains(p, "/deployment-") || strings.Contains(p, "/service-") {
			require.Equal(t, before[p], res.Files[p], "%s is kept", p)
		}
	}
	require.Len(t, filesUnder(res.Files, "rendered/default/cam/", "/deployment-"), 5, "the new device a2 renders")
}

func TestCheckDetectsHandEdits(t *testing.T) {
	tree := generateFleet(fleetSpec{nodes: 3, configurations: 2, devices: 6, seed: 2})
	tree = apply(tree, renderOK(t, tree))
	pods := filesUnder(tree, "rendered/", "/deployment-")
	require.NotEmpty(t, pods)
	tree[pods[0]] = bytes.Replace(tree[pods[0]], []byte("image:"), []byte("image: evil\n    x:"), 1)
	res := renderOK(t, tree)
	require.Equal(t, []string{pods[0]}, render.Diff(res.Previous, res.Files))
}

func TestFluxNamesNeverCollide(t *testing.T) {
	cfg := func(ns, name string) string {
		return strings.Replace(podConfig, "  name: cam\n", "  name: "+name+"\n  namespace: "+ns+"\n", 1)
	}
	tree := repo(map[string]string{
		"configurations/a.yaml": cfg("edge", "cam-b"),
		"configurations/b.yaml": cfg("edge-cam", "b"),
		"inventory/edge-a.yaml": inventory("edge-a", strings.Replace(entry("cam-b", "c1"), "devices:", "namespace: edge\n    devices:", 1),
			strings.Replace(entry("b", "c2"), "devices:", "namespace: edge-cam\n    devices:", 1)),
	})
	res := renderOK(t, tree)
	flux := filesUnder(res.Files, "rendered/flux/", ".yaml")
	require.Len(t, flux, 3, "two folders, two Flux Kustomizations, and the namespaces'")
	names := map[string]bool{}
	for _, p := range flux {
		var fk struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal(res.Files[p], &fk))
		names[fk.Metadata.Name] = true
	}
	require.Len(t, names, 3, "every name differs")
}

// Two files defining one Configuration are both errors, whichever sorts first: neither
// definition takes over its running brokers.
func TestConfigurationDefinedTwiceChangesNothing(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1", "c2")),
	})
	tree = apply(tree, renderOK(t, tree))
	tree["configurations/a-copy.yaml"] = []byte(strings.Replace(podConfig, "onvif-video-broker:latest", "attacker/broker:latest", 1))
	res := render.Render(render.Request{Files: tree})
	require.False(t, res.Changed(), "nothing of the Configuration changes")
	var files []string
	for _, e := range res.Errors {
		files = append(files, e.File)
		require.Contains(t, e.Error(), "Configuration default/cam is also defined in")
	}
	require.Equal(t, []string{"configurations/a-copy.yaml", "configurations/cam.yaml"}, files)
}

// Adding, moving or removing a Configuration changes the metadata file even when no object
// changes; the plan says so instead of "No changes".
func TestPlanSaysWhichConfigurationsChanged(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1")),
	})
	tree = apply(tree, renderOK(t, tree))
	tree["configurations/lamp.yaml"] = []byte(strings.Replace(podConfig, "name: cam\n", "name: lamp\n", 1))
	res := renderOK(t, tree)
	require.True(t, res.Changed())
	text := planText(res.Plan)
	require.Contains(t, text, "Configuration default/lamp (Pod broker)")
	require.Contains(t, text, "Configuration lamp created: defined in configurations/lamp.yaml; no node reports a device for it yet")
	require.Contains(t, text, "Summary: 1 Configuration added")
	require.False(t, res.Plan.Summary.Empty())
	tree = apply(tree, res)
	require.False(t, renderOK(t, tree).Changed())

	tree["configurations/light.yaml"] = tree["configurations/lamp.yaml"]
	delete(tree, "configurations/lamp.yaml")
	text = planText(renderOK(t, tree).Plan)
	require.Contains(t, text, "note: now defined in configurations/light.yaml (was configurations/lamp.yaml)")
	tree = apply(tree, renderOK(t, tree))

	delete(tree, "configurations/light.yaml")
	text = planText(renderOK(t, tree).Plan)
	require.Contains(t, text, "Configuration lamp removed: no longer defined (was in configurations/light.yaml)")
	require.Contains(t, text, "1 Configuration removed")
}

// A key given next to a merge key overrides the merged one, as YAML says and kubectl accepts; a
// key given twice is still an error.
func TestMergeKeysMayBeOverridden(t *testing.T) {
	cfg := strings.Replace(podConfig, `        resources:
          limits:
            "{{PLACEHOLDER}}": "1"
`, `        resources:
          requests: &req
            cpu: 10m
            memory: 16Mi
          limits: {<<: *req, memory: 24Mi}
`, 1)
	require.NotEqual(t, podConfig, cfg)
	res := renderOK(t, repo(map[string]string{
		"configurations/cam.yaml": cfg,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1")),
	}))
	pods := filesUnder(res.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, pods, 1)
	var d appsv1.Deployment
	require.NoError(t, yaml.UnmarshalStrict(res.Files[pods[0]], &d))
	limits := d.Spec.Template.Spec.Containers[0].Resources.Limits
	require.Equal(t, "24Mi", limits.Memory().String())
	require.Equal(t, "10m", limits.Cpu().String())

	dup := strings.Replace(podConfig, "  capacity: 1\n", "  capacity: 1\n  capacity: 2\n", 1)
	res = render.Render(render.Request{Files: repo(map[string]string{"configurations/cam.yaml": dup})})
	require.Len(t, res.Errors, 1)
	require.Contains(t, res.Errors[0].Error(), `configurations/cam.yaml:9: invalid YAML: key "capacity" is given twice in one mapping (first on line 8)`)
}

// A file changes only when its object does: discoveryDetails, capacity or a Service spec do not
// touch the Pods (a Pod "replaced" in the plan is one that is re-created).
func TestUnrelatedConfigurationChangesLeavePodsAlone(t *testing.T) {
	cfg := strings.Replace(podConfig, "    name: onvif\n", "    name: onvif\n    discoveryDetails: \"ipAddresses: {items: [10.0.0.1]}\"\n", 1)
	tree := repo(map[string]string{
		"configurations/cam.yaml": cfg,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:c1", "c2")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "shared:c1")),
	})
	tree = apply(tree, renderOK(t, tree))
	pods := filesUnder(tree, "rendered/default/cam/", "/deployment-")
	require.Len(t, pods, 2)
	for _, change := range []struct{ name, old, new string }{
		{"discoveryDetails", "[10.0.0.1]", "[10.0.0.1, 10.0.0.2]"},
		{"capacity", "  capacity: 1\n", "  capacity: 2\n"},
		{"service spec", "      targetPort: 8083\n", "      targetPort: 8084\n"},
	} {
		t.Run(change.name, func(t *testing.T) {
			next := repo(nil)
			for p, b := range tree {
				next[p] = b
			}
			next["configurations/cam.yaml"] = []byte(strings.Replace(cfg, change.old, change.new, 1))
			require.NotEqual(t, cfg, string(next["configurations/cam.yaml"]))
			res := renderOK(t, next)
			for _, p := range pods {
				require.Equal(t, string(tree[p]), string(res.Files[p]), "%s unchanged", p)
			}
			require.Zero(t, res.Plan.Summary.DeploymentsRolledOut)
		})
	}
	// The PodSpec itself does.
	tree["configurations/cam.yaml"] = []byte(strings.Replace(cfg, "onvif-video-broker:latest", "onvif-video-broker:v2", 1))
	require.Equal(t, 2, renderOK(t, tree).Plan.Summary.DeploymentsRolledOut)
}

// Names are sticky: a device whose 3-byte digest another node's newly reported device collides
// with keeps its name (its Deployment, Service and Jobs stay where they are); only the newcomer
// gets the longer digest, and the metadata lists it so the next renders keep it, also once the
// collision is gone.
func TestDigestCollisionDoesNotRenameAnInstance(t *testing.T) {
	a, b := findCollision(t)
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "shared:"+a)),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam")),
	})
	res := renderOK(t, tree)
	before := filesUnder(res.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, before, 1)
	tree = apply(tree, res)

	// edge-b reports a device whose digest collides with edge-a's.
	tree["inventory/edge-b.yaml"] = []byte(inventory("edge-b", entry("cam", "shared:"+b)))
	res = renderOK(t, tree)
	after := filesUnder(res.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, after, 2)
	require.Contains(t, after, before[0], "edge-a's broker keeps its name")
	require.Contains(t, planText(res.Plan), "share the Akri digest")
	require.NotContains(t, planText(res.Plan), "removed")
	meta := render.ParseMetadata(res.Files[render.MetadataPath])
	require.Len(t, meta.InstanceDigests["default/cam"], 1)
	require.Equal(t, b, meta.InstanceDigests["default/cam"][0].Device, "the newcomer has the longer digest")
	require.Len(t, meta.InstanceDigests["default/cam"][0].Digest, 12)
	tree = apply(tree, res)
	again := renderOK(t, tree)
	require.True(t, render.Equal(res.Files, again.Files), "stable")

	// The collision gone, the newcomer keeps the name it was given.
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("cam")))
	res = renderOK(t, tree)
	left := filesUnder(res.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, left, 1)
	require.Contains(t, after, left[0], "the newcomer's broker keeps its longer name")
}

// Moving from a running Akri: its Configurations as `kubectl get akric -o yaml` prints them (a
// List, with the fields the API server sets) render as the same Configurations would.
func TestKubectlListRenders(t *testing.T) {
	list := "apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n" +
		"- apiVersion: akri.sh/v0\n  kind: Configuration\n  metadata:\n    name: cam\n    namespace: default\n    uid: 0b5b5f9e-5d1c-4a43-9d6c-1c4b1b7e2f01\n    resourceVersion: \"4711\"\n    generation: 2\n    creationTimestamp: \"2026-11-30T10:00:00Z\"\n" +
		"  spec:\n    discoveryHandler:\n      name: debugEcho\n      discoveryDetails: \"descriptions: [c1]\"\n    brokerSpec:\n      brokerPodSpec:\n        containers:\n        - name: broker\n          image: nginx:stable-alpine\n  status: {}\n"
	single := "apiVersion: akri.sh/v0\nkind: Configuration\nmetadata:\n  name: cam\n  namespace: default\n" +
		"spec:\n  discoveryHandler:\n    name: debugEcho\n    discoveryDetails: \"descriptions: [c1]\"\n  brokerSpec:\n    brokerPodSpec:\n      containers:\n      - name: broker\n        image: nginx:stable-alpine\n"
	inv := strings.ReplaceAll(inventory("edge-a", entry("cam", "shared:c1")), "ONVIF_", "DEBUG_ECHO_")
	fromList := renderOK(t, repo(map[string]string{"configurations/cam.yaml": list, "inventory/edge-a.yaml": inv}))
	fromFile := renderOK(t, repo(map[string]string{"configurations/cam.yaml": single, "inventory/edge-a.yaml": inv}))
	brokers := filesUnder(fromList.Files, "rendered/default/cam/", "/deployment-")
	require.Len(t, brokers, 1)
	require.Equal(t, string(fromFile.Files[brokers[0]]), string(fromList.Files[brokers[0]]), "the server's fields change nothing")
}

// A Service keeps the selector the Configuration gives, with Akri's labels added over it, as
// Akri's controller merges them; a port without targetPort gets the port, as the API server
// defaults it, so the applied object is the one the server keeps (not targetPort: 0).
func TestServiceSelectorMergedAndTargetPortDefaulted(t *testing.T) {
	cfg := strings.Replace(podConfig, "  instanceServiceSpec:\n    ports:\n    - name: grpc\n      port: 80\n      targetPort: 8083\n",
		"  instanceServiceSpec:\n    selector: {tier: edge, controller: someone-else}\n    ports:\n    - name: grpc\n      port: 80\n  configurationServiceSpec:\n    ports:\n    - {name: http, port: 8080}\n", 1)
	tree := repo(map[string]string{
		"configurations/cam.yaml": cfg,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "d0")),
	})
	res := render.Render(render.Request{Files: tree})
	require.Empty(t, res.Errors)
	tree = apply(tree, res)
	inst := filesUnder(tree, "rendered/default/cam/", "/service-cam-")
	require.Len(t, inst, 2)
	for _, f := range inst {
		svc := string(tree[f])
		require.NotContains(t, svc, "targetPort: 0", f)
		if strings.Contains(f, "-svc.yaml") && !strings.HasSuffix(f, "/service-cam-svc.yaml") {
			require.Contains(t, svc, "  selector:\n    akri.sh/instance: ", f)
			require.Contains(t, svc, "    controller: akri.sh\n    tier: edge\n", f)
			require.Contains(t, svc, "    targetPort: 80\n", f)
		} else {
			require.Contains(t, svc, "  selector:\n    akri.sh/configuration: cam\n    controller: akri.sh\n", f)
			require.Contains(t, svc, "    targetPort: 8080\n", f)
		}
	}
}

// An Akri user's Configurations as `kubectl get akric -A -o yaml` prints them (a List with the
// fields the API server sets) render as Akri's controller would run them: a broker per device,
// named by Akri's instance names.
func TestKubectlListOfAkriConfigurationsRenders(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/from-akri.yaml": fixtures.KubectlAkric,
		"inventory/edge-a.yaml": inventory("edge-a", strings.ReplaceAll(entry("akri-debug-echo", "shared:foo0"), "ONVIF_", "DEBUG_ECHO_"),
			strings.ReplaceAll(entry("akri-udev", "/sys/devices/platform/video0"), "ONVIF_", "UDEV_")),
	})
	res := render.Render(render.Request{Files: tree})
	require.Empty(t, res.Errors)
	tree = apply(tree, res)
	echo := filesUnder(tree, "rendered/default/akri-debug-echo/", "/deployment-")
	require.Len(t, echo, 1)
	require.Contains(t, string(tree[echo[0]]), "akri.sh/instance: akri-debug-echo-"+api.AkriDigest(api.DeviceKey{ID: "foo0", Shared: true}, 3))
	udev := filesUnder(tree, "rendered/default/akri-udev/", "/deployment-")
	require.Len(t, udev, 1)
	for _, f := range append(echo, udev...) {
		require.NotContains(t, string(tree[f]), "resourceVersion", f)
		require.NotContains(t, string(tree[f]), "last-applied-configuration", f)
	}
}

// WriterTip finds each writer's tip in the metadata the render writes as a parse of the whole
// file does (a hash of digits only comes quoted), without parsing it: a dense file of the same
// size finds nothing and costs no parse.
func TestWriterTipReadsTheMetadataAsItIsWritten(t *testing.T) {
	writers := map[string]string{
		"gitbroker/inventory/edge-a": "0123456789abcdef0123456789abcdef01234567",
		"gitbroker/inventory/edge-b": "1234567890123456789012345678901234567890",
		"gitbroker/status":           "fedcba9876543210fedcba9876543210fedcba98",
	}
	for i := range 500 {
		writers[fmt.Sprintf("gitbroker/inventory/node-%03d", i)] = fmt.Sprintf("%040x", i+1)
	}
	_, res := renderWithWriters(t, writers)
	meta := res.Files[render.MetadataPath]
	require.Contains(t, string(meta), "gitbroker/inventory/edge-b: \"1234567890123456789012345678901234567890\"", "a hash of digits is quoted")
	parsed := render.ParseMetadata(meta).Writers
	require.Len(t, parsed, len(writers))
	for ref, tip := range writers {
		require.Equal(t, tip, parsed[ref], ref)
		require.Equal(t, tip, render.WriterTip(meta, ref), ref)
	}
	require.Empty(t, render.WriterTip(meta, "gitbroker/inventory/edge-c"))
	require.Empty(t, render.WriterTip(meta, "gitbroker/inventory"))
	dense := []byte("writers:\n" + strings.Repeat("  - {a: b}\n", 500_000))
	require.Empty(t, render.WriterTip(dense, "gitbroker/status"))
}

// renderWithWriters renders one device on edge-a with the writer refs' tips writers, and returns
// the repository it rendered and the result.
func renderWithWriters(t *testing.T, writers map[string]string) (render.Tree, *render.Result) {
	t.Helper()
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "d0")),
	})
	res := render.Render(render.Request{Files: tree, Writers: writers})
	require.Empty(t, res.Errors)
	return tree, res
}

// The accepted tips are also written in shards, each a small file a restarted writer reads from
// its shard's branch: every writer's tip is in its own shard, a render whose writers are the same
// rewrites no shard, and a change of one writer's tip rewrites that writer's shard alone.
func TestAcceptedTipsAreShardedByWriter(t *testing.T) {
	writers := map[string]string{"gitbroker/status": fmt.Sprintf("%040x", 1)}
	for i := range 2000 {
		writers[fmt.Sprintf("gitbroker/inventory/node-%04d", i)] = fmt.Sprintf("%040x", i+2)
	}
	tree, res := renderWithWriters(t, writers)
	shards := map[string]int{}
	for ref, tip := range writers {
		shard := api.AcceptedShard(ref)
		shards[shard]++
		data, ok := res.Files[api.AcceptedFile(shard)]
		require.True(t, ok, ref)
		require.Equal(t, tip, render.WriterTip(data, ref), ref)
	}
	require.Len(t, shards, api.AcceptedShards, "2,000 writers fill every shard")
	for shard, n := range shards {
		require.Len(t, render.ParseMetadata(res.Files[api.AcceptedFile(shard)]).Writers, n, "shard %s holds its writers only", shard)
	}
	require.Len(t, render.AcceptedCompanions(res.Files), api.AcceptedShards)

	// The same writers again: nothing changes.
	next := maps.Clone(tree)
	maps.Copy(next, res.Files)
	again := render.Render(render.Request{Files: next, Writers: writers})
	require.False(t, again.Changed(), "diff: %v", again.Diff)

	// One writer's new tip rewrites its shard and the metadata, nothing else.
	moved := maps.Clone(writers)
	moved["gitbroker/inventory/node-0042"] = fmt.Sprintf("%040x", 99999)
	once := render.Render(render.Request{Files: next, Writers: moved})
	require.Equal(t, []string{api.AcceptedFile(api.AcceptedShard("gitbroker/inventory/node-0042")), render.MetadataPath}, once.Diff, "the diff stays sorted")

	// A writer gone from a shard of its own: that shard's file goes.
	alone := map[string]string{"gitbroker/status": writers["gitbroker/status"]}
	gone := render.Render(render.Request{Files: next, Writers: alone})
	require.Len(t, render.AcceptedCompanions(gone.Files), 1)
	require.Equal(t, writers["gitbroker/status"], render.WriterTip(gone.Files[api.AcceptedFile(api.AcceptedShard("gitbroker/status"))], "gitbroker/status"))
}
