package render_test

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

const twoClusters = `apiVersion: gitbroker.dev/v1alpha1
kind: Settings
spec:
  clusters:
  - name: site-a
    labels: {ring: canary}
    nodes: ["node-000[0-1]"]
  - name: site-b
    nodes: [node-0002, node-0003]
`

// clusterFleet is a small fleet (4 nodes, 2 Configurations) whose nodes are split over two
// clusters.
func clusterFleet() render.Tree {
	t := generateFleet(fleetSpec{nodes: 4, configurations: 2, devices: 12, seed: 7})
	t["gitbroker.yaml"] = []byte(twoClusters)
	return t
}

// Each cluster renders under rendered/<cluster>/ what a repository of its nodes alone renders,
// with its Flux Kustomizations pointing there; nothing stays at the top but what the clusters
// share.
func TestClustersRenderEachUnderItsFolder(t *testing.T) {
	tree := clusterFleet()
	res := renderOK(t, tree)
	for f := range res.Files {
		top, rest, _ := strings.Cut(strings.TrimPrefix(f, "rendered/"), "/")
		switch {
		case f == render.MetadataPath, strings.HasPrefix(f, "rendered/.gitbroker-accepted/"):
		case strings.HasPrefix(f, "rendered/"):
			require.Contains(t, []string{"site-a", "site-b"}, top, f)
			require.NotEmpty(t, rest, f)
		case strings.HasPrefix(f, "history/"):
			require.Regexp(t, `^history/site-[ab]/`, f)
		default:
			t.Fatalf("unexpected file %s", f)
		}
	}
	// Each cluster's part is what its nodes alone render.
	for cluster, nodes := range map[string][]string{"site-a": {"node-0000", "node-0001"}, "site-b": {"node-0002", "node-0003"}} {
		alone := render.Tree{}
		for f, b := range tree {
			if strings.HasPrefix(f, "configurations/") {
				alone[f] = b
			}
		}
		for _, n := range nodes {
			alone["inventory/"+n+".yaml"] = tree["inventory/"+n+".yaml"]
		}
		want := renderOK(t, alone).Files
		got := render.Tree{}
		for f, b := range res.Files {
			if rest, ok := strings.CutPrefix(f, "rendered/"+cluster+"/"); ok {
				got["rendered/"+rest] = b
			} else if rest, ok := strings.CutPrefix(f, "history/"+cluster+"/"); ok {
				got["history/"+rest] = b
			}
		}
		// The same objects, but for what the brokers are told of their cluster (and so their
		// inputs hashes, and the names of the Jobs' runs).
		for f, b := range want {
			if f == render.MetadataPath || strings.HasPrefix(f, "rendered/.gitbroker-accepted/") || strings.Contains(f, "/job-") || strings.HasPrefix(f, "history/") {
				continue
			}
			if strings.HasPrefix(f, "rendered/flux/") {
				b = []byte(strings.ReplaceAll(string(b), "path: ./rendered/", "path: ./rendered/"+cluster+"/"))
			}
			if strings.HasSuffix(f, "/kustomization.yaml") {
				b, got[f] = jobNames.ReplaceAll(b, nil), jobNames.ReplaceAll(got[f], nil)
			}
			require.Equal(t, string(withoutCluster(b)), string(withoutCluster(got[f])), "%s of cluster %s", f, cluster)
		}
		require.Equal(t, len(want)-countAccepted(want)-1, len(got)-1, "cluster %s: the same files, and its own metadata", cluster)
	}
	text := planText(res.Plan)
	require.Contains(t, text, "Clusters changed: site-a, site-b\n")
	require.Contains(t, text, "Configuration default/cfg-00 (Pod broker) in cluster site-a\n")
	require.Contains(t, text, "Configuration default/cfg-00 (Pod broker) in cluster site-b\n")

	// Deterministic, and a kept Renderer renders on top of its output what a fresh one does.
	require.Equal(t, res.Files, renderOK(t, tree).Files)
	r := render.New()
	first := r.Render(render.Request{Files: tree})
	again := r.Render(render.Request{Files: apply(tree, first)})
	require.Empty(t, again.Diff)
	require.Empty(t, again.Plan.Clusters)
	require.Empty(t, renderOK(t, apply(tree, first)).Diff)

	// One node's change is its cluster's alone, in the files and in the plan.
	tree = apply(tree, first)
	inv := string(tree["inventory/node-0003.yaml"])
	i := strings.Index(inv, "id: ")
	require.Positive(t, i)
	tree["inventory/node-0003.yaml"] = []byte(inv[:i] + "id: moved-" + inv[i+len("id: "):])
	changed := r.Render(render.Request{Files: tree})
	require.Equal(t, []string{"site-b"}, changed.Plan.Clusters)
	require.NotEmpty(t, changed.Diff)
	for _, f := range changed.Diff {
		require.True(t, strings.HasPrefix(f, "rendered/site-b/") || strings.HasPrefix(f, "history/site-b/") || f == render.MetadataPath || strings.HasPrefix(f, "rendered/.gitbroker-accepted/"), f)
	}
	require.Equal(t, changed.Files, renderOK(t, tree).Files, "a kept Renderer renders what a fresh one does")
}

