package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net/http"
	"net/http/httptest"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/notify"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// The adversary of docs/DESIGN.md ("Trust fails closed"): seeded random sequences of what one
// node's credential can push (edge-a's key and the shared git credential), interleaved with
// restarts of the agents and the renderer, against the real git server, checking after every
// step that the other node's (edge-b's) rendered objects, names and finished Jobs are
// untouched and that nothing unverified is rendered; once the attacker stops, edge-b's next
// change lands within a few cycles. GITBROKER_ADVERSARY_SEQUENCES and _STEPS play more
// (make adversary); GITBROKER_ADVERSARY_SEED replays one sequence, as a failure prints it.
func TestAdversary(t *testing.T) {
	sequences, steps := envInt("GITBROKER_ADVERSARY_SEQUENCES", 4), envInt("GITBROKER_ADVERSARY_STEPS", 12)
	seeds := make([]uint64, sequences)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	if s := os.Getenv("GITBROKER_ADVERSARY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { playAdversary(t, seed, steps) })
	}
}

// adversary is one sequence: the loop, the attacker's memory of old commits, and the victim's
// state the invariants compare with.
type adversary struct {
	*signedLoop
	rng     *rand.Rand
	played  []string
	oldA    []string // edge-a's commits, for rollbacks
	oldB    []string // edge-b's commits, for replays
	victim  map[string]string
	history map[string]string
	// collide is a device id whose Akri digest is that of the victim's shared camera.
	camera, collide string
	// zeros is a blob of 62 MB of zeros on the server (a few hundred KB there), made once.
	zeros string
	bombs int
	// limits are deploy/'s memory limits of the renderer and the agent; peaks the most each
	// real binary used.
	limits, peaks   map[string]int64
	renderedKeyFile string
	// victimJob is in the path of every run of the victim's finished firmware Job.
	victimJob string
	// shards are the heads seen on each node's accepted-tips shard branch, oldest first: the
	// renderer's commits there have no parent, so an older one is put back from here.
	shards map[string][]string
	// mode is the sequence's device allocation: device-plugin or dra.
	mode string
	// layout is the sequence's clusters: "" (one cluster), "split" (edge-a in east, edge-b in
	// west) or "joined" (both in west); a sequence with clusters switches between the two.
	layout string
	// victimName is the victim's finished firmware Job.
	victimName string
}

