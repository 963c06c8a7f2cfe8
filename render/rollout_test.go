package render_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/render"
)

// stagedConfig is podConfig with a staged rollout of at most maxChanged brokers per wave.
func stagedConfig(maxChanged, image string) string {
	c := strings.Replace(podConfig, "  name: cam\n", "  name: cam\n  annotations:\n    gitbroker.dev/rollout-max-changed: \""+maxChanged+"\"\n", 1)
	return strings.Replace(c, "onvif-video-broker:latest", "onvif-video-broker:"+image, 1)
}

func rolloutRecord(name, hash string, available bool) string {
	return fmt.Sprintf("apiVersion: gitbroker.dev/v1alpha1\nkind: RolloutRecord\nmetadata:\n  name: %s\n  namespace: default\nspec:\n  inputsHash: %s\n  available: %v\n", name, hash, available)
}

// brokersAt says which broker Deployments of cam run image, and records every broker as the
// recorder would once its rollout is done: Available with the inputs it was rendered with.
func brokersAt(t *testing.T, tree render.Tree, image string, record bool) []string {
	t.Helper()
	var at []string
	for _, f := range filesUnder(tree, "rendered/default/cam/", "/deployment-") {
		d := string(tree[f])
		name := strings.TrimSuffix(strings.TrimPrefix(f[strings.LastIndex(f, "/"):], "/deployment-"), ".yaml")
		if strings.Contains(d, "onvif-video-broker:"+image+"\n") {
			at = append(at, name)
		}
		require.Contains(t, d, "gitbroker.dev/rollout: staged")
		if record {
			hash := d[strings.Index(d, "gitbroker.dev/inputs-hash: ")+len("gitbroker.dev/inputs-hash: "):]
			tree["status/rollouts/default/"+name+".yaml"] = []byte(rolloutRecord(name, hash[:strings.IndexByte(hash, '\n')], true))
		}
	}
	return at
}

// A change of a Configuration with a staged rollout of 3 over 10 brokers rolls out in 4 waves
// of 3, 3, 3 and 1, each once the recorder has recorded the one before Available; no wave
// starts while a changed broker is not, and one that was not Available before goes first. A
// kept Renderer, whose re-renders are scoped, waves the same.
func TestStagedRolloutWaves(t *testing.T) {
	for _, kept := range []bool{false, true} {
		r := render.New()
		run := func(tree render.Tree) *render.Result {
			t.Helper()
			res := render.Render(render.Request{Files: tree})
			if kept {
				res = r.Render(render.Request{Files: tree})
			}
			require.Empty(t, res.Errors)
			require.Nil(t, res.Refused)
			return res
		}
		var devices []string
		for i := range 10 {
			devices = append(devices, fmt.Sprintf("d%d", i))
		}
		tree := repo(map[string]string{
			"configurations/cam.yaml": stagedConfig("3", "v1"),
			"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", devices...)),
		})
		tree = apply(tree, run(tree))
		require.Len(t, brokersAt(t, tree, "v1", true), 10, "created at once: nothing to roll from")
		// One broker is not Available before the change: it goes in the first wave.
		sick := brokersAt(t, tree, "v1", false)[7]
		rec := string(tree["status/rollouts/default/"+sick+".yaml"])
		tree["status/rollouts/default/"+sick+".yaml"] = []byte(strings.Replace(rec, "available: true", "available: false\n  message: ImagePullBackOff", 1))
		run(tree) // a kept Renderer's last pass, to scope the next from

		tree["configurations/cam.yaml"] = []byte(stagedConfig("3", "v2"))
		var waves []int
		for wave := 1; wave <= 6; wave++ {
			res := run(tree)
			text := planText(res.Plan)
			tree = apply(tree, res)
			n := len(brokersAt(t, tree, "v2", false))
			if wave == 1 {
				require.Contains(t, brokersAt(t, tree, "v2", false), sick, "a broker that was not Available goes first")
				require.Contains(t, text, "staged rollout: 3 of 10 changed brokers roll out in this wave, 7 wait for the next ones")
				require.Contains(t, text, "held: staged rollout (at most 3 of 10 brokers per wave): in a later wave")
			}
			// Not recorded yet: the next render changes nothing more and says what it waits for.
			if n < 10 {
				again := run(tree)
				require.Equal(t, tree, apply(tree, again), "wave %d: no wave before the last is recorded Available", wave)
				require.Contains(t, planText(again.Plan), "the next wave starts once Deployments ")
				require.Contains(t, planText(again.Plan), "are recorded Available with the new spec")
			}
			if len(waves) == 0 || n != waves[len(waves)-1] {
				waves = append(waves, n)
			}
			brokersAt(t, tree, "v2", true)
			if n == 10 {
				break
			}
		}
		require.Equal(t, []int{3, 6, 9, 10}, waves, "kept=%v", kept)

		// Turning staging off changes no broker's Pods: the label goes from the Deployments only.
		tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "onvif-video-broker:latest", "onvif-video-broker:v2", 1))
		res := run(tree)
		require.Contains(t, planText(res.Plan), "10 Deployments rolled out")
		for _, f := range res.Diff {
			require.NotContains(t, string(res.Files[f]), "gitbroker.dev/rollout")
		}
	}
}