var (
	clusterEnvLines = regexp.MustCompile(`(?m)^ *- name: GITBROKER_CLUSTER[A-Z0-9_]*\n *value: .*\n`)
	inputsHashLines = regexp.MustCompile(`(?m)^ *gitbroker.dev/inputs-hash: .*\n`)
	jobNames        = regexp.MustCompile(`job-[a-z0-9-]+\.yaml`)
)

// withoutCluster is an object without what its broker is told of its cluster.
func withoutCluster(b []byte) []byte {
	return inputsHashLines.ReplaceAll(clusterEnvLines.ReplaceAll(b, nil), nil)
}

func countAccepted(t render.Tree) int {
	n := 0
	for f := range t {
		if strings.HasPrefix(f, "rendered/.gitbroker-accepted/") {
			n++
		}
	}
	return n
}

// A Configuration renders only for the clusters its selector picks, and leaves the others'
// folders when its selector stops picking them.
func TestClusterSelectorPicksClusters(t *testing.T) {
	tree := clusterFleet()
	cfg := string(tree["configurations/cfg-01.yaml"])
	tree["configurations/cfg-01.yaml"] = []byte(strings.Replace(cfg, "metadata:\n  name: cfg-01\n", "metadata:\n  name: cfg-01\n  annotations: {gitbroker.dev/clusters: ring=canary}\n", 1))
	res := renderOK(t, tree)
	var inA, inB bool
	for f := range res.Files {
		inA = inA || strings.HasPrefix(f, "rendered/site-a/default/cfg-01/")
		inB = inB || strings.HasPrefix(f, "rendered/site-b/default/cfg-01/")
	}
	require.True(t, inA, "site-a is the canary ring")
	require.False(t, inB, "site-b is not")
	for _, c := range res.Plan.Configurations {
		if c.Name == "cfg-01" {
			require.Equal(t, "site-a", c.Cluster)
		}
	}
}

// A node that is in no cluster, or in two, is an error at its inventory, and what it rendered
// before stays where it was.
func TestNodeInNoClusterKeepsItsBrokers(t *testing.T) {
	tree := clusterFleet()
	before := renderOK(t, tree)
	tree = apply(tree, before)
	var a1 []string
	for f := range before.Files {
		if strings.HasPrefix(f, "rendered/site-a/") && strings.Contains(string(before.Files[f]), "node-0001") && strings.Contains(f, "deployment-") {
			a1 = append(a1, f)
		}
	}
	require.NotEmpty(t, a1)

	for name, settings := range map[string]string{
		"in none": strings.Replace(twoClusters, `["node-000[0-1]"]`, "[node-0000]", 1),
		"in two":  strings.Replace(twoClusters, "[node-0002, node-0003]", "[node-0002, node-0003, node-0001]", 1),
	} {
		t.Run(name, func(t *testing.T) {
			moved := maps.Clone(tree)
			moved["gitbroker.yaml"] = []byte(settings)
			res := render.Render(render.Request{Files: moved})
			require.Nil(t, res.Refused)
			require.Len(t, res.Errors, 1)
			require.Equal(t, "inventory/node-0001.yaml", res.Errors[0].File)
			require.Contains(t, res.Errors[0].Message, "node node-0001 is in ")
			for _, f := range a1 {
				require.Equal(t, string(before.Files[f]), string(res.Files[f]), "kept: %s", f)
			}
			for f := range res.Files {
				require.False(t, strings.HasPrefix(f, "rendered/site-b/") && strings.Contains(string(res.Files[f]), "node-0001"), "nothing of node-0001 reaches site-b: %s", f)
			}
		})
	}
}