func playAdversary(t *testing.T, seed uint64, steps int) {
	s := newSignedLoop(t)
	// As hosts that serve a commit by its hash do: a restarted renderer asks for the one it
	// pushed last when no branch reaches it.
	gitsynctest.Git(t, s.srv.Bare(), "config", "uploadpack.allowAnySHA1InWant", "true")
	a := &adversary{signedLoop: s, rng: rand.New(rand.NewPCG(seed, 0x5eed)), shards: map[string][]string{}}
	a.camera, a.collide = collidingIDs()
	a.limits = map[string]int64{
		"renderer": deployMemoryLimit(t, "../../deploy/renderer/deployment.yaml"),
		"agent":    deployMemoryLimit(t, "../../deploy/agent/daemonset.yaml"),
	}
	a.peaks = map[string]int64{}
	defer func() {
		if t.Failed() {
			t.Logf("replay with GITBROKER_ADVERSARY_SEED=%d GITBROKER_ADVERSARY_STEPS=%d; the steps played:\n  %s", seed, steps, strings.Join(a.played, "\n  "))
		}
	}()
	// Every other sequence runs in DRA mode (ResourceSlices, DeviceClasses and claims from git).
	a.mode = "device-plugin"
	if seed%2 == 0 {
		a.mode = "dra"
		s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{api.SettingsPath: a.settings()}, nil, "DRA mode")
	}
	// Every other pair of sequences turns spec.clusters on once the victim's Job has finished,
	// and switches between two layouts as a step.
	clusters := seed/2%2 == 1
	// The victim: a shared camera, a local sensor, and a firmware Job that ran and finished.
	s.nodes["edge-b"].set("default/akri-debug-echo", "shared:"+a.camera, "sensor-b")
	s.nodes["edge-b"].set("plant/plc-firmware", "shared:plc-b")
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	require.Len(t, s.apply(), 1)
	job := strings.TrimSuffix(s.jobs(render.RenderedDir, "plc-firmware")[0], ".yaml")
	s.finish("plant", job, true)
	a.victimJob = "/job-" + job[:len("plc-firmware-")+6] + "-" // its instance's: any run of it
	a.victimName = job
	s.renderTrust()
	require.Len(t, s.jobs("history/", "plc-firmware"), 1, "the finished Job is in history")
	if a.mode == "dra" {
		require.True(t, s.has("/resourceslice-"), "DRA mode renders ResourceSlices")
	}
	a.snapshot()
	if clusters {
		t.Log(a.switchLayout())
	}
	a.remember()

	actions := []struct {
		name string
		do   func() string
	}{
		{"roll edge-a's ref back", a.rollbackOwn},
		{"replay an old commit of edge-b", a.replayVictim},
		{"delete a ref", a.deleteRef},
		{"push a same-tree unsigned commit", a.sameTree},
		{"push an orphan commit signed by edge-a on edge-b's ref", a.orphan},
		{"push an unsigned commit", a.unsigned},
		{"write edge-b's inventory with edge-a's key", a.foreign},
		{"push a large blob on edge-a's ref", a.bigBlob},
		{"report a device colliding with edge-b's camera", a.colliding},
		{"report devices edge-a does not have", a.fake},
		{"move gitbroker/rendered back", a.rollbackRendered},
		{"restart a writer", a.restart},
		{"move gitbroker/rendered while the renderer restarts", a.moveAndRestart},
		{"move a node's ref back, make its accepted tip (or the render metadata) agree, and restart its agent", a.staleMetadataAndRestart},
		{"push a blob of zeros, a dense inventory or dense accepted tips just under the limits", a.bomb},
		{"run a writer's real binary once, measuring its memory", a.realBinary},
		{"delete a writer's branch and put a ref named under it (or over its folder) in its way", a.blockRef},
		{"delete every gitbroker/ branch (or all of them, and push a ref named gitbroker), roll edge-b back, and run the one-shot render", a.wipeAndRenderOnce},
		{"flood the renderer's webhook with forged and trickled notifications beside a signed nudge", a.floodWebhook},
		{"write a node loss of edge-b and a record of its finished Job on a recorder's ref (or an undeclared cluster's) with edge-a's key", a.forgeStatus},
	}
	if clusters {
		actions = append(actions, struct {
			name string
			do   func() string
		}{"the person moves edge-a between clusters (east and west, or both in west), rendered with --allow-deletions", a.switchLayout})
	}
	for i := range steps {
		act := actions[a.rng.IntN(len(actions))]
		a.played = append(a.played, fmt.Sprintf("%d. %s", i+1, act.name))
		a.played[len(a.played)-1] += ": " + act.do()
		out, err := s.renderer.Once(t.Context())
		if err != nil {
			require.ErrorIs(t, err, gitsync.ErrNoChanges, "step %d (%s): the render fails: %v", i+1, act.name, err)
		}
		a.check(fmt.Sprintf("step %d (%s)", i+1, act.name), out)
		a.remember()
	}

	// The attacker stops: edge-b's next change lands within a few cycles, whatever was done.
	// (edge-a's key is the attacker's: what it signed may be what the renderer accepted last,
	// which edge-a's running agent never saw; it takes that tip again when it restarts.)
	s.nodes["edge-b"].set("default/akri-debug-echo", "shared:"+a.camera, "sensor-b", "sensor-b2")
	landed, last := false, ""
	for cycle := 0; cycle < 3 && !landed; cycle++ {
		_, err := s.agents["edge-b"].Sync(t.Context())
		require.NoError(t, err)
		_, err = s.agents["edge-a"].Sync(t.Context())
		require.NoError(t, err)
		out, err := s.renderer.Once(t.Context())
		if err != nil {
			require.ErrorIs(t, err, gitsync.ErrNoChanges)
		}
		last = s.plan(out)
		landed = strings.Contains(s.brokersText(), "sensor-b2")
	}
	require.True(t, landed, "edge-b's change did not land within 3 cycles after the attacker stopped; the last plan:\n%s", last)
	t.Logf("played (%s mode):\n  %s", a.mode, strings.Join(a.played, "\n  "))
	for who, peak := range a.peaks {
		t.Logf("%s's real binary: peak RSS %d MiB (deploy/ limit %d MiB)", who, peak>>20, a.limits[who]>>20)
	}
}

// collidingIDs finds two device ids whose 3-byte Akri digests (as shared devices) are one.
func collidingIDs() (string, string) {
	seen := map[string]string{}
	for i := 0; ; i++ {
		id := fmt.Sprintf("cam-%d", i)
		d := api.AkriDigest(api.DeviceKey{ID: id, Shared: true}, 3)
		if other, ok := seen[d]; ok {
			return other, id
		}
		seen[d] = id
	}
}

// snapshot records what the attacker must not change: edge-b's broker objects and every
// finished Job in history/.
func (a *adversary) snapshot() {
	a.victim, a.history = map[string]string{}, map[string]string{}
	for _, p := range a.rendered().Files() {
		c, _ := a.rendered().File(p)
		switch {
		case strings.HasPrefix(p, "history/"):
			a.history[p] = c
		case strings.HasPrefix(p, render.RenderedDir) && strings.Contains(c, "akri.sh/target-node: edge-b"):
			a.victim[p] = c
		}
	}
	a.t.Logf("victim: %d objects, history: %d files", len(a.victim), len(a.history))
}