// A RolloutRecord the renderer cannot read is an error naming its file, line and field, and its
// Deployment counts as not Available: no wave starts on it.
func TestInvalidRolloutRecordStartsNoWave(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/cam.yaml": stagedConfig("1", "v1"),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "d0", "d1")),
	})
	tree = apply(tree, renderOK(t, tree))
	names := brokersAt(t, tree, "v1", true)
	require.Len(t, names, 2)
	tree["configurations/cam.yaml"] = []byte(stagedConfig("1", "v2"))
	tree = apply(tree, renderOK(t, tree))
	first := brokersAt(t, tree, "v2", false)
	require.Len(t, first, 1, "a wave of one")
	brokersAt(t, tree, "v2", true)
	f := "status/rollouts/default/" + first[0] + ".yaml"
	tree[f] = []byte(strings.Replace(string(tree[f]), "available: true", "available: yes please", 1))
	res := render.Render(render.Request{Files: tree})
	require.Len(t, res.Errors, 1)
	require.Contains(t, res.Errors[0].Error(), f+":8: spec.available")
	require.Empty(t, res.Diff, "the next wave waits for a record it can read")
	require.Contains(t, planText(res.Plan), "Deployment "+first[0]+" (its record "+f+" is invalid) is recorded Available")
}

// Finding 6 of the second trust review: one broker that never becomes Available (a node's
// made-up device, a device that does not work) stalled a staged rollout for good. Once its
// Deployment's controller gives up (ProgressDeadlineExceeded, which the recorder records), the
// rollout passes it over, and the plan names it.
func TestStagedRolloutPassesOverAStuckBroker(t *testing.T) {
	run := func(tree render.Tree) *render.Result {
		t.Helper()
		res := render.Render(render.Request{Files: tree})
		require.Empty(t, res.Errors)
		require.Nil(t, res.Refused)
		return res
	}
	var devices []string
	for i := range 4 {
		devices = append(devices, fmt.Sprintf("d%d", i))
	}
	tree := repo(map[string]string{
		"configurations/cam.yaml": stagedConfig("2", "v1"),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", devices...)),
	})
	tree = apply(tree, run(tree))
	brokersAt(t, tree, "v1", true)
	tree["configurations/cam.yaml"] = []byte(stagedConfig("2", "v2"))
	tree = apply(tree, run(tree))
	first := brokersAt(t, tree, "v2", false)
	require.Len(t, first, 2)
	// The first wave: one broker Available, the other stuck for good.
	brokersAt(t, tree, "v2", true)
	stuck := "status/rollouts/default/" + first[0] + ".yaml"
	rec := strings.Replace(string(tree[stuck]), "available: true", "available: false\n  message: ReplicaSet has timed out progressing.", 1)
	tree[stuck] = []byte(rec)
	res := run(tree)
	require.Len(t, brokersAt(t, apply(tree, res), "v2", false), 2, "a broker not Available holds the next wave")

	tree[stuck] = []byte(rec + "  progressDeadlineExceeded: true\n")
	res = run(tree)
	require.Len(t, brokersAt(t, apply(tree, res), "v2", false), 4, "past its progress deadline it is passed over")
	require.Contains(t, planText(res.Plan), "staged rollout: passed over Deployment "+first[0]+" (ReplicaSet has timed out progressing.) not Available within its progress deadline")
}

// A Configuration's rollout.progressDeadline is its broker Deployments' progressDeadlineSeconds,
// so a stuck broker is passed over after that long rather than Kubernetes' 10 minutes. Setting
// or changing it rewrites the Deployments without changing what they run (the inputs hash), so it
// is no change to roll out in waves.
func TestRolloutProgressDeadline(t *testing.T) {
	hash := func(d []byte) string {
		s := string(d)
		s = s[strings.Index(s, "gitbroker.dev/inputs-hash: "):]
		return s[:strings.IndexByte(s, '\n')]
	}
	tree := repo(map[string]string{
		"configurations/cam.yaml": stagedConfig("1", "v1"),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "d0", "d1", "d2")),
	})
	res := render.Render(render.Request{Files: tree})
	require.Empty(t, res.Errors)
	tree = apply(tree, res)
	hashes := map[string]string{}
	for _, f := range filesUnder(tree, "rendered/default/cam/", "/deployment-") {
		require.NotContains(t, string(tree[f]), "progressDeadlineSeconds", "unset, Kubernetes' default applies")
		hashes[f] = hash(tree[f])
	}
	require.Len(t, hashes, 3)

	tree["configurations/cam.yaml"] = []byte(strings.Replace(stagedConfig("1", "v1"), "    gitbroker.dev/rollout-max-changed:",
		"    gitbroker.dev/rollout-progress-deadline: 2m\n    gitbroker.dev/rollout-max-changed:", 1))
	res = render.Render(render.Request{Files: tree})
	require.Empty(t, res.Errors)
	tree = apply(tree, res)
	for f, h := range hashes {
		require.Contains(t, string(tree[f]), "progressDeadlineSeconds: 120\n", "%s: every Deployment takes the deadline in one render", f)
		require.Equal(t, h, hash(tree[f]), "%s: what the broker runs did not change", f)
	}
}