// Turning spec.clusters on over a one-cluster rendered/ moves every broker, which is refused
// until the deletions are allowed.
func TestTurningClustersOnIsRefusedUntilAllowed(t *testing.T) {
	tree := clusterFleet()
	delete(tree, "gitbroker.yaml")
	tree = apply(tree, renderOK(t, tree))
	tree["gitbroker.yaml"] = []byte(twoClusters)
	res := render.Render(render.Request{Files: tree})
	require.NotNil(t, res.Refused)
	require.Contains(t, res.Refused.Reason, "point each cluster's Flux or Argo CD at its folder")
	require.Empty(t, res.Diff)

	// So is taking a cluster out of spec.clusters: its brokers would all go.
	two := apply(clusterFleet(), renderOK(t, clusterFleet()))
	two["gitbroker.yaml"] = []byte(strings.Replace(twoClusters, "  - name: site-b\n    nodes: [node-0002, node-0003]\n", "", 1))
	dropped := render.Render(render.Request{Files: two})
	require.NotNil(t, dropped.Refused)
	require.Contains(t, dropped.Refused.Reason, "a cluster taken out of spec.clusters loses its brokers")
	require.Contains(t, dropped.Refused.Reason, "rendered/site-b/")
	res = render.Render(render.Request{Files: tree, AllowDeletions: true})
	require.Nil(t, res.Refused)
	for f := range res.Files {
		if strings.HasPrefix(f, "rendered/default/") {
			t.Fatalf("the one-cluster folder stayed: %s", f)
		}
	}
}

// A cluster's brokers are told its name and labels, and a label's change rolls out that
// cluster's brokers alone.
func TestBrokersAreToldTheirCluster(t *testing.T) {
	tree := clusterFleet()
	r := render.New()
	res := r.Render(render.Request{Files: tree})
	require.Empty(t, res.Errors)
	var a, b string
	for f, data := range res.Files {
		if strings.Contains(f, "/deployment-") {
			if strings.HasPrefix(f, "rendered/site-a/") {
				a = string(data)
			} else if strings.HasPrefix(f, "rendered/site-b/") {
				b = string(data)
			}
		}
	}
	require.Contains(t, a, "- name: GITBROKER_CLUSTER\n          value: site-a\n")
	require.Contains(t, a, "- name: GITBROKER_CLUSTER_LABEL_RING\n          value: canary\n")
	require.Contains(t, b, "- name: GITBROKER_CLUSTER\n          value: site-b\n")
	require.NotContains(t, b, "GITBROKER_CLUSTER_LABEL_")
	for f, data := range renderOK(t, generateFleet(fleetSpec{nodes: 4, configurations: 2, devices: 12, seed: 7})).Files {
		require.NotContains(t, string(data), "GITBROKER_CLUSTER", f)
	}

	tree = apply(tree, res)
	tree["gitbroker.yaml"] = []byte(strings.Replace(twoClusters, "{ring: canary}", "{ring: early}", 1))
	moved := r.Render(render.Request{Files: tree})
	require.Empty(t, moved.Errors)
	require.Equal(t, []string{"site-a"}, moved.Plan.Clusters)
	rolled := 0
	for _, f := range moved.Diff {
		require.False(t, strings.HasPrefix(f, "rendered/site-b/"), f)
		if strings.Contains(f, "/deployment-") {
			require.Contains(t, string(moved.Files[f]), "value: early\n")
			rolled++
		}
	}
	require.Positive(t, rolled)
	require.Equal(t, moved.Files, renderOK(t, tree).Files, "a kept Renderer renders what a fresh one does")
}

// availableRecords records, as each cluster's recorder would, every staged broker Deployment of
// tree Available (or not) with the spec it is rendered with.
func availableRecords(t *testing.T, tree render.Tree, available func(cluster, deployment string) bool) {
	t.Helper()
	for f, data := range tree {
		rest, ok := strings.CutPrefix(f, "rendered/")
		if !ok || !strings.Contains(f, "/deployment-") {
			continue
		}
		cluster, inner, _ := strings.Cut(rest, "/")
		ns, _, _ := strings.Cut(inner, "/")
		name := strings.TrimSuffix(strings.TrimPrefix(f[strings.LastIndex(f, "/")+1:], "deployment-"), ".yaml")
		require.Contains(t, string(data), "gitbroker.dev/rollout: staged", f)
		hash := regexp.MustCompile(`gitbroker.dev/inputs-hash: (\S+)`).FindStringSubmatch(string(data))[1]
		tree["status/"+cluster+"/rollouts/"+ns+"/"+name+".yaml"] = []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: RolloutRecord\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
			"\nspec:\n  inputsHash: " + hash + "\n  available: " + strconv.FormatBool(available(cluster, name)) + "\n")
	}
}