// remember keeps the nodes' commits for later rollbacks and replays.
func (a *adversary) remember() {
	if h := a.srv.On(verify.InventoryBranch("edge-a")).Head(); h != "" {
		a.oldA = append(a.oldA, h)
	}
	if h := a.srv.On(verify.InventoryBranch("edge-b")).Head(); h != "" {
		a.oldB = append(a.oldB, h)
	}
	for _, node := range []string{"edge-a", "edge-b"} {
		shard := api.AcceptedBranch(verify.InventoryBranch(node))
		if h := a.srv.On(shard).Head(); h != "" && !slices.Contains(a.shards[shard], h) {
			a.shards[shard] = append(a.shards[shard], h)
		}
	}
}

// check asserts the invariants after a step.
func (a *adversary) check(step string, out renderer.Outcome) {
	t := a.t
	t.Helper()
	for p, c := range a.victim {
		got, ok := a.rendered().File(p)
		require.True(t, ok, "%s: edge-b's %s is gone:\n%s", step, p, a.plan(out))
		require.Equal(t, c, got, "%s: edge-b's %s changed", step, p)
	}
	for p, c := range a.history {
		got, ok := a.rendered().File(p)
		require.True(t, ok, "%s: the finished Job %s is gone", step, p)
		require.Equal(t, c, got, "%s: the finished Job %s changed", step, p)
	}
	require.NotContains(t, a.renderedFile(api.InventoryPath("edge-b")), "evil", "%s: a forged inventory of edge-b was rendered", step)
	require.Contains(t, a.renderedFile(api.InventoryPath("edge-b")), "sensor-b", "%s: edge-b's inventory", step)
	for _, p := range a.rendered().Files() {
		if strings.Contains(p, a.victimJob) && strings.HasPrefix(p, render.RenderedDir) {
			t.Fatalf("%s: the finished firmware Job runs again: %s", step, p)
		}
	}
	msg, err := a.srv.VerifyCommit(a.rendered().Head(), a.allowed)
	require.NoError(t, err, "%s: the head of gitbroker/rendered is not the renderer's: %s", step, msg)
	require.Contains(t, msg, "renderer", step)
}

func (a *adversary) pick(list []string) string {
	if len(list) == 0 {
		return ""
	}
	return list[a.rng.IntN(len(list))]
}

func (a *adversary) rollbackOwn() string {
	c := a.pick(a.oldA)
	a.setRef(verify.InventoryBranch("edge-a"), c)
	return short(c)
}

func (a *adversary) replayVictim() string {
	c := a.pick(a.oldB)
	a.setRef(verify.InventoryBranch("edge-b"), c)
	return short(c)
}

func (a *adversary) deleteRef() string {
	ref := a.pick([]string{verify.InventoryBranch("edge-a"), verify.InventoryBranch("edge-b"), a.statusRef(), verify.ConfigurationsBranch, verify.RenderedBranch})
	a.setRef(ref, "")
	return ref
}

func (a *adversary) sameTree() string {
	ref := a.pick([]string{verify.RenderedBranch, verify.InventoryBranch("edge-b"), verify.ConfigurationsBranch, a.statusRef()})
	head := a.srv.On(ref).Head()
	if head == "" {
		return ref + " (absent)"
	}
	c := strings.TrimSpace(gitsynctest.Git(a.t, a.srv.Bare(), "-c", "user.name=attacker", "-c", "user.email=attacker@example.com", "commit-tree", head+"^{tree}", "-p", head, "-m", "same tree"))
	a.setRef(ref, c)
	return ref
}

func (a *adversary) orphan() string {
	inv := fmt.Sprintf("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: edge-b\nspec:\n  configurations:\n  - name: akri-debug-echo\n    namespace: default\n    devices:\n    - id: evil-%d\n", a.rng.IntN(1000))
	c := a.push("node:edge-a", "gitbroker/adversary-scratch", map[string][]byte{api.InventoryPath("edge-b"): []byte(inv)})
	a.setRef("gitbroker/adversary-scratch", "")
	a.setRef(verify.InventoryBranch("edge-b"), c)
	return short(c)
}

