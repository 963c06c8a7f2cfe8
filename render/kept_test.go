package render_test

import (
	"strings"
	"testing"

	"github.com/gitbroker/gitbroker/render"
	"github.com/stretchr/testify/require"
)

// TestKeptRendererMatchesFresh follows a daemon: one Renderer kept through a run of changes,
// each of which a fresh Renderer renders too. A kept Renderer reuses what it made for
// unchanged inputs (parses, objects, a Configuration's instances); whatever it reuses, every
// result must be the fresh one's: files, diff, plan, errors and held nodes.
func TestKeptRendererMatchesFresh(t *testing.T) {
	tree := generateFleet(fleetSpec{nodes: 60, configurations: 6, devices: 400, seed: 11, shards: 2})
	kept := render.New()
	var last *render.Result
	step := func(name string, allow bool, edit func(render.Tree) render.Tree) {
		t.Run(name, func(t *testing.T) {
			tree = edit(tree)
			req := render.Request{Files: tree, SourceCommit: "c-" + name, AllowDeletions: allow}
			fresh := render.Render(req)
			got := kept.Render(req)
			require.Equal(t, fresh.Diff, got.Diff)
			require.True(t, render.Equal(fresh.Files, got.Files))
			require.Equal(t, planText(fresh.Plan), planText(got.Plan))
			require.Equal(t, fresh.Errors.Error(), got.Errors.Error())
			require.Equal(t, fresh.Held, got.Held)
			require.Equal(t, fresh.Refused, got.Refused)
			require.True(t, got.Changed() || name == "unchanged" || name == "an invalid inventory", "the step changes the output")
			tree, last = apply(tree, got), got
		})
	}
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
	require.NotEmpty(t, last.Errors)
	step("the inventory fixed", false, func(t render.Tree) render.Tree {
		inv := inventories(t)[5]
		t[inv] = []byte(strings.Replace(string(t[inv]), "        not a name: x\n", "        LATE: x\n", 1))
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
	require.NotEmpty(t, last.Held, "%v", last.Refused)
	step("the same, allowed", true, func(t render.Tree) render.Tree { return t })
	step("a Configuration changed", false, func(t render.Tree) render.Tree {
		t["configurations/cfg-00.yaml"] = []byte(strings.Replace(string(t["configurations/cfg-00.yaml"]), ":latest", ":v2", 1))
		return t
	})
	step("a Job recorded", false, func(tr render.Tree) render.Tree {
		job := filesUnder(tr, "rendered/default/cfg-01/", "/job-")[0]
		return recordJob(t, tr, job, "Succeeded")
	})
	require.Equal(t, 1, last.Plan.Summary.JobsRetired)
	step("a Configuration's shards changed", true, func(t render.Tree) render.Tree {
		t["configurations/cfg-01.yaml"] = []byte(strings.Replace(string(t["configurations/cfg-01.yaml"]), "shards: 2", "shards: 3", 1))
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