// With spec.clusterRollout a change of a Pod broker Configuration reaches the canary ring first,
// and the rest only once the canary's brokers are recorded Available with it; a canary that
// never becomes Available stops the rollout there.
func TestClusterRolloutGoesRingByRing(t *testing.T) {
	tree := clusterFleet()
	tree["gitbroker.yaml"] = []byte(twoClusters + "  clusterRollout:\n    label: ring\n    rings: [canary]\n")
	r := render.New()
	first := r.Render(render.Request{Files: tree})
	require.Empty(t, first.Errors)
	require.Contains(t, planText(first.Plan), "Cluster rollout rings: canary (site-a), then rest (site-b)\n")
	tree = apply(tree, first)
	availableRecords(t, tree, func(string, string) bool { return true })
	tree = apply(tree, r.Render(render.Request{Files: tree}))

	// A new image: the canary ring rolls out, the rest waits.
	cfg := string(tree["configurations/cfg-00.yaml"])
	require.Contains(t, cfg, "onvif-video-broker:latest")
	tree["configurations/cfg-00.yaml"] = []byte(strings.ReplaceAll(cfg, "onvif-video-broker:latest", "onvif-video-broker:v2"))
	second := r.Render(render.Request{Files: tree})
	require.Empty(t, second.Errors)
	changed := func(res *render.Result, cluster string) (rolled, same int) {
		for f, data := range res.Files {
			if strings.HasPrefix(f, "rendered/"+cluster+"/") && strings.Contains(f, "/cfg-00/") && strings.Contains(f, "/deployment-") {
				if strings.Contains(string(data), ":v2") {
					rolled++
				} else {
					same++
				}
			}
		}
		return
	}
	rolledA, sameA := changed(second, "site-a")
	rolledB, sameB := changed(second, "site-b")
	require.Positive(t, rolledA)
	require.Zero(t, sameA)
	require.Zero(t, rolledB)
	require.Positive(t, sameB)
	require.Contains(t, planText(second.Plan), "cluster rollout: ")
	require.Contains(t, planText(second.Plan), "in cluster site-a (an earlier ring) is not recorded Available with its new spec")
	require.Equal(t, second.Files, renderOK(t, tree).Files, "a kept Renderer renders what a fresh one does")

	// The canary's brokers never become Available: the rollout stops there.
	tree = apply(tree, second)
	stuck := maps.Clone(tree)
	availableRecords(t, stuck, func(cluster, _ string) bool { return cluster != "site-a" })
	held := r.Render(render.Request{Files: stuck})
	rolledB, _ = changed(held, "site-b")
	require.Zero(t, rolledB, "the rest waits while the canary is not Available")

	// Recorded Available with the new spec: the rest rolls out.
	availableRecords(t, tree, func(string, string) bool { return true })
	third := r.Render(render.Request{Files: tree})
	rolledB, sameB = changed(third, "site-b")
	require.Positive(t, rolledB)
	require.Zero(t, sameB)
	require.Equal(t, third.Files, renderOK(t, tree).Files, "a kept Renderer renders what a fresh one does")
}

// A node enrolled in one cluster cannot get a broker rendered in another: a device it reports
// that another cluster's nodes see too (the same shared id) is that cluster's device there, its
// broker placed and its capacity shared among that cluster's nodes alone, whatever this node
// says; and what the node reports renders in its own cluster's folder only.
func TestNodeEnrolledInOneClusterCannotGetABrokerRenderedInAnother(t *testing.T) {
	settings := "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  clusters:\n  - name: site-a\n    nodes: [edge-a]\n  - name: site-b\n    nodes: [edge-b, edge-c]\n"
	tree := repo(map[string]string{
		"gitbroker.yaml":          settings,
		"configurations/cam.yaml": fixtures.PodConfiguration("akri.sh/v0", "cam", 1),
		// edge-a (site-a) reports site-b's shared camera, and a device of its own.
		"inventory/edge-a.yaml": inventory("edge-a", entry("cam", "shared:c1", "a1")),
		"inventory/edge-b.yaml": inventory("edge-b", entry("cam", "shared:c1")),
		"inventory/edge-c.yaml": inventory("edge-c", entry("cam", "shared:c1")),
	})
	res := renderOK(t, tree)
	for f, data := range res.Files {
		if strings.HasPrefix(f, "rendered/site-b/") {
			require.NotContains(t, string(data), "edge-a", "site-b's %s names a node of site-a", f)
		}
		if strings.HasPrefix(f, "rendered/site-a/") && strings.Contains(f, "/deployment-") {
			require.NotContains(t, string(data), "edge-b", f)
			require.NotContains(t, string(data), "edge-c", f)
		}
	}
	tree = apply(tree, res)
	// site-b's camera (capacity 1) has its one slot on edge-b, first of its nodes by name; site-a
	// has a camera of the same id of its own, on edge-a alone.
	shares := sharesIn(t, tree, "edge-a", "edge-b", "edge-c")
	require.Len(t, shares["edge-b"], 1)
	require.Empty(t, shares["edge-c"])
	require.Len(t, shares["edge-a"], 1)
	var inB, inA int
	for f := range res.Files {
		if strings.Contains(f, "/deployment-") && strings.HasPrefix(f, "rendered/site-b/") {
			inB++
		}
		if strings.Contains(f, "/deployment-") && strings.HasPrefix(f, "rendered/site-a/") {
			inA++
		}
	}
	require.Equal(t, 1, inB, "one broker for site-b's camera, placed among site-b's nodes")
	require.Equal(t, 2, inA, "site-a's camera of the same id and edge-a's own device")

	// Without edge-a, site-b renders the same bytes: nothing of edge-a's report reaches it.
	without := maps.Clone(tree)
	delete(without, "inventory/edge-a.yaml")
	alone := render.Render(render.Request{Files: without, AllowDeletions: true})
	for f, data := range res.Files {
		if strings.HasPrefix(f, "rendered/site-b/") || strings.HasPrefix(f, "history/site-b/") {
			require.Equal(t, string(data), string(alone.Files[f]), f)
		}
	}
}