func (a *adversary) unsigned() string {
	status := a.statusRef()
	ref := a.pick([]string{"main", verify.InventoryBranch("edge-b"), status, verify.RenderedBranch})
	files := map[string]string{"notes/adversary.txt": fmt.Sprint(a.rng.Int())}
	switch ref {
	case verify.InventoryBranch("edge-b"):
		files = map[string]string{api.InventoryPath("edge-b"): "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: edge-b\nspec: {}\n"}
	case status:
		files = map[string]string{statusDir(ref) + "nodes/edge-b.yaml": nodeLoss("edge-b")}
	}
	if a.srv.On(ref).Head() == "" {
		return ref + " (absent)"
	}
	a.srv.On(ref).Commit(files, nil, "unsigned")
	return ref
}

func (a *adversary) foreign() string {
	c := a.push("node:edge-a", verify.InventoryBranch("edge-b"), map[string][]byte{
		api.InventoryPath("edge-b"): []byte(strings.ReplaceAll(a.renderedFile(api.InventoryPath("edge-b")), "sensor-b", "evil-sensor")),
	})
	return short(c)
}

func (a *adversary) bigBlob() string {
	c := a.push("node:edge-a", verify.InventoryBranch("edge-a"), map[string][]byte{api.InventoryPath("edge-a"): make([]byte, api.MaxInventorySize+1+a.rng.IntN(1<<20))})
	return short(c)
}

func (a *adversary) colliding() string {
	a.nodes["edge-a"].set("default/akri-debug-echo", "bar0", "shared:"+a.collide)
	_, err := a.agents["edge-a"].Sync(a.t.Context())
	require.NoError(a.t, err)
	return a.collide
}

func (a *adversary) fake() string {
	// edge-a claims the victim's camera (with its own properties), and devices it does not have.
	a.nodes["edge-a"].set("default/akri-debug-echo", "bar0", "shared:"+a.camera, fmt.Sprintf("ghost-%d", a.rng.IntN(100)))
	_, err := a.agents["edge-a"].Sync(a.t.Context())
	require.NoError(a.t, err)
	return a.camera
}

func (a *adversary) rollbackRendered() string {
	commits, _, err := a.refs.open(verify.RenderedBranch).FirstParents(a.t.Context(), verify.RenderedBranch, a.rendered().Head(), "", 20)
	if err != nil || len(commits) < 2 {
		return "(no older render)"
	}
	c := commits[1+a.rng.IntN(len(commits)-1)].Hash
	a.setRef(verify.RenderedBranch, c)
	return short(c)
}

// bomb pushes, unsigned, a commit holding a 62 MB blob of zeros (under every per-file limit, a
// few hundred KB on the wire) onto a ref a writer reads: its own, a node ref of no node, the
// publication or the recorder's. What each writer fetches is bounded in total below its
// process's memory (realBinary measures it).
func (a *adversary) bomb() string {
	if a.zeros == "" {
		cmd := exec.Command("git", "hash-object", "-w", "--stdin")
		cmd.Dir, cmd.Stdin = a.srv.Bare(), io.LimitReader(zeroReader{}, 62<<20)
		out, err := cmd.Output()
		require.NoError(a.t, err)
		a.zeros = strings.TrimSpace(string(out))
	}
	a.bombs++
	switch a.rng.IntN(4) {
	case 0:
		// The densest YAML under the inventory's size limit, signed as edge-a's own.
		a.push("node:edge-a", verify.InventoryBranch("edge-a"), map[string][]byte{api.InventoryPath("edge-a"): []byte(denseInventory("edge-a"))})
		return "a dense inventory of edge-a"
	case 1:
		// Dense YAML as the accepted-tips shard of a node, which a writer restarting with its
		// ref gone reads for its accepted tip (unsigned: the renderer puts its own back at its
		// next render).
		shard := api.AcceptedBranch(verify.InventoryBranch(a.pick([]string{"edge-a", "edge-b"})))
		if a.srv.On(shard).Head() == "" {
			return "no " + shard + " to put dense tips on"
		}
		a.srv.On(shard).Commit(map[string]string{api.AcceptedFile(strings.TrimPrefix(shard, api.AcceptedBranchPrefix)): "writers:\n" + strings.Repeat("  - {a: b}\n", (6<<20)/11)}, nil, "dense tips")
		return "dense accepted tips on " + shard
	}
	shard := api.AcceptedBranch(verify.InventoryBranch(a.pick([]string{"edge-a", "edge-b"})))
	status := a.statusRef()
	ref := a.pick([]string{verify.InventoryBranch("edge-a"), verify.InventoryBranch(fmt.Sprintf("bomb-%d", a.bombs)), verify.ConfigurationsBranch, status, shard})
	path := map[string]string{verify.ConfigurationsBranch: "configurations/zeros.yaml", status: statusDir(status) + "jobs/plant/zeros.yaml",
		shard: api.AcceptedFile(strings.TrimPrefix(shard, api.AcceptedBranchPrefix))}[ref]
	if path == "" {
		path = api.InventoryPath(strings.TrimPrefix(ref, verify.InventoryBranch("")))
	}
	dir, file := "", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, file = path[:i], path[i+1:]
	}
	tree := a.mktree(fmt.Sprintf("100644 blob %s\t%s\n", a.zeros, file))
	for dir != "" {
		name := dir
		if i := strings.LastIndexByte(dir, '/'); i >= 0 {
			dir, name = dir[:i], dir[i+1:]
		} else {
			dir = ""
		}
		tree = a.mktree(fmt.Sprintf("040000 tree %s\t%s\n", tree, name))
	}
	args := []string{"-c", "user.name=attacker", "-c", "user.email=attacker@example.com", "commit-tree", tree, "-m", "zeros"}
	if head := a.srv.On(ref).Head(); head != "" {
		args = append(args, "-p", head)
	}
	a.setRef(ref, strings.TrimSpace(gitsynctest.Git(a.t, a.srv.Bare(), args...)))
	return ref
}

