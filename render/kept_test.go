package render_test

import (
	"crypto/sha1"
	"fmt"
	"maps"
	"math/rand"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

// keptSteps renders with one kept Renderer, step by step, comparing each with a fresh one.
type keptSteps struct {
	t    *testing.T
	kept *render.Renderer
	tree render.Tree
	last *render.Result
}

func (k *keptSteps) step(name string, allow bool, edit func(render.Tree) render.Tree) {
	k.t.Run(name, func(t *testing.T) {
		k.tree = edit(k.tree)
		req := render.Request{Files: k.tree, SourceCommit: "c-" + name, AllowDeletions: allow}
		fresh := render.Render(req)
		got := k.kept.Render(req)
		require.Equal(t, fresh.Diff, got.Diff)
		require.True(t, render.Equal(fresh.Files, got.Files))
		require.Equal(t, planText(fresh.Plan), planText(got.Plan))
		require.Equal(t, fresh.Errors.Error(), got.Errors.Error())
		require.Equal(t, fresh.Held, got.Held)
		require.Equal(t, fresh.Refused, got.Refused)
		require.True(t, got.Changed() || name == "unchanged" || name == "an invalid inventory", "the step changes the output")
		k.tree, k.last = apply(k.tree, got), got
		t.Logf("scoped passes so far: %d", render.ScopedPasses(k.kept))
	})
}

// TestKeptRendererMatchesFresh follows a daemon: one Renderer kept through a run of changes,
// each of which a fresh Renderer renders too. A kept Renderer reuses what it made for
// unchanged inputs (parses, objects, a Configuration's instances); whatever it reuses, every
// result must be the fresh one's: files, diff, plan, errors and held nodes.
func TestKeptRendererMatchesFresh(t *testing.T) {
	k := &keptSteps{t: t, kept: render.New(), tree: generateFleet(fleetSpec{nodes: 60, configurations: 6, devices: 400, seed: 11, shards: 2})}
	step := k.step
	inventories := func(tree render.Tree) []string { return filesUnder(tree, "inventory/", "") }
	step("first", false, func(t render.Tree) render.Tree { return t })
	step("one device", false, func(t render.Tree) render.Tree {
		inv, changed := oneDeviceChange(t)
		t[inv] = []byte(changed)
		return t
	})
	step("unchanged", false, func(t render.Tree) render.Tree { return t })
	step("a node's device moves to another Configuration", false, func(t render.Tree) render.Tree {
		inv := inventories(t)[3]
		t[inv] = []byte(strings.Replace(string(t[inv]), "- name: cfg-00\n", "- name: cfg-02\n", 1))
		return t
	})
	step("an invalid inventory", false, func(t render.Tree) render.Tree {
		inv := inventories(t)[5]
		t[inv] = []byte(strings.Replace(string(t[inv]), "    devices:\n", "    devices:\n    - id: late\n      properties:\n        not a name: x\n", 1))
		return t
	})
	require.NotEmpty(t, k.last.Errors)
	step("the inventory fixed", false, func(t render.Tree) render.Tree {
		inv := inventories(t)[5]
		cfg := regexp.MustCompile(`(?m)^  - name: (cfg-\d+)\n    devices:\n`).FindStringSubmatch(string(t[inv]))[1]
		t[inv] = []byte(strings.Replace(string(t[inv]), "        not a name: x\n", "        "+fixtures.FleetDeviceProperty(cfg, "LATE")+": x\n", 1))
		return t
	})
	step("a node gone", false, func(t render.Tree) render.Tree {
		delete(t, inventories(t)[7])
		return t
	})
	step("most nodes gone, held by the budget", false, func(t render.Tree) render.Tree {
		for i, inv := range inventories(t) {
			if i%10 != 0 {
				delete(t, inv)
			}
		}
		return t
	})
	require.NotEmpty(t, k.last.Held, "%v", k.last.Refused)
	step("the same, allowed", true, func(t render.Tree) render.Tree { return t })
	step("a Configuration changed", false, func(t render.Tree) render.Tree {
		t["configurations/cfg-00.yaml"] = []byte(strings.Replace(string(t["configurations/cfg-00.yaml"]), ":latest", ":v2", 1))
		return t
	})
	step("a Job recorded", false, func(tr render.Tree) render.Tree {
		job := filesUnder(tr, "rendered/default/cfg-01/", "/job-")[0]
		return recordJob(t, tr, job, "Succeeded")
	})
	require.Equal(t, 1, k.last.Plan.Summary.JobsRetired)
	step("a Configuration's shards changed", true, func(t render.Tree) render.Tree {
		t["configurations/cfg-01.yaml"] = []byte(strings.Replace(string(t["configurations/cfg-01.yaml"]), "shards: 2", "shards: 3", 1))
		return t
	})
	step("a Configuration moved to another namespace", true, func(t render.Tree) render.Tree {
		t["configurations/cfg-03.yaml"] = []byte(strings.Replace(string(t["configurations/cfg-03.yaml"]), "\n  name: cfg-03\n", "\n  name: cfg-03\n  namespace: moved\n", 1))
		return t
	})
	step("a Configuration deleted", true, func(t render.Tree) render.Tree {
		delete(t, "configurations/cfg-04.yaml")
		return t
	})
	step("a new default namespace", true, func(t render.Tree) render.Tree {
		t["gitbroker.yaml"] = []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: edge\n")
		return t
	})
}

// TestScopedPassesMatchFresh drives a kept Renderer through random changes of devices, records
// and Configurations, on a fleet with Pods that wait for Jobs (after), Jobs that may run side by
// side and short histories: most of its passes are scoped to the Configurations a change
// reaches, and each must equal a fresh Renderer's whole render of the same tree.
func TestScopedPassesMatchFresh(t *testing.T) {
	t.Run("unverified", func(t *testing.T) { scopedPassesMatchFresh(t, false) })
	// Verified, records count only for Jobs the renderer rendered: a kept Renderer counts them
	// from its last count and the diff.
	t.Run("rendered Jobs only", func(t *testing.T) { scopedPassesMatchFresh(t, true) })
}

func scopedPassesMatchFresh(t *testing.T, renderedJobsOnly bool) {
	c := newFleetChanges(t)
	kept := render.New()
	var last *render.Result
	const steps = 60
	// played are the recorder's kinds the steps wrote a record of.
	played := map[string]bool{}
	for i := 0; i < steps; i++ {
		what := c.change(i)
		tree := c.tree
		for f := range tree {
			if k, ok := api.StatusKindOf(f); ok {
				played[k.Kind] = true
			}
		}
		req := render.Request{Files: tree, SourceCommit: fmt.Sprintf("c-%d", i), AllowDeletions: true, RenderedJobsOnly: renderedJobsOnly,
			Writers: writerTips(tree)}
		fresh := render.Render(req)
		// The kept Renderer is asked as a daemon asks it too: the inputs alone, with its last
		// output handed back as Previous (known by the map, no pass over it), or a copy of it
		// (known by nothing: a whole pass).
		keptReq := req
		if last != nil && i%4 != 0 {
			keptReq.Files, keptReq.Previous = render.Tree{}, last.Files
			for p, b := range tree {
				if !render.IsOwned(p) {
					keptReq.Files[p] = b
				}
			}
			if i%4 == 3 {
				keptReq.Previous = maps.Clone(last.Files)
			}
		}
		got := kept.Render(keptReq)
		last = got
		requireSameRender(t, fresh, got, fmt.Sprintf("step %d: %s", i, what))
		t.Logf("step %d: %s", i, what)
		if count, recount := render.RenderedJobs(kept); count != nil {
			require.Equal(t, recount, count, "step %d: %s", i, what)
		}
		c.tree = apply(tree, got)
	}
	t.Logf("%d of %d passes scoped, %d more ran again whole", render.ScopedPasses(kept), steps, render.OutOfScope(kept))
	// A kind of record the steps never write is a kind whose scoping no one checks: a new
	// kind in api.StatusKinds needs its step in fleetChanges.change.
	for _, k := range api.StatusKinds {
		require.True(t, played[k.Kind], "the steps wrote no %s (%s): add a step that writes one", k.Kind, k.Layout)
	}
	// A node lost or back re-renders every Configuration (a whole pass), as its first and any
	// invalid step do: a third of the passes at least are scoped.
	require.Greater(t, render.ScopedPasses(kept), steps/3, "passes are scoped")
}

// writerTips are the node refs' tips as a daemon would pass them: one per inventory, which
// moves when the inventory changes (so the accepted tips' shards change with it).
func writerTips(tree render.Tree) map[string]string {
	out := map[string]string{}
	for p, b := range tree {
		if node, ok := strings.CutPrefix(p, "inventory/"); ok {
			out["gitbroker/inventory/"+strings.TrimSuffix(node, ".yaml")] = fmt.Sprintf("%x", sha1.Sum(b))
		}
	}
	return out
}

// requireSameRender requires a kept Renderer's result to be a fresh one's.
func requireSameRender(t *testing.T, fresh, got *render.Result, what string) {
	t.Helper()
	require.Equal(t, fresh.Diff, got.Diff, what)
	require.True(t, render.Equal(fresh.Files, got.Files), what)
	require.Equal(t, planText(fresh.Plan), planText(got.Plan), what)
	require.Equal(t, fresh.Plan.Summary, got.Plan.Summary, what)
	require.Equal(t, fresh.Errors.Error(), got.Errors.Error(), what)
	require.Equal(t, fresh.Untrusted, got.Untrusted, what)
}

// fleetChanges makes random changes to a fleet with Pods that wait for Jobs (after), Jobs that
// may run side by side and short histories.
type fleetChanges struct {
	t      *testing.T
	tree   render.Tree
	rng    *rand.Rand
	device *regexp.Regexp
}

func newFleetChanges(t *testing.T) *fleetChanges {
	tree := generateFleet(fleetSpec{nodes: 40, configurations: 6, devices: 250, seed: 3, shards: 2})
	annotate := func(cfg, annotations string) {
		f := "configurations/" + cfg + ".yaml"
		tree[f] = []byte(strings.Replace(string(tree[f]), "  name: "+cfg+"\n", "  name: "+cfg+"\n  annotations:\n"+annotations, 1))
	}
	annotate("cfg-02", "    gitbroker.dev/after: cfg-01\n")
	annotate("cfg-03", "    gitbroker.dev/concurrency: Allow\n")
	annotate("cfg-05", "    gitbroker.dev/history-limit: \"1\"\n")
	annotate("cfg-04", "    gitbroker.dev/rollout-max-changed: \"2\"\n")
	return &fleetChanges{t: t, tree: tree, rng: rand.New(rand.NewSource(7)), device: regexp.MustCompile(`(?m)^    - id: .*\n(?:      .*\n)*`)}
}

func (c *fleetChanges) pick(list []string) string { return list[c.rng.Intn(len(list))] }

func (c *fleetChanges) addDevice(inv, cfg, id string) {
	dev := "    - id: " + id + "\n      properties:\n        " + fixtures.FleetDeviceProperty(cfg, "DEVICE") + ": " + id + "\n"
	block := "  - name: " + cfg + "\n    devices:\n"
	if s := string(c.tree[inv]); strings.Contains(s, block) {
		c.tree[inv] = []byte(strings.Replace(s, block, block+dev, 1))
	} else {
		c.tree[inv] = []byte(s + block + dev)
	}
}

// change makes step i's random change to the tree and says what it was.
func (c *fleetChanges) change(i int) string {
	t, rng, device, pick, addDevice := c.t, c.rng, c.device, c.pick, c.addDevice
	tree := c.tree
	var what string
	invs := filesUnder(tree, "inventory/", "")
	switch op := rng.Intn(18); {
	case op < 2:
		inv, cfg := pick(invs), fmt.Sprintf("cfg-%02d", rng.Intn(6))
		what = "a device added to " + cfg + " in " + inv
		addDevice(inv, cfg, fmt.Sprintf("r-%d", i))
	case op < 4:
		inv := pick(invs)
		what = "a device gone from " + inv
		s := string(tree[inv])
		if m := device.FindAllStringIndex(s, -1); len(m) > 0 {
			j := m[rng.Intn(len(m))]
			tree[inv] = []byte(s[:j[0]] + s[j[1]:])
		}
	case op == 4:
		inv := pick(invs)
		what = "a device property changed in " + inv
		tree[inv] = []byte(strings.Replace(string(tree[inv]), "        DEVICE: ", fmt.Sprintf("        DEVICE: v%d-", i), 1))
	case op == 5:
		js := filesUnder(tree, "rendered/", "/job-")
		if paired := slices.DeleteFunc(slices.Clone(js), func(f string) bool { return !strings.Contains(string(tree[f]), "pair-") }); len(paired) > 0 && rng.Intn(2) == 0 {
			js = paired
		}
		if len(js) > 0 {
			job := pick(js)
			what = "a Job recorded: " + job
			tree = recordJob(t, tree, job, []string{"Succeeded", "Failed"}[rng.Intn(2)])
		}
	case op == 6:
		if recs := filesUnder(tree, "status/jobs/", ""); len(recs) > 0 {
			rec := pick(recs)
			what = "a record dropped once in history: " + rec
			delete(tree, rec)
		}
	case op == 7:
		cfg := fmt.Sprintf("configurations/cfg-%02d.yaml", rng.Intn(6))
		what = "a Configuration changed: " + cfg
		tree[cfg] = []byte(strings.Replace(string(tree[cfg]), "image: ", fmt.Sprintf("image: v%d-", i), 1))
	case op == 8:
		// A device of the Job broker and of the Pods that wait for its Jobs (after).
		inv := pick(invs)
		what = "a device for cfg-01 and cfg-02 in " + inv
		for _, cfg := range []string{"cfg-01", "cfg-02"} {
			addDevice(inv, cfg, fmt.Sprintf("pair-%d", i))
		}
	case op == 9:
		// A record of a Job that was never rendered: it counts only when unverified.
		what = "a record of a Job never rendered"
		f := fmt.Sprintf("status/jobs/default/cfg-01-forged-%d.yaml", i)
		tree[f] = []byte(record("default", fmt.Sprintf("cfg-01-forged-%d", i), "cfg-01", "cfg-01-forged", "dev-000001", "Succeeded"))
	case op == 10:
		// An inventory that does not validate: the node's part is kept as it was.
		inv := pick(invs)
		if s := string(tree[inv]); !strings.Contains(s, "not a name") && strings.Contains(s, "    devices:\n") {
			what = "an invalid inventory: " + inv
			tree[inv] = []byte(strings.Replace(s, "    devices:\n", fmt.Sprintf("    devices:\n    - id: bad-%d\n      properties:\n        not a name: x\n", i), 1))
		}
	case op == 11:
		for _, inv := range invs {
			if s := string(tree[inv]); strings.Contains(s, "not a name") {
				what = "an invalid inventory fixed: " + inv
				tree[inv] = []byte(strings.Replace(s, "        not a name: x\n", "        FIXED: x\n", 1))
				break
			}
		}
	case op == 13:
		// The recorder records a node lost: its shared devices' brokers move.
		node := strings.TrimSuffix(strings.TrimPrefix(pick(invs), "inventory/"), ".yaml")
		what = "a node lost: " + node
		tree["status/nodes/"+node+".yaml"] = []byte(nodeLoss(node, "NotReady"))
	case op == 14:
		if lost := filesUnder(tree, "status/nodes/", ""); len(lost) > 0 {
			f := pick(lost)
			what = "a node back: " + f
			delete(tree, f)
		}
	case op == 12 || op >= 15:
		// The recorder records a staged broker (cfg-04) Available, or not, with the inputs it
		// was rendered with: the next wave may start.
		if ds := filesUnder(tree, "rendered/", "/deployment-"); len(ds) > 0 {
			ds = slices.DeleteFunc(ds, func(f string) bool { return !strings.Contains(f, "/cfg-04/") })
			for n := 1 + rng.Intn(5); n > 0 && len(ds) > 0; n-- {
				f := pick(ds)
				name := strings.TrimSuffix(f[strings.LastIndex(f, "/deployment-")+len("/deployment-"):], ".yaml")
				hash := regexp.MustCompile(`gitbroker.dev/inputs-hash: "?([0-9a-f]+)`).FindStringSubmatch(string(tree[f]))
				if hash != nil {
					available := rng.Intn(3) > 0
					what += fmt.Sprintf("a rollout record of %s, available %t; ", name, available)
					tree["status/rollouts/default/"+name+".yaml"] = []byte(rolloutRecord(name, hash[1], available))
				}
			}
		}
	default:
		what = "nothing"
	}
	c.tree = tree
	return what
}