// An invalid Configuration keeps, in every cluster, everything it rendered before: its
// folders and the Flux Kustomizations that apply them, which Flux would otherwise prune with
// its brokers.
func TestInvalidConfigurationKeepsEachClustersPart(t *testing.T) {
	tree := clusterFleet()
	before := renderOK(t, tree)
	tree = apply(tree, before)
	cfg := string(tree["configurations/cfg-00.yaml"])
	require.Contains(t, cfg, "image:")
	tree["configurations/cfg-00.yaml"] = []byte(strings.Replace(cfg, "image:", "imagee:", 1))
	res := render.Render(render.Request{Files: tree})
	require.Nil(t, res.Refused)
	require.NotEmpty(t, res.Errors)
	kept := 0
	for f, b := range before.Files {
		if strings.Contains(f, "/default/cfg-00/") || strings.Contains(f, "/flux/default-cfg-00") {
			require.Equal(t, string(b), string(res.Files[f]), "kept: %s", f)
			kept++
		}
	}
	require.Positive(t, kept)
	for _, f := range res.Diff {
		require.NotContains(t, f, "cfg-00", "nothing of the invalid Configuration changes")
	}
}

// A cluster's Job outcomes come from its recorder's records (status/<cluster>/), retire its Jobs
// to history/<cluster>/, and history lists them with their cluster; a record under another
// cluster's folder retires nothing here.
func TestClusterJobsRetireFromTheirRecords(t *testing.T) {
	tree := clusterFleet()
	tree = apply(tree, renderOK(t, tree))
	var job, inst, device string
	for f, data := range tree {
		if strings.HasPrefix(f, "rendered/site-b/default/cfg-01/") && strings.Contains(f, "/job-") {
			job = strings.TrimSuffix(f[strings.LastIndex(f, "/")+1:], ".yaml")
			inst = regexp.MustCompile(`akri.sh/instance: (\S+)`).FindStringSubmatch(string(data))[1]
			device = regexp.MustCompile(`gitbroker.dev/device-id: (\S+)`).FindStringSubmatch(string(data))[1]
			break
		}
	}
	require.NotEmpty(t, job)
	job = strings.TrimPrefix(job, "job-")
	rec := record("default", job, "cfg-01", inst, device, "Succeeded")

	// Recorded by site-a's recorder: site-b's Job is not site-a's to retire.
	wrong := maps.Clone(tree)
	wrong["status/site-a/jobs/default/"+job+".yaml"] = []byte(rec)
	res := render.Render(render.Request{Files: wrong, RenderedJobsOnly: true})
	for f := range res.Files {
		require.False(t, strings.HasPrefix(f, "history/"), "nothing retired: %s", f)
	}

	tree["status/site-b/jobs/default/"+job+".yaml"] = []byte(rec)
	res = render.Render(render.Request{Files: tree, RenderedJobsOnly: true})
	require.Empty(t, res.Errors)
	var retired []string
	for f := range res.Files {
		if strings.HasPrefix(f, "history/") {
			retired = append(retired, f)
		}
	}
	require.Len(t, retired, 1)
	require.True(t, strings.HasPrefix(retired[0], "history/site-b/jobs/default/cfg-01/"), retired[0])
	runs, errs := render.Runs(apply(tree, res), render.RunFilter{})
	require.Empty(t, errs)
	require.Len(t, runs, 1)
	require.Equal(t, "site-b", runs[0].Cluster)
	require.Equal(t, "cfg-01", runs[0].Configuration)
	var b strings.Builder
	render.WriteRuns(&b, runs, 0)
	require.Contains(t, b.String(), " in cluster site-b\n")
}