func (a *adversary) mktree(entries string) string {
	cmd := exec.Command("git", "mktree")
	cmd.Dir, cmd.Stdin = a.srv.Bare(), strings.NewReader(entries)
	out, err := cmd.Output()
	require.NoError(a.t, err)
	return strings.TrimSpace(string(out))
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// realBinary runs the real gitbroker binary once as the renderer (a one-shot render --git,
// which may refuse) or as edge-a's agent (agent --once, whose discovery finds nothing here),
// and checks its peak resident memory against its deploy/ limit.
func (a *adversary) realBinary() string {
	t := a.t
	who := a.pick([]string{"renderer", "agent"})
	var code int
	var out string
	var rss int64
	switch who {
	case "renderer":
		code, out, rss = peakRSS(t, "render", "--git", a.srv.URL(), "--signing-key", a.keyFiles["renderer"])
		if code == exitInvalid {
			// edge-a's own inventory may be the invalid one (a large blob it signed, its part
			// kept as it was): the attacker's node only, nothing else.
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "error: ") && !strings.Contains(line, "inventory/edge-a.yaml") && !strings.Contains(line, "invalid input(s)") {
					require.Fail(t, "the one-shot render finds an input invalid other than edge-a's inventory", out)
				}
			}
		} else {
			require.Contains(t, []int{exitOK, exitRefused}, code, out)
		}
	case "agent":
		if a.renderedKeyFile == "" {
			a.renderedKeyFile = filepath.Join(t.TempDir(), "renderer.allowed_signers")
			require.NoError(t, os.WriteFile(a.renderedKeyFile, []byte(a.allowed), 0o644))
		}
		code, out, rss = peakRSS(t, "agent", "--allow-debug-echo", "--git", a.srv.URL(), "--node", "edge-a", "--once", "--signing-key", a.keyFiles["node:edge-a"],
			"--renderer-key", a.renderedKeyFile, "--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
		require.Equal(t, exitOK, code, out)
	}
	require.Less(t, rss, a.limits[who], "the %s's real binary went past its deploy/ memory limit:\n%s", who, out)
	a.peaks[who] = max(a.peaks[who], rss)
	return fmt.Sprintf("%s, exit %d, peak RSS %d MiB", who, code, rss>>20)
}

// moveAndRestart deletes gitbroker/rendered or moves it back, and restarts the renderer before
// it renders again: the new process knows only its Lease's commit, which no branch reaches.
func (a *adversary) moveAndRestart() string {
	moved := "deleted"
	if a.rng.IntN(2) == 0 {
		moved = "moved back to " + a.rollbackRendered()
	} else {
		a.setRef(verify.RenderedBranch, "")
	}
	a.restartRenderer()
	return moved
}

// setRef moves branch to commit ("" deletes it) as the attacker can: clearing first every ref
// in the way (one it planted, blockRef, or a writer's named as a folder of branch, or under it),
// which git would not let it create the branch beside.
func (a *adversary) setRef(branch, commit string) {
	if commit != "" {
		for _, ref := range strings.Fields(gitsynctest.Git(a.t, a.srv.Bare(), "for-each-ref", "--format=%(refname)", "refs/heads/"+branch+"/")) {
			gitsynctest.Git(a.t, a.srv.Bare(), "update-ref", "-d", ref)
		}
		parts := strings.Split(branch, "/")
		for i := 1; i < len(parts); i++ {
			a.srv.SetRef(strings.Join(parts[:i], "/"), "")
		}
	}
	a.srv.SetRef(branch, commit)
}

// blockRef deletes a branch a writer creates again and plants a ref git will not let it create
// beside (edge-b's ref, gitbroker/rendered, the status branch, the publication, or the accepted tips' shards under
// a ref named as their folder), so its next push must clear the way.
func (a *adversary) blockRef() string {
	head := a.srv.On("main").Head()
	switch target := a.pick([]string{verify.InventoryBranch("edge-b"), verify.RenderedBranch, a.statusRef(), verify.ConfigurationsBranch, "shards"}); target {
	case "shards":
		for _, ref := range strings.Fields(gitsynctest.Git(a.t, a.srv.Bare(), "for-each-ref", "--format=%(refname)", "refs/heads/"+api.AcceptedBranchPrefix)) {
			gitsynctest.Git(a.t, a.srv.Bare(), "update-ref", "-d", ref)
		}
		a.setRef(strings.TrimSuffix(api.AcceptedBranchPrefix, "/"), head)
		return "the accepted tips' shards deleted, " + strings.TrimSuffix(api.AcceptedBranchPrefix, "/") + " planted"
	default:
		if a.srv.On(target+"/x").Head() != "" {
			return target + "/x is planted already"
		}
		a.setRef(target, "")
		a.setRef(target+"/x", head)
		return target + " deleted, " + target + "/x planted"
	}
}

// staleMetadataAndRestart moves a node's ref back to an older commit of its own (or deletes it)
// and makes what a restarted writer reads its accepted tip from name that commit: its ref's
// accepted-tips shard, with an unsigned commit on top, an older shard of the renderer's put back
// or the shard deleted; or, as before the shards, the render metadata on gitbroker/rendered.
// Then it restarts the node's agent.
func (a *adversary) staleMetadataAndRestart() string {
	who := a.pick([]string{"edge-a", "edge-b"})
	ref := verify.InventoryBranch(who)
	shard := api.AcceptedBranch(ref)
	what := who + "'s ref deleted"
	commits, _, err := a.refs.open(ref).FirstParents(a.t.Context(), ref, a.srv.On(ref).Head(), "", 20)
	older := ""
	if err == nil && len(commits) > 1 && a.rng.IntN(3) > 0 {
		older = commits[1+a.rng.IntN(len(commits)-1)].Hash
		what = who + "'s ref moved back to " + short(older)
	}
	a.setRef(ref, older)
	file := api.AcceptedFile(api.AcceptedShard(ref))
	switch a.rng.IntN(5) {
	case 0:
		what += ", render moved back to " + a.rollbackRendered()
	case 1:
		if meta, ok := a.rendered().File(render.MetadataPath); ok && older != "" {
			if tip := render.WriterTip([]byte(meta), ref); tip != "" {
				a.rendered().Commit(map[string]string{render.MetadataPath: strings.ReplaceAll(meta, tip, older)}, nil, "render metadata")
				what += ", unsigned metadata naming it"
			}
		}
	case 2:
		if tips, ok := a.srv.On(shard).File(file); ok && older != "" {
			if tip := render.WriterTip([]byte(tips), ref); tip != "" {
				a.srv.On(shard).Commit(map[string]string{file: strings.ReplaceAll(tips, tip, older)}, nil, "accepted tips")
				what += ", unsigned accepted tip naming it"
			}
		}
	case 3:
		if seen := a.shards[shard]; len(seen) > 1 {
			c := seen[a.rng.IntN(len(seen)-1)]
			a.setRef(shard, c)
			what += ", " + shard + " moved back to " + short(c)
		}
	default:
		a.setRef(shard, "")
		what += ", " + shard + " deleted"
	}
	a.agents[who] = a.startAgent(who, a.keys["node:"+who], a.nodes[who], 0, a.refs.acceptedTip(a.allowed, ref)...)
	_, err = a.agents[who].Sync(a.t.Context())
	require.NoError(a.t, err)
	return what
}

// restart restarts an agent or the recorder (nothing in memory, its accepted tip read from the
// render metadata, as deploy/ runs them) or the renderer (which takes the commit it pushed last from its
// Lease, as Daemon.Lead does).
func (a *adversary) restart() string {
	switch who := a.pick([]string{"edge-a", "edge-b", "renderer", "recorder"}); who {
	case "recorder":
		a.stopRecorder()
		a.startRecorder()
		return who
	case "renderer":
		a.restartRenderer()
		return who
	default:
		ref := verify.InventoryBranch(who)
		a.agents[who] = a.startAgent(who, a.keys["node:"+who], a.nodes[who], 0,
			a.refs.acceptedTip(a.allowed, ref)...)
		return who
	}
}