// Turning clusters on keeps every Job (trust review 3, finding 4): a Job recorded Succeeded and
// retired before the switch stays history (now its cluster's), a rendered Job whose record the
// one-cluster recorder wrote retires from it, a running one stays frozen in its cluster's
// folder, and none is started again.
func TestTurningClustersOnRunsNoJobAgain(t *testing.T) {
	for _, dra := range []bool{false, true} {
		t.Run(map[bool]string{false: "device-plugin", true: "dra"}[dra], func(t *testing.T) { turningClustersOn(t, dra) })
	}
}

// turningClustersOn is TestTurningClustersOnRunsNoJobAgain in a mode: in DRA mode a shared
// device's Job is not pinned, and goes where its ResourceSlice's nodes are.
func turningClustersOn(t *testing.T, dra bool) {
	tree := clusterFleet()
	delete(tree, "gitbroker.yaml")
	settings := twoClusters
	if dra {
		tree["gitbroker.yaml"] = []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  deviceAllocation: dra\n")
		settings = strings.Replace(twoClusters, "spec:\n", "spec:\n  deviceAllocation: dra\n", 1)
		// A shared device's Job, which DRA mode does not pin.
		inv := string(tree["inventory/node-0001.yaml"])
		require.Contains(t, inv, "- id: dev-000006\n      shared: false")
		tree["inventory/node-0001.yaml"] = []byte(strings.Replace(inv, "- id: dev-000006\n      shared: false", "- id: dev-000006\n      shared: true", 1))
	}
	tree = apply(tree, renderOK(t, tree))
	jobs := jobsIn(tree, func(f string, data []byte) bool {
		return strings.HasPrefix(f, "rendered/default/") && strings.Contains(f, "/job-")
	})
	require.GreaterOrEqual(t, len(jobs), 3, "the fleet renders Jobs")
	if dra {
		unpinned := 0
		for _, f := range sortedPaths(tree) {
			if strings.HasPrefix(f, "rendered/default/") && strings.Contains(f, "/job-") && !strings.Contains(string(tree[f]), "matchFields") {
				unpinned++
			}
		}
		require.Positive(t, unpinned, "a shared device's Job is not pinned in DRA mode")
	}
	// The first is recorded and retired before the switch; the second is recorded at the
	// switch by the one-cluster recorder; the rest are running.
	retired, recorded := jobs[0], jobs[1]
	tree["status/jobs/default/"+retired.name+".yaml"] = []byte(record("default", retired.name, retired.cfg, retired.inst, retired.device, "Succeeded"))
	tree = apply(tree, renderOK(t, tree))
	require.Contains(t, strings.Join(sortedPaths(tree), "\n"), "history/jobs/default/"+retired.cfg+"/"+retired.inst+"/"+retired.name+".yaml")
	tree["status/jobs/default/"+recorded.name+".yaml"] = []byte(record("default", recorded.name, recorded.cfg, recorded.inst, recorded.device, "Succeeded"))

	tree["gitbroker.yaml"] = []byte(settings)
	res := render.Render(render.Request{Files: tree, RenderedJobsOnly: true, AllowDeletions: true})
	require.Nil(t, res.Refused)
	require.Empty(t, res.Errors)
	var text strings.Builder
	res.Plan.WriteText(&text)
	require.NotContains(t, text.String(), "new run", "no Job starts again:\n%s", text.String())
	out := strings.Join(sortedPaths(res.Files), "\n")
	for _, j := range jobs {
		require.Equal(t, 1, strings.Count(out, "/"+j.name+".yaml")+strings.Count(out, "/job-"+j.name+".yaml"), "%s is kept once:\n%s", j.name, out)
	}
	require.Regexp(t, `history/site-[ab]/jobs/default/`+retired.cfg+`/`+retired.inst+`/`+retired.name+`\.yaml`, out, "the retired Job stays history")
	require.Regexp(t, `history/site-[ab]/jobs/default/`+recorded.cfg+`/`+recorded.inst+`/`+recorded.name+`\.yaml`, out, "the recorded Job retires")
	for _, j := range jobs[2:] {
		require.Regexp(t, `rendered/site-[ab]/default/`+j.cfg+`/(\S+/)?job-`+j.name+`\.yaml`, out, "a running Job stays frozen")
	}
	require.NotContains(t, text.String(), "records outside status/<cluster>/ are not read")
	require.Contains(t, text.String(), "finished one(s) of the one-cluster layout move with their nodes to their clusters")
	// plan, before the switch is allowed, says the same.
	refused := render.Render(render.Request{Files: tree, RenderedJobsOnly: true})
	require.NotNil(t, refused.Refused)
	text.Reset()
	refused.Plan.WriteText(&text)
	require.Contains(t, text.String(), "none runs again")

	// And in the next render, under the clusters' layout, nothing of it changes.
	next := apply(tree, res)
	again := render.Render(render.Request{Files: next, RenderedJobsOnly: true})
	require.Nil(t, again.Refused)
	text.Reset()
	again.Plan.WriteText(&text)
	require.NotContains(t, text.String(), "new run", text.String())
}