// push commits files on branch with principal's key, as forge does; a commit that would change
// nothing is not made, and "" is returned.
func (a *adversary) push(principal, branch string, files map[string][]byte) string {
	var owned []string
	for p := range files {
		owned = append(owned, p)
	}
	res, err := a.as(principal, branch).Update(a.t.Context(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Owned: owned, Files: files, Message: "pushed by the adversary as " + principal,
			Author: gitsync.Signature{Name: "mallory", Email: "mallory@example.com", When: time.Now()}}, nil
	})
	if errors.Is(err, gitsync.ErrNoChanges) {
		return ""
	}
	require.NoError(a.t, err)
	return res.Commit
}

// restartRenderer restarts the renderer as Daemon.Lead does: it takes the commit it pushed last
// from its Lease, whatever the branch holds now, and is not told the repository is new.
func (a *adversary) restartRenderer() {
	pushed := a.renderer.Pushed()
	a.renderer = a.refs.renderer(a.keys["renderer"])
	a.renderer.Sources.FirstRender = false
	a.renderer.StartFrom(pushed)
}

// wipeAndRenderOnce deletes every gitbroker/ branch but the node refs (or every one, and pushes a
// branch named gitbroker, which stands in the way of them all), moves edge-b's ref back to an
// older commit of its own, and runs the real one-shot render, which must refuse to start from
// nothing (trust review 3, finding 1). The renderer of the loop then renders over the gap from
// what it pushed last.
func (a *adversary) wipeAndRenderOnce() string {
	t := a.t
	all := a.rng.IntN(2) == 0
	head := a.srv.Head()
	for _, b := range a.srv.Branches() {
		node, nodeRef := strings.CutPrefix(b, verify.InventoryPrefix)
		if strings.HasPrefix(b, "gitbroker/") && (all || !nodeRef || strings.Contains(node, "/")) { // a ref in a node ref's way goes too
			a.srv.SetRef(b, "")
		}
	}
	what := "every gitbroker/ branch but the node refs"
	if all {
		a.srv.SetRef("gitbroker", head)
		what = "every gitbroker/ branch, and gitbroker pushed"
	} else if old := a.pick(a.oldB); old != "" {
		a.srv.SetRef(verify.InventoryBranch("edge-b"), old)
		what += ", edge-b moved back to " + short(old)
	}
	code, stdout, stderr := runBinary(t, "render", "--git", a.srv.URL(), "--signing-key", a.keyFiles["renderer"])
	require.Equal(t, exitRefused, code, "the one-shot render after %s: %s%s", what, stdout, stderr)
	require.Contains(t, stderr, "--first-render")
	require.Empty(t, a.rendered().Head(), "the one-shot render rendered from nothing")
	require.Empty(t, a.srv.On(verify.ConfigurationsBranch).Head(), "the one-shot render published from nothing")
	return what + "; the one-shot render refused"
}

// floodWebhook sends the render daemon's webhook handler forged notifications (a well-formed
// signature of another secret), bodies that declare more than they send, and requests with no
// signature, then an agent's signed nudge, which must wake the renderer (trust review 3,
// findings 2 and 3). What it woke costs one fetch: the next render finds nothing new.
func (a *adversary) floodWebhook() string {
	t := a.t
	var woke atomic.Int64
	h := &notify.Hook{NudgeSecret: []byte("nudge-secret"), Limiter: rate.NewLimiter(rate.Limit(1), 1), Log: logr.Discard(),
		Wake: func(string) { woke.Add(1) }}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := `{"ref":"refs/heads/gitbroker/inventory/edge-b"}`
	post := func(sig string, declared int64) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		require.NoError(t, err)
		if declared > 0 {
			req.ContentLength = declared // the body ends early: the read fails
		}
		if sig != "" {
			req.Header.Set(notify.HeaderSignature, sig)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	n := 20 + a.rng.IntN(80)
	var flood sync.WaitGroup
	for i := range n {
		flood.Go(func() {
			switch i % 3 {
			case 0:
				post("sha256="+strings.Repeat("0", 64), 0)
			case 1:
				post("sha256="+strings.Repeat("0", 64), notify.MaxBody)
			default:
				post("", 0)
			}
		})
	}
	flood.Wait()
	require.Zero(t, woke.Load(), "a forged notification woke the renderer")
	signed := "sha256=" + hex.EncodeToString(notify.Sign(sha256.New, []byte("nudge-secret"), []byte(body)))
	require.Equal(t, http.StatusAccepted, post(signed, 0), "the signed nudge after %d forged requests", n)
	require.EqualValues(t, 1, woke.Load())
	return fmt.Sprintf("%d forged requests refused, the signed nudge accepted", n)
}

// settings is the people's gitbroker.yaml for the sequence's mode and cluster layout.
func (a *adversary) settings() string {
	s := "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n"
	if a.mode == "dra" {
		s += "  deviceAllocation: dra\n"
	}
	switch a.layout {
	case "split":
		s += "  clusters:\n  - name: east\n    nodes: [edge-a]\n  - name: west\n    nodes: [edge-b]\n"
	case "joined":
		s += "  clusters:\n  - name: west\n    nodes: [\"edge-*\"]\n"
	}
	return s
}

// statusRef is a recorder's ref the attacker writes: the one-cluster recorder's, and with
// clusters each cluster's and one of a cluster nobody declared.
func (a *adversary) statusRef() string {
	if a.layout == "" {
		return verify.StatusBranch
	}
	return a.pick([]string{verify.StatusBranch, api.ClusterStatusBranch("east"), api.ClusterStatusBranch("west"), api.ClusterStatusBranch("north")})
}

// statusDir is where the records of a recorder's ref live: status/, or status/<cluster>/.
func statusDir(ref string) string {
	if c, ok := strings.CutPrefix(ref, verify.StatusBranch+"/"); ok {
		return "status/" + c + "/"
	}
	return "status/"
}

func nodeLoss(node string) string {
	return "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeLoss\nmetadata:\n  name: " + node + "\nspec:\n  since: \"2026-01-01T00:00:00Z\"\n  reason: NotReady\n"
}

// forgeStatus writes, signed with edge-a's key, a node loss of edge-b (which would move its
// shared camera's broker to edge-a) and a failed record of the victim's finished Job on a
// recorder's ref: the one-cluster recorder's, a cluster's, or one of a cluster nobody declared.
func (a *adversary) forgeStatus() string {
	ref := a.statusRef()
	dir := statusDir(ref)
	record := "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: " + a.victimName + "\n  namespace: plant\nspec:\n  configuration: plc-firmware\n" +
		"  instance: " + a.victimName[:len("plc-firmware-")+6] + "\n  deviceID: plc-b\n  outcome: Failed\n  startTime: \"2026-01-01T00:00:00Z\"\n  failed: 3\n  succeeded: 0\n"
	c := a.push("node:edge-a", ref, map[string][]byte{dir + "nodes/edge-b.yaml": []byte(nodeLoss("edge-b")), dir + "jobs/plant/" + a.victimName + ".yaml": []byte(record)})
	return ref + " " + short(c)
}

// switchLayout is the person's change of spec.clusters: from one cluster to edge-a in east and
// edge-b in west (enrolling the clusters' recorders, and starting west's), and then between that
// and both in west, each rendered with --allow-deletions as a layout change must be. The victim's
// finished Job runs again nowhere and its history is kept (its bytes, wherever the layout puts
// them); what the victim has rendered is then taken again, as the cluster's variables change it.
func (a *adversary) switchLayout() string {
	t := a.t
	files := map[string]string{}
	switch a.layout {
	case "":
		a.layout = "split"
		dir := t.TempDir()
		for _, c := range []string{"east", "west"} {
			p := "recorder:" + c
			k, _, err := trust.LoadOrCreateSigner(filepath.Join(dir, c), p)
			require.NoError(t, err)
			a.keys[p], a.keyFiles[p] = k, filepath.Join(dir, c)
			a.allowed += k.AllowedSignersLine(p) + "\n"
		}
		files[verify.AllowedSignersPath] = a.allowed
	case "split":
		a.layout = "joined"
	default:
		a.layout = "split"
	}
	files[api.SettingsPath] = a.settings()
	a.srv.CommitSigned(a.keyFiles["alice@example.com"], files, nil, "clusters: "+a.layout)
	history := slices.Sorted(maps.Values(a.history))
	a.renderer.AllowDeletions = true
	out, err := a.renderer.Once(t.Context())
	a.renderer.AllowDeletions = false
	if err != nil {
		require.ErrorIs(t, err, gitsync.ErrNoChanges)
	}
	plan := a.plan(out)
	for _, e := range out.Result.Errors {
		// What the attacker pushed on edge-a's ref (a bomb over the inventory's bounds) stays an
		// invalid input of the switch, which keeps edge-a's verified part; nothing else is.
		require.Equal(t, api.InventoryPath("edge-a"), e.File, "the switch to %s: %v\n%s", a.layout, e, plan)
	}
	require.NotContains(t, plan, "started: new run", "the switch to %s starts a Job", a.layout)
	if a.recCluster == "" {
		// The one-cluster recorder retires; west's records the cluster's Jobs from now on
		// (edge-b is in west in both layouts).
		a.stopRecorder()
		a.recCluster = "west"
		a.startRecorder()
	}
	a.snapshot()
	require.Equal(t, history, slices.Sorted(maps.Values(a.history)), "the switch to %s keeps the finished Jobs' history", a.layout)
	for p := range a.history {
		require.True(t, strings.HasPrefix(p, "history/west/"), "%s: with clusters the victim's history is west's", p)
	}
	return a.layout
}