func sortedPaths(t render.Tree) []string {
	out := make([]string, 0, len(t))
	for f := range t {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// A node that moves from one cluster to another (its name now matches another cluster's nodes)
// takes its devices' instances along, under the same names: a run that finished in the cluster
// it left never starts again, one still rendered there (unrecorded) is held until that cluster's
// recorder records it, and the history stays where the run ran. A changed input then starts the
// next run in the node's new cluster. Played with one-shot renders and with a kept Renderer (a
// daemon's, whose clusters' last runs are reused when nothing of them changed).
func TestMovingANodeBetweenClustersRunsNoJobAgain(t *testing.T) {
	for _, kept := range []bool{false, true} {
		t.Run(map[bool]string{false: "one-shot", true: "daemon"}[kept], func(t *testing.T) {
			r := &render.Renderer{}
			renderTree := func(tree render.Tree) *render.Result {
				req := render.Request{Files: tree, RenderedJobsOnly: true}
				if kept {
					return r.Render(req)
				}
				return render.Render(req)
			}
			tree := clusterFleet()
			tree = apply(tree, renderTree(tree))
			// node-0001's Jobs, in site-a.
			jobs := jobsIn(tree, func(f string, data []byte) bool {
				return strings.HasPrefix(f, "rendered/site-a/") && strings.Contains(f, "/job-") && strings.Contains(string(data), "- node-0001\n")
			})
			require.GreaterOrEqual(t, len(jobs), 2, "node-0001 has Jobs in site-a")
			finished, running := jobs[0], jobs[1]
			tree["status/site-a/jobs/default/"+finished.name+".yaml"] = []byte(record("default", finished.name, finished.cfg, finished.inst, finished.device, "Succeeded"))
			tree = apply(tree, renderTree(tree))
			historyOf := func(j clusterJob) string {
				return "history/site-a/jobs/default/" + j.cfg + "/" + j.inst + "/" + j.name + ".yaml"
			}
			require.Contains(t, tree, historyOf(finished))

			// node-0001 moves to site-b.
			tree["gitbroker.yaml"] = []byte(strings.NewReplacer(`["node-000[0-1]"]`, `[node-0000]`, "[node-0002, node-0003]", "[node-0001, node-0002, node-0003]").Replace(twoClusters))
			res := renderTree(tree)
			require.Nil(t, res.Refused)
			require.Empty(t, res.Errors)
			text := planText(res.Plan)
			require.NotContains(t, text, "new run", "no Job starts again:\n%s", text)
			require.Contains(t, text, "Job "+running.name+" held: its node moved here from cluster site-a", text)
			tree = apply(tree, res)
			out := strings.Join(sortedPaths(tree), "\n")
			require.NotContains(t, out, "rendered/site-b/default/"+running.cfg+"/job-"+running.name, "the unrecorded run is not rendered in the node's new cluster")
			require.Contains(t, out, "rendered/site-a/default/"+running.cfg+"/job-"+running.name, "it stays in the cluster that applied it until recorded")
			require.Contains(t, out, historyOf(finished), "the finished run's history stays where it ran")
			require.NotContains(t, out, "/"+finished.name+".yaml\nrendered/", "and it is rendered nowhere")

			// site-a's recorder records the run the node left behind: it retires there, and
			// still does not start in site-b.
			tree["status/site-a/jobs/default/"+running.name+".yaml"] = []byte(record("default", running.name, running.cfg, running.inst, running.device, "Failed"))
			for range 2 {
				res = renderTree(tree)
				require.Nil(t, res.Refused)
				text = planText(res.Plan)
				require.NotContains(t, text, "new run", text)
				tree = apply(tree, res)
			}
			require.Contains(t, tree, historyOf(running))
			for f := range tree {
				require.False(t, strings.HasPrefix(f, "rendered/") && strings.HasSuffix(f, "job-"+running.name+".yaml"), "%s: the recorded run is rendered again", f)
			}

			// A change of the device's properties is a new run, in the node's new cluster.
			inv := string(tree["inventory/node-0001.yaml"])
			i := strings.Index(inv, "id: "+running.device+"\n")
			require.GreaterOrEqual(t, i, 0, inv)
			j := i + strings.Index(inv[i:], "properties:\n") + len("properties:\n")
			require.Greater(t, j, i, inv)
			tree["inventory/node-0001.yaml"] = []byte(inv[:j] + "        DEBUG_ECHO_FIRMWARE: v2\n" + inv[j:])
			res = renderTree(tree)
			require.Empty(t, res.Errors)
			text = planText(res.Plan)
			require.Contains(t, text, "in cluster site-b", text)
			require.Regexp(t, `\+ Job `+running.cfg+`-\S+ started: new run`, text)
		})
	}
}

// A cluster renamed, or taken out with its nodes going to another cluster (rendered with
// --allow-deletions, as such a change must be), keeps its Jobs: its finished ones move to the
// history of its nodes' cluster, its rendered ones are carried there frozen, and none runs again.
func TestRenamingOrRemovingAClusterRunsNoJobAgain(t *testing.T) {
	for name, settings := range map[string]string{
		"renamed": strings.Replace(twoClusters, "name: site-b", "name: site-c", 1),
		"removed": "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  clusters:\n  - name: site-a\n    labels: {ring: canary}\n    nodes: [\"node-*\"]\n",
	} {
		t.Run(name, func(t *testing.T) {
			tree := generateFleet(fleetSpec{nodes: 4, configurations: 2, devices: 40, seed: 7})
			tree["gitbroker.yaml"] = []byte(twoClusters)
			tree = apply(tree, renderOK(t, tree))
			jobs := jobsIn(tree, func(f string, data []byte) bool {
				return strings.HasPrefix(f, "rendered/site-b/") && strings.Contains(f, "/job-")
			})
			require.GreaterOrEqual(t, len(jobs), 2, "site-b has Jobs")
			finished := jobs[0]
			tree["status/site-b/jobs/default/"+finished.name+".yaml"] = []byte(record("default", finished.name, finished.cfg, finished.inst, finished.device, "Succeeded"))
			tree = apply(tree, renderOK(t, tree))
			require.Contains(t, tree, "history/site-b/jobs/default/"+finished.cfg+"/"+finished.inst+"/"+finished.name+".yaml")

			tree["gitbroker.yaml"] = []byte(settings)
			refused := render.Render(render.Request{Files: tree, RenderedJobsOnly: true})
			require.NotNil(t, refused.Refused, "a cluster's folder goes: refused without --allow-deletions")
			require.Contains(t, planText(refused.Plan), "none runs again")
			res := render.Render(render.Request{Files: tree, RenderedJobsOnly: true, AllowDeletions: true})
			require.Nil(t, res.Refused)
			require.Empty(t, res.Errors)
			text := planText(res.Plan)
			require.NotContains(t, text, "new run", "no Job starts again:\n%s", text)
			tree = apply(tree, res)
			out := strings.Join(sortedPaths(tree), "\n")
			require.NotContains(t, out, "rendered/site-b/")
			require.NotContains(t, out, "history/site-b/")
			require.Regexp(t, `history/site-[ac]/jobs/default/`+finished.cfg+`/`+finished.inst+`/`+finished.name+`\.yaml`, out, "the finished Job stays history")
			for _, j := range jobs[1:] {
				require.Regexp(t, `rendered/site-[ac]/default/`+j.cfg+`/(\S+/)?job-`+j.name+`\.yaml`, out, "a rendered Job stays frozen: %s", j.name)
			}
			again := render.Render(render.Request{Files: tree, RenderedJobsOnly: true})
			require.Nil(t, again.Refused)
			require.NotContains(t, planText(again.Plan), "new run")
			require.Empty(t, again.Diff, "and the next render changes nothing")
		})
	}
}

// clusterJob is a rendered Job, as the tests of cluster layouts record and retire it.
type clusterJob struct{ name, inst, device, cfg string }

// jobsIn are the rendered Jobs of tree whose path and content keep keeps, by path.
func jobsIn(tree render.Tree, keep func(f string, data []byte) bool) []clusterJob {
	field := func(data []byte, key string) string {
		return regexp.MustCompile(regexp.QuoteMeta(key) + `: (\S+)`).FindStringSubmatch(string(data))[1]
	}
	var jobs []clusterJob
	for _, f := range sortedPaths(tree) {
		if data := tree[f]; keep(f, data) {
			jobs = append(jobs, clusterJob{
				name:   strings.TrimSuffix(strings.TrimPrefix(f[strings.LastIndex(f, "/")+1:], "job-"), ".yaml"),
				inst:   field(data, "akri.sh/instance"),
				device: field(data, "gitbroker.dev/device-id"),
				cfg:    field(data, "akri.sh/configuration"),
			})
		}
	}
	return jobs
}
