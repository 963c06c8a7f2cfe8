package main

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/internal/procmem"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// The attacks of the second trust review (issue "Trust fails closed"), one test each, played
// with one node's key and the shared git credential against the real git server. Each fails
// on the code before its fix.

// Finding 1: a person's signed commit adds a malformed line to allowed_signers (a key without
// its type). After any unsigned commit on top, the file was read as enrolling nobody, and every
// writer's commits were rendered unverified for good: an unsigned commit on a node's ref
// removed its brokers. The commit is now an invalid input: rendering stays at its parent,
// verified with the last good files, until a person's signed commit repairs them.
func TestFailClosedMalformedTrustLineKeepsVerifying(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	good := s.srv.Head()
	require.Contains(t, s.brokersText(), "bar0")

	key := strings.Fields(strings.Split(s.allowed, "\n")[0])
	bad := s.allowed + "node:edge-c " + key[len(key)-1] + "\n" // the key without its type
	badCommit := s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.AllowedSignersPath: bad}, nil, "enroll edge-c")
	out := s.renderTrust()
	s.untrusted(out, "main", "commit "+badCommit[:12]+" changes the trust files so that they do not parse (.gitbroker/allowed_signers:6: ")
	require.Contains(t, s.plan(out), "Inputs: verified:")

	unsigned := s.srv.Commit(map[string]string{"configurations/notes.txt": "unsigned\n"}, nil, "unsigned")
	out = s.renderTrust()
	require.Contains(t, s.plan(out), "Inputs: verified:", "verification never turns off")
	require.Equal(t, good, out.Source, "the source stays at the last good commit")

	// An unsigned commit on edge-a's ref, which unverified rendering would take, removes
	// nothing.
	s.forge("node:edge-b", verify.InventoryBranch("edge-a"), map[string][]byte{
		api.InventoryPath("edge-a"): []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: edge-a\nspec: {}\n"),
	})
	out = s.renderTrust()
	s.untrusted(out, verify.InventoryBranch("edge-a"), "not by node:edge-a")
	require.Contains(t, s.brokersText(), "bar0")

	// A person's signed commit repairs the file (and vouches for the unsigned one): rendering
	// goes on from there.
	fixed := s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.AllowedSignersPath: s.allowed, "configurations/notes.txt": "signed\n"}, nil,
		"repair allowed_signers\n\n"+verify.TrailerAccept+": "+unsigned)
	out = s.renderTrust()
	require.Equal(t, fixed, out.Source, s.plan(out))
	require.Empty(t, out.Result.Untrusted[1:], s.plan(out))
}

// Removing every enrolment from allowed_signers would turn verification off: it is refused in
// the same way, and the plan keeps saying verified.
func TestFailClosedEmptiedAllowedSignersKeepsVerifying(t *testing.T) {
	s := newSignedLoop(t)
	s.renderTrust()
	good := s.srv.Head()
	emptied := s.srv.CommitSigned(s.keyFiles["alice@example.com"], nil, []string{verify.AllowedSignersPath}, "remove allowed_signers")
	out := s.renderTrust()
	s.untrusted(out, "main", "commit "+emptied[:12]+" leaves .gitbroker/allowed_signers enrolling nobody")
	require.Contains(t, s.plan(out), "Inputs: verified:")
	require.Equal(t, good, out.Source)
}

// Finding 1, review: plan and check on the work tree said nothing about the malformed line
// (exit 0) that render then refused. They now refuse it at its file and line, as invalid input.
// DEPLOYING's step 3, run before the fleet CA exists, appended such a line.
func TestFailClosedPlanAndCheckRefuseABadTrustLine(t *testing.T) {
	dir := demoRepo(t)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ".gitbroker"), 0o755))
	signers := filepath.Join(dir, filepath.FromSlash(verify.AllowedSignersPath))
	require.NoError(t, os.WriteFile(signers, []byte("alice@example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFcQ0ZfR5hOFN/a2oKqbRKAXkmFw5ZzqBR5cpTF6D7tF\n\"node:*\" cert-authority \n"), 0o644))
	for _, cmd := range []string{"plan", "check", "render"} {
		code, stdout, stderr := gitbroker(t, cmd, "--dir", dir)
		require.Equal(t, exitInvalid, code, "%s: %s%s", cmd, stdout, stderr)
		require.Contains(t, stdout+stderr, ".gitbroker/allowed_signers:2: principals \"node:*\": no key", cmd)
	}
	require.NoError(t, os.WriteFile(signers, []byte("alice@example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFcQ0ZfR5hOFN/a2oKqbRKAXkmFw5ZzqBR5cpTF6D7tF\n"), 0o644))
	code, stdout, stderr := gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitOK, code, stdout+stderr)
}

// Finding 1, review: plan on the pull request that adds the malformed line said nothing. It
// now refuses it at its line, as invalid input.
func TestFailClosedPullRequestPlanRefusesABadTrustLine(t *testing.T) {
	srv := demoServer(t)
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	gitsynctest.Git(t, srv.Bare(), "branch", "enroll-edge-c", "main")
	head := srv.On("enroll-edge-c").Commit(map[string]string{verify.AllowedSignersPath: "node:edge-c AAAAC3NzaC1lZDI1NTE5AAAAIFcQ0ZfR5hOFN/a2oKqbRKAXkmFw5ZzqBR5cpTF6D7tF\n"}, nil, "enroll edge-c")
	gitsynctest.Git(t, srv.Bare(), "update-ref", "refs/pull/9/head", head)
	code, stdout, stderr := gitbroker(t, "plan", "--git", srv.URL(), "--ref", "refs/pull/9/head")
	require.Equal(t, exitInvalid, code, stdout+stderr)
	require.Contains(t, stdout, ".gitbroker/allowed_signers:1: principals \"node:edge-c\": no key")
}

// Finding 7: an unsigned commit with the render's exact tree pushed onto gitbroker/rendered.
// The render found nothing to change and left it as the head, which Flux's verification then
// refused to apply until the next change. The renderer commits over anything it did not sign.
func TestFailClosedSameTreeCommitOnRenderedIsReplaced(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	head := s.rendered().Head()
	same := strings.TrimSpace(gitsynctest.Git(t, s.srv.Bare(), "-c", "user.name=attacker", "-c", "user.email=attacker@example.com", "commit-tree", head+"^{tree}", "-p", head, "-m", "same tree, unsigned"))
	s.srv.SetRef(verify.RenderedBranch, same)

	out := s.renderTrust()
	require.NotEmpty(t, out.Commit, "the render commits over the unsigned head: %s", s.plan(out))
	msg, err := s.srv.VerifyCommit(s.rendered().Head(), s.allowed)
	require.NoError(t, err, "the head is the renderer's again: %s", msg)
	require.Contains(t, msg, "renderer")

	// The daemon's view: the next render, with nothing new, leaves its own head alone.
	out = s.renderTrust()
	require.Empty(t, out.Commit)
}

// Finding 8: a node whose certificate .gitbroker/revoked_keys lists kept its last accepted
// inventory rendered for ever; for a fleet enrolled through an SSH CA, revocation is the only
// way to retire one node. Revocation now drops the node's inventory, as removing its line
// does, whether its ref moves, stays or is deleted.
func TestFailClosedRevocationDecommissions(t *testing.T) {
	s := newSignedLoop(t)
	signer, dir := s.enrollCANode("edge-c")
	devices := &nodeDevices{devices: map[string][]api.Device{}}
	devices.set("default/akri-debug-echo", "cam0")
	c := s.startAgent("edge-c", signer, devices, 0)
	_, err := c.Sync(t.Context())
	require.NoError(t, err)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	require.Contains(t, s.brokersText(), "cam0")

	cert, err := os.ReadFile(filepath.Join(dir, "edge-c-cert.pub"))
	require.NoError(t, err)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.RevokedKeysPath: "# edge-c, decommissioned\n" + string(cert)}, nil, "decommission edge-c")
	out := s.renderTrust()
	s.untrusted(out, verify.InventoryBranch("edge-c"), "signed by a key .gitbroker/revoked_keys revokes: the node is decommissioned")
	require.NotContains(t, s.brokersText(), "cam0", "its ref did not move, and it is dropped")
	require.Contains(t, s.brokersText(), "bar0", "the other nodes stay")
	require.NotContains(t, s.renderedFile(api.InventoryPath("edge-c")), "cam0")

	// Its ref deleted: still nothing of it.
	s.srv.SetRef(verify.InventoryBranch("edge-c"), "")
	s.renderTrust()
	require.NotContains(t, s.brokersText(), "cam0")
}

// Finding 4: a node's ref pushed back to one of its own older commits, then the agent
// restarted (a reboot, an upgrade, an OOM kill). It built on that commit for ever, and every
// render refused it as not descending from the tip accepted last. A restarted writer now starts
// from what the renderer accepted: a new line that names it.
func TestFailClosedRollbackAndRestartDoesNotFreezeANode(t *testing.T) {
	s := newSignedLoop(t)
	ref := verify.InventoryBranch("edge-b")
	old, _ := s.twoRenders()

	s.srv.SetRef(ref, old)
	restarted := s.startAgent("edge-b", s.keys["node:edge-b"], s.nodes["edge-b"], 0,
		s.refs.acceptedTip(s.allowed, ref)...)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz2")
	_, err := restarted.Sync(t.Context())
	require.NoError(t, err)
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.brokersText(), "baz2", "the node's change lands")

	// The old commit itself stays refused: the new line replaced exactly the accepted tip.
	s.srv.SetRef(ref, old)
	out = s.renderTrust()
	s.untrusted(out, ref, "does not descend from")
	require.Contains(t, s.brokersText(), "baz2")
}

// Finding 10: device properties that steer how a broker loads plugins, drivers and modules,
// which shell start file it reads, which package index or telemetry endpoint it uses, reached
// the env. A device reporting one is now an invalid inventory, as JAVA_OPTS was.
func TestFailClosedDeviceCannotSteerLoaders(t *testing.T) {
	for _, name := range []string{"GST_PLUGIN_PATH", "LIBVA_DRIVERS_PATH", "VK_ICD_FILENAMES", "QT_PLUGIN_PATH", "GTK_MODULES",
		"GIO_MODULE_DIR", "ZDOTDIR", "XDG_CONFIG_HOME", "PIP_INDEX_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "GOTOOLCHAIN",
		"__EGL_VENDOR_LIBRARY_FILENAMES", "MESA_LOADER_DRIVER_OVERRIDE", "MY_APP_PLUGIN_DIR", "FOO_LIBRARY_PATH"} {
		require.True(t, api.RefusedDeviceProperty(name), name)
	}
	for _, name := range []string{"DEBUG_ECHO_DESCRIPTION", "UDEV_DEVNODE", "UDEV_DEVPATH", "ONVIF_DEVICE_SERVICE_URL", "ONVIF_DEVICE_IP_ADDRESS", "OPCUA_DISCOVERY_URL"} {
		require.False(t, api.RefusedDeviceProperty(name), "Akri's handlers report %s", name)
	}
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	s.forgeInventory("edge-a", "        DEBUG_ECHO_DESCRIPTION: bar0\n", "        DEBUG_ECHO_DESCRIPTION: bar0\n        GST_PLUGIN_PATH: /tmp/evil\n")
	out, err := s.renderer.Once(t.Context())
	if err != nil {
		require.ErrorIs(t, err, gitsync.ErrNoChanges)
	}
	require.Contains(t, out.Result.Errors.Error(), "properties.GST_PLUGIN_PATH: a device may not set GST_PLUGIN_PATH")
	require.NotContains(t, s.brokersText(), "/tmp/evil")
}

// Finding 3: one file on main larger than the renderer's limit stopped all rendering
// ("reading main: larger than the configured limit"), node changes included, and a person's
// signed commit deleting it did not help ("fetching the history of main ... larger than the
// configured limit"). A fetch now leaves out blobs too large to read (a partial clone filter),
// walking history reads no such blob, and a commit holding one is not rendered: the nodes'
// changes keep rendering, and the signed commit that removes the file renders.
func TestFailClosedOversizedSourceFileIsRefusedNotAFreeze(t *testing.T) {
	s := newSignedLoop(t)
	s.renderer = s.refs.renderer(s.keys["renderer"], gitsync.WithLimits(0, 32<<10))
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	last := s.srv.Head()

	big := s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{"notes/big.txt": strings.Repeat("0123456789abcdef", 4<<10)}, nil, "a 64 KiB file")
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar1")
	s.discover()
	out := s.renderTrust()
	s.untrusted(out, "main", "commit "+big[:12]+" holds a file too large to read")
	require.Equal(t, last, out.Source, "the people's part stays as rendered last")
	require.Contains(t, s.plan(out), "Inputs: verified:")
	require.Contains(t, s.brokersText(), "bar1", "the node's change renders")

	fixed := s.srv.CommitSigned(s.keyFiles["alice@example.com"], nil, []string{"notes/big.txt"}, "remove the big file")
	out = s.renderTrust()
	require.Equal(t, fixed, out.Source, "the person's fix renders: %s", s.plan(out))
	require.Empty(t, out.Result.Untrusted, s.plan(out))

	// A server that offers no filter sends the whole blob, and the branch is refused whole: the
	// people's part stays, the nodes' changes still render.
	gitsynctest.Git(t, s.srv.Bare(), "config", "uploadpack.allowFilter", "false")
	s.renderer = s.refs.renderer(s.keys["renderer"], gitsync.WithLimits(0, 32<<10))
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{"notes/big.txt": strings.Repeat("fedcba9876543210", 4<<10)}, nil, "another 64 KiB file")
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar2")
	s.discover()
	out = s.renderTrust()
	s.untrusted(out, "main", "too large to read")
	require.NotEqual(t, s.srv.Head(), out.Source, "the people's part stays as rendered last")
	require.Contains(t, s.brokersText(), "bar2")
}

// Finding 2, the renderer: blobs of zeros on node refs (a few MB on the wire each) took the
// renderer past its memory limit, and an OOM-killed renderer crashed again on every start. A
// node's ref now fetches no blob larger than an inventory may be: the server leaves it out,
// the node's part is kept, and everyone else renders.
func TestFailClosedNodeRefBlobsNeverReachTheRenderer(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	code, _, stderr := gitbroker(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	require.Contains(t, []int{exitOK}, code, stderr)

	s.nodes["edge-a"].set("default/akri-debug-echo", "bar1")
	s.discover()
	bomb := make([]byte, api.MaxInventorySize+1)
	s.forge("node:edge-b", verify.InventoryBranch("edge-b"), map[string][]byte{api.InventoryPath("edge-b"): bomb})
	code, stdout, stderr := gitbroker(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	require.Equal(t, exitRefused, code, stdout+stderr)
	require.Contains(t, stdout, "untrusted: gitbroker/inventory/edge-b: commit")
	require.Contains(t, stdout, fmt.Sprintf("the server left it out as larger than %d bytes; the node's last verified inventory is kept", api.MaxInventorySize))
	require.Contains(t, s.brokersText(), "bar1", "the other nodes render")
	require.Contains(t, s.brokersText(), "baz0", "edge-b's part is kept")
}

// Finding 2, the agent: two blobs of zeros planted on gitbroker/configurations took an agent
// to 437 MB (its limit is 128Mi), and an agent OOM-killed before it repaired anything crashed
// again on every start. The agent now fetches no file larger than it may read, and at most
// gitsync.AgentMaxFetchBytes in one fetch: the zeros are never fetched, let alone inflated.
func TestFailClosedPlantedBlobsNeverReachTheAgent(t *testing.T) {
	require.EqualValues(t, api.MaxFileSize, gitsync.AgentMaxFileSize, "an agent reads every file an input may be")
	s := newSignedLoop(t)
	pinned := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(pinned, []byte(s.allowed), 0o644))
	s.srv.On(verify.ConfigurationsBranch).Commit(map[string]string{
		"configurations/a.yaml": strings.Repeat("\x00", 64<<20), "configurations/b.yaml": strings.Repeat("\x00", 64<<20),
	}, nil, "zeros")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, stdout, stderr := gitbroker(t, "agent", "--allow-debug-echo", "--git", s.srv.URL(), "--node", "edge-a", "--once", "--signing-key", s.keyFiles["node:edge-a"],
		"--renderer-key", pinned, "--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	runtime.ReadMemStats(&after)
	require.Equal(t, exitRefused, code, "the planted tip is refused: %s%s", stdout, stderr)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "the zeros were never fetched")
}

// Finding 9: the agent's floor against an older gitbroker/configurations was in memory only:
// a restarted agent took whatever older publication the branch was moved back to. The agent
// now names the publication it used in its own signed commits, and once restarted takes
// nothing older than that.
func TestFailClosedRestartedAgentKeepsItsPublicationFloor(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	older := s.srv.On(verify.ConfigurationsBranch).Head()
	echo, _ := s.srv.File("configurations/akri-debug-echo.yaml")
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(echo, "memory: 10Mi", "memory: 12Mi", 1)}, nil, "more memory")
	s.renderTrust()
	newer := s.srv.On(verify.ConfigurationsBranch).Head()
	require.NotEqual(t, older, newer)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0", "bar1")
	s.discover()
	raw := gitsynctest.Git(t, s.srv.Bare(), "cat-file", "commit", s.srv.On(verify.InventoryBranch("edge-a")).Head())
	require.Contains(t, raw, api.TrailerPublication+": "+newer)

	s.srv.SetRef(verify.ConfigurationsBranch, older)
	restarted := s.startAgent("edge-a", s.keys["node:edge-a"], s.nodes["edge-a"], 0)
	_, err := restarted.Sync(t.Context())
	require.ErrorContains(t, err, "older than "+newer[:12]+", the publication this node's own last commit used: a rollback")
	// The renderer puts its publication back on its next render, and the agent goes on.
	s.renderTrust()
	_, err = restarted.Sync(t.Context())
	require.NoError(t, err)
}

// pluginSink keeps what an agent last gave its device plugin.
type pluginSink struct {
	mu   sync.Mutex
	last []deviceplugin.Instance
}

func (s *pluginSink) Update(list []deviceplugin.Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = list
}

func (s *pluginSink) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, in := range s.last {
		out = append(out, in.Name)
	}
	return out
}

// Finding 5: a node reported a device whose 3-byte Akri digest matches another node's
// instance. The victim's Deployment and Service were recreated under the longer name, its
// Succeeded Job ran again, and its broker then asked for akri.sh/<longer name>, which its own
// device plugin did not serve. Names are now sticky: only the newcomer gets the longer name,
// and its agent learns it from the renderer's publication.
func TestFailClosedDigestCollisionRenamesNothing(t *testing.T) {
	s := newSignedLoop(t)
	seen := map[string]string{}
	var a, b string
	for i := 0; a == ""; i++ {
		id := fmt.Sprintf("cam-%d", i)
		d := api.AkriDigest(api.DeviceKey{ID: id, Shared: true}, 3)
		if other, ok := seen[d]; ok {
			a, b = other, id
		}
		seen[d] = id
	}
	s.nodes["edge-a"].set("default/akri-debug-echo", "shared:"+a)
	s.discover()
	s.renderTrust()
	victim := s.podsOn("edge-a")
	require.Len(t, victim, 1)
	victimPod := s.renderedFile(victim[0])

	// edge-b, whose key was stolen, reports the colliding device; its agent serves its plugin.
	plugin := &pluginSink{}
	store, _ := s.refs.agent("edge-b", gitsync.WithSigner(s.keys["node:edge-b"]), gitsync.WithOwnHistory())
	attacker, err := agent.New(agent.Options{Node: "edge-b", Store: store, Configurations: s.refs.published(s.allowed),
		Handlers: agent.Builtin{"debugEcho": s.nodes["edge-b"]}, Log: logr.Discard(), Devices: plugin})
	require.NoError(t, err)
	s.nodes["edge-b"].set("default/akri-debug-echo", "shared:"+b)
	_, err = attacker.Sync(t.Context())
	require.NoError(t, err)
	out := s.renderTrust()
	require.Equal(t, victim, s.podsOn("edge-a"), "the victim's broker keeps its name: %s", s.plan(out))
	require.Equal(t, victimPod, s.renderedFile(victim[0]), "and its content")
	require.NotContains(t, s.plan(out), "removed")
	newcomer := s.podsOn("edge-b")
	require.Len(t, newcomer, 1)
	long := strings.TrimSuffix(strings.TrimPrefix(path.Base(newcomer[0]), "deployment-edge-b-"), ".yaml")
	require.Len(t, long, len("akri-debug-echo-")+12, "the newcomer has the longer digest")

	// The newcomer's agent, which sees only its own device, serves the name the renderer gave.
	_, err = attacker.Sync(t.Context())
	require.NoError(t, err)
	require.Contains(t, plugin.names(), long)
	require.Contains(t, s.renderedFile(newcomer[0]), "akri.sh/"+long+": \"1\"")
}

// With spec.clusters, a shared device's id may be seen in several clusters (a camera's private
// address, at every site) and collide in one of them only. The longer digests that cluster
// gives are its own: another cluster renders the device by Akri's digest, and its nodes' agents
// serve that name, not the colliding cluster's (their brokers would otherwise ask for a
// resource no device plugin serves).
func TestDigestCollisionInOneClusterRenamesNothingInAnother(t *testing.T) {
	s := newSignedLoop(t)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{api.SettingsPath: "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n" +
		"  clusters:\n  - name: site-a\n    nodes: [edge-a]\n  - name: site-b\n    nodes: [edge-b]\n"}, nil, "two sites")
	s.renderer.AllowDeletions = true // the one-cluster layout of the first render moves under the clusters'
	s.renderTrust()
	s.renderer.AllowDeletions = false
	a, b := collidingIDs()
	s.nodes["edge-a"].set("default/akri-debug-echo", "shared:"+a, "shared:"+b)
	s.nodes["edge-b"].set("default/akri-debug-echo", "shared:"+a)
	plugin := &pluginSink{}
	store, _ := s.refs.agent("edge-b", gitsync.WithSigner(s.keys["node:edge-b"]), gitsync.WithOwnHistory())
	edgeB, err := agent.New(agent.Options{Node: "edge-b", Store: store, Configurations: s.refs.published(s.allowed),
		Handlers: agent.Builtin{"debugEcho": s.nodes["edge-b"]}, Log: logr.Discard(), Devices: plugin})
	require.NoError(t, err)
	s.agents["edge-b"] = edgeB
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Errors)

	// site-a gives the colliding pair longer digests; site-b names a by Akri's.
	siteA := s.podsOn("edge-a")
	require.Len(t, siteA, 2, s.plan(out))
	for _, p := range siteA {
		require.True(t, strings.HasPrefix(p, "rendered/site-a/"), p)
		require.Len(t, strings.TrimSuffix(strings.TrimPrefix(path.Base(p), "deployment-edge-a-"), ".yaml"), len("akri-debug-echo-")+12, p)
	}
	siteB := s.podsOn("edge-b")
	require.Len(t, siteB, 1)
	short := strings.TrimSuffix(strings.TrimPrefix(path.Base(siteB[0]), "deployment-edge-b-"), ".yaml")
	require.Equal(t, "akri-debug-echo-"+api.AkriDigest(api.DeviceKey{ID: a, Shared: true}, 3), short)
	meta := render.ParseMetadata([]byte(s.renderedFile(render.MetadataPath)))
	require.Len(t, meta.InstanceDigests["default/akri-debug-echo"], 2)
	for _, d := range meta.InstanceDigests["default/akri-debug-echo"] {
		require.Equal(t, "site-a", d.Cluster, "%+v", d)
	}

	// edge-b's agent, having read the publication with site-a's digests, serves site-b's name.
	_, err = edgeB.Sync(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{short}, plugin.names())
	require.Contains(t, s.renderedFile(siteB[0]), "akri.sh/"+short+": \"1\"")
}

// Finding 10: a one-shot render after gitbroker/rendered was deleted started from nothing: it
// accepted a replayed older node commit, forgot every JobRecord and queued a Succeeded Job
// again. A renderer that published before refuses to start over; the render daemon, which
// remembers what it pushed, repairs the branch.
func TestFailClosedDeletedRenderedBranchIsNotAFreshStart(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	old := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	s.renderTrust()

	s.srv.SetRef(verify.RenderedBranch, "")
	s.srv.SetRef(verify.InventoryBranch("edge-b"), old)
	_, err := s.refs.renderer(s.keys["renderer"]).Once(t.Context())
	require.ErrorContains(t, err, "gitbroker/rendered is gone, but this renderer published")
	require.Empty(t, s.rendered().Head(), "nothing is rendered from nothing")
	code, _, stderr := gitbroker(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	require.Equal(t, exitRefused, code, stderr)

	// The daemon that pushed last renders over the gap from what it pushed; the replay stays
	// refused.
	out := s.renderTrust()
	s.untrusted(out, verify.InventoryBranch("edge-b"), "does not descend from")
	require.True(t, s.inventoryWith("edge-b", "baz1"))
}

// peakRSS runs the real gitbroker binary with args and returns its exit code, output and peak
// resident memory: the high-water mark of its own address space (VmHWM), read while it runs.
// (getrusage's maxrss would not do: Linux carries the parent's high-water mark across fork and
// exec, so a child of this test would report the test's.)
// The process runs as deploy/ runs it: with GOMEMLIMIT at 90% of its container's memory limit,
// which the binaries set themselves from their cgroup (automemlimit), for "render" the renderer's
// and for "agent" the agent's.
func peakRSS(t *testing.T, args ...string) (int, string, int64) {
	t.Helper()
	var out syncBuffer
	cmd := exec.Command(binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if w, ok := map[string]string{"render": "../../deploy/renderer/deployment.yaml", "agent": "../../deploy/agent/daemonset.yaml"}[args[0]]; ok {
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMEMLIMIT=%d", deployMemoryLimit(t, w)/10*9))
	}
	require.NoError(t, cmd.Start())
	var peak int64
	read := func() {
		if p, err := procmem.Peak(cmd.Process.Pid); err == nil {
			peak = max(peak, p)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(5 * time.Millisecond):
			read()
		}
	}
	require.Positive(t, peak, "the process's memory was never read")
	return cmd.ProcessState.ExitCode(), out.String(), peak
}

// deployMemoryLimit reads the memory limit of the one container of a deploy/ workload.
func deployMemoryLimit(t *testing.T, path string) int64 {
	t.Helper()
	limit, err := procmem.DeployLimit(path)
	require.NoError(t, err)
	return limit
}

// Finding 2, measured on the real binaries: nine refs under gitbroker/inventory/ holding a
// 62 MB blob of zeros each (a few hundred KB on the wire) took the renderer to 1,157 MB (its
// deploy/ limit is 1Gi), and two such blobs on gitbroker/configurations an agent to 437 MB
// (limit 128Mi). Each process now stays inside its limit.
func TestFailClosedWritersStayInsideTheirMemoryLimits(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	zeros := strings.Repeat("\x00", 62<<20)
	for i := range 9 {
		ref := verify.InventoryBranch(fmt.Sprintf("bomb-%d", i))
		s.srv.On(ref).Commit(map[string]string{api.InventoryPath(fmt.Sprintf("bomb-%d", i)): zeros + fmt.Sprint(i)}, nil, "zeros")
	}
	s.srv.On(verify.ConfigurationsBranch).Commit(map[string]string{"configurations/a.yaml": zeros + "a", "configurations/b.yaml": zeros + "b"}, nil, "zeros")

	code, out, rss := peakRSS(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	t.Logf("renderer: exit %d, peak RSS %d MiB", code, rss>>20)
	require.Contains(t, []int{exitOK, exitRefused}, code, out)
	require.Less(t, rss, int64(1<<30), "the renderer stays inside its deploy/ limit (1Gi)")

	pinned := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(pinned, []byte(s.allowed), 0o644))
	// The render above put the publication back; plant the zeros again on top.
	s.srv.On(verify.ConfigurationsBranch).Commit(map[string]string{"configurations/a.yaml": zeros + "c", "configurations/b.yaml": zeros + "d"}, nil, "zeros again")
	code, out, rss = peakRSS(t, "agent", "--allow-debug-echo", "--git", s.srv.URL(), "--node", "edge-a", "--once", "--signing-key", s.keyFiles["node:edge-a"],
		"--renderer-key", pinned, "--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	t.Logf("agent: exit %d, peak RSS %d MiB", code, rss>>20)
	require.Less(t, rss, int64(128<<20), "the agent stays inside its deploy/ limit (128Mi): %s", out)
}

// A render daemon restarted after gitbroker/rendered was deleted or moved back read the commit
// its Lease names from the branch only, which no longer reached it, and refused to render until
// a person pushed that commit back. It now asks the server for the commit by hash (git keeps it
// until its gc prunes it) and renders over the gap from it, taking no replayed writer commit.
func TestFailClosedRestartedRendererRepairsItsBranch(t *testing.T) {
	for _, move := range []string{"deleted", "moved back"} {
		t.Run(strings.ReplaceAll(move, " ", "-"), func(t *testing.T) {
			s := newSignedLoop(t)
			gitsynctest.Git(t, s.srv.Bare(), "config", "uploadpack.allowAnySHA1InWant", "true")
			s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
			s.discover()
			s.renderTrust()
			older, replay := s.rendered().Head(), s.srv.On(verify.InventoryBranch("edge-b")).Head()
			s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
			s.discover()
			s.renderTrust()
			pushed := s.renderer.Pushed()
			require.Equal(t, pushed, s.rendered().Head())

			// The attacker moves the branch and replays edge-b's older commit while the daemon
			// is down; the new process knows only its Lease's commit.
			if move == "deleted" {
				s.srv.SetRef(verify.RenderedBranch, "")
			} else {
				s.srv.SetRef(verify.RenderedBranch, older)
			}
			s.srv.SetRef(verify.InventoryBranch("edge-b"), replay)
			s.renderer = s.refs.renderer(s.keys["renderer"])
			s.renderer.StartFrom(pushed)
			out := s.renderTrust()
			s.untrusted(out, verify.RenderedBranch, "it is rendered over from "+pushed[:7])
			s.untrusted(out, verify.InventoryBranch("edge-b"), "does not descend from")
			require.True(t, s.inventoryWith("edge-b", "baz1"), "the replayed inventory was taken")
			head := s.rendered().Head()
			changed := strings.Fields(gitsynctest.Git(t, s.srv.Bare(), "diff", "--name-only", pushed, head))
			require.Subset(t, []string{render.MetadataPath}, changed, "the repair renders what was pushed last")
			msg, err := s.srv.VerifyCommit(head, s.allowed)
			require.NoError(t, err, msg)

			// edge-b's honest agent lands its next change.
			s.nodes["edge-b"].set("default/akri-debug-echo", "baz2")
			s.discover()
			s.renderTrust()
			require.True(t, s.inventoryWith("edge-b", "baz2"))
		})
	}
}

// A server that sends no commit a branch does not reach (git's default, and some hosts') leaves
// the restarted daemon refusing, as before, and saying what would let it repair the branch.
func TestFailClosedRestartedRendererSaysWhatTheServerLacks(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	pushed := s.renderer.Pushed()
	s.srv.SetRef(verify.RenderedBranch, "")
	s.renderer = s.refs.renderer(s.keys["renderer"])
	s.renderer.StartFrom(pushed)
	_, err := s.renderer.Once(t.Context())
	require.ErrorContains(t, err, "uploadpack.allowAnySHA1InWant")
	require.ErrorContains(t, err, "push that commit back")
	require.Empty(t, s.rendered().Head(), "nothing is rendered from less")
}

// denseInventory is a NodeInventory of node just under api.MaxInventorySize made of one-line
// flow-style devices: the most YAML nodes a file of that size can hold.
func denseInventory(node string) string {
	var b strings.Builder
	b.WriteString("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: " + node + "\nspec:\n  configurations:\n  - name: akri-debug-echo\n    devices:\n")
	for i := 0; b.Len() < api.MaxInventorySize-100; i++ {
		b.WriteString("    - {id: a}\n")
	}
	return b.String()
}

// Found by the adversary's real binaries: an inventory under the size limit but made of 300,000
// one-line devices took 375 MiB to parse; edge-a's agent reading its own ref (signed with its
// key) went to 524 MiB against its 128Mi limit, so it would be OOM-killed on every start, and
// the renderer from 55 to 475 MiB, listing 300,000 errors. An inventory's lines and flow entries
// are now counted before it is parsed, and its errors listed up to a bound.
func TestFailClosedDenseInventoryIsRefusedBeforeItIsParsed(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	code, out, baseline := peakRSS(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	require.Contains(t, []int{exitOK, exitRefused}, code, out)

	s.forge("node:edge-a", verify.InventoryBranch("edge-a"), map[string][]byte{api.InventoryPath("edge-a"): []byte(denseInventory("edge-a"))})
	code, out, rss := peakRSS(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
	t.Logf("renderer: exit %d, peak RSS %d MiB, %d MiB before the inventory", code, rss>>20, baseline>>20)
	head := out[:min(len(out), 2000)]
	require.True(t, strings.Contains(out, "inventory/edge-a.yaml:1: inventory has"), "the inventory is refused before it is parsed:\n%s", head)
	require.Less(t, strings.Count(out, "\n"), 200, "the errors of one inventory are bounded:\n%s", head)
	require.Less(t, rss-baseline, int64(128<<20), "one node's inventory costs the renderer at most what an agent may use in all")

	pinned := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(pinned, []byte(s.allowed), 0o644))
	code, out, rss = peakRSS(t, "agent", "--allow-debug-echo", "--git", s.srv.URL(), "--node", "edge-a", "--once", "--signing-key", s.keyFiles["node:edge-a"],
		"--renderer-key", pinned, "--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	t.Logf("agent: exit %d, peak RSS %d MiB", code, rss>>20)
	require.Equal(t, exitOK, code, out)
	require.Less(t, rss, int64(128<<20), "the agent stays inside its deploy/ limit (128Mi) and writes its inventory again")
	inv, _ := s.srv.On(verify.InventoryBranch("edge-a")).File(api.InventoryPath("edge-a"))
	require.NotContains(t, inv, "{id: a}", "the agent wrote what it discovers over the planted inventory")
}

// Found by e2e's TestRecorderStaysInsideItsMemoryLimit: a writer that starts with its ref gone
// reads the tip the renderer accepted from a branch anyone may push to (the render metadata on
// gitbroker/rendered then, its accepted-tips shard now), and parsed the whole file: 6 MiB of
// dense YAML there took the recorder to 531 MiB (limit 256Mi). Writers now read it only at a
// head the renderer signed, and find their one line there without parsing the file; an agent
// restarted under such a head (an unsigned one here: it is fetched, and refused) stays inside
// its limit.
func TestFailClosedDenseAcceptedTipsAreNotParsed(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()
	dense := "writers:\n" + strings.Repeat("  - {a: b}\n", (6<<20)/11)
	ref := verify.InventoryBranch("edge-a")
	s.srv.On(verify.RenderedBranch).Commit(map[string]string{render.MetadataPath: dense}, nil, "dense metadata")
	s.srv.On(api.AcceptedBranch(ref)).Commit(map[string]string{api.AcceptedFile(api.AcceptedShard(ref)): dense}, nil, "dense tips")
	s.srv.SetRef(verify.InventoryBranch("edge-a"), "")
	pinned := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(pinned, []byte(s.allowed), 0o644))
	code, out, rss := peakRSS(t, "agent", "--allow-debug-echo", "--git", s.srv.URL(), "--node", "edge-a", "--once", "--signing-key", s.keyFiles["node:edge-a"],
		"--renderer-key", pinned, "--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	t.Logf("agent: exit %d, peak RSS %d MiB", code, rss>>20)
	require.Equal(t, exitOK, code, out)
	require.Less(t, rss, int64(128<<20), "the agent stays inside its deploy/ limit (128Mi)")
}

// A writer restarted with its ref moved back (or gone) names the tip the renderer accepted
// last, which anyone who can push where it is read from could write. Ways to make it name a tip
// the renderer will never take again: an unsigned commit on top naming the node's old commit,
// or the renderer's own older commit put back as the head, on gitbroker/rendered (where it was
// read from before its accepted-tips shard) or on that shard's branch, or the shard deleted.
// Each froze the node for good: the writer read the tip once and built on it for ever. The
// writer now reads its shard only at a commit of that shard the pinned renderer key signed,
// and reads it again until it sees its line accepted.
func TestFailClosedForgedRenderMetadataDoesNotStrandAWriter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		forge func(s *signedLoop, oldRender, oldShard, ref, old, tip string)
	}{
		{"unsigned metadata on top", func(s *signedLoop, _, _, _, old, tip string) {
			meta, ok := s.srv.On(verify.RenderedBranch).File(render.MetadataPath)
			require.True(t, ok)
			require.Contains(t, meta, tip)
			s.srv.On(verify.RenderedBranch).Commit(map[string]string{render.MetadataPath: strings.ReplaceAll(meta, tip, old)}, nil, "render metadata")
		}},
		{"older render put back", func(s *signedLoop, oldRender, _, _, _, _ string) {
			s.srv.SetRef(verify.RenderedBranch, oldRender)
		}},
		// What the restarted agent reads: the accepted-tips shard of its ref.
		{"unsigned accepted tip on top", func(s *signedLoop, _, _, ref, old, tip string) {
			shard, file := api.AcceptedBranch(ref), api.AcceptedFile(api.AcceptedShard(ref))
			tips, ok := s.srv.On(shard).File(file)
			require.True(t, ok)
			require.Contains(t, tips, ref+": "+tip)
			s.srv.On(shard).Commit(map[string]string{file: strings.ReplaceAll(tips, tip, old)}, nil, "accepted tips")
		}},
		{"older accepted tip put back", func(s *signedLoop, _, oldShard, ref, _, _ string) {
			s.srv.SetRef(api.AcceptedBranch(ref), oldShard)
		}},
		{"accepted tip deleted", func(s *signedLoop, _, _, ref, _, _ string) {
			s.srv.SetRef(api.AcceptedBranch(ref), "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSignedLoop(t)
			ref := verify.InventoryBranch("edge-b")
			s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
			s.discover()
			s.renderTrust()
			oldShard := s.srv.On(api.AcceptedBranch(ref)).Head()
			require.NotEmpty(t, oldShard, "the render moved the ref's accepted-tips shard")
			old, oldRender := s.twoRenders()
			tip := s.srv.On(ref).Head()

			// The node's ref moved back to its old commit and the metadata made to agree with
			// it, while the agent restarts.
			s.srv.SetRef(ref, old)
			tc.forge(s, oldRender, oldShard, ref, old, tip)
			restarted := s.startAgent("edge-b", s.keys["node:edge-b"], s.nodes["edge-b"], 0, s.refs.acceptedTip(s.allowed, ref)...)
			require.True(t, s.landsWithin(restarted, 4), "the node's change lands within a few cycles once the renderer has put its branch back")
			require.NotContains(t, s.brokersText(), "baz1")

			// The node's old commit stays refused.
			s.srv.SetRef(ref, old)
			out := s.renderTrust()
			s.untrusted(out, ref, "does not descend from")
			require.Contains(t, s.brokersText(), "baz2")
		})
	}
}

// A restarted writer read the tip the renderer accepted last from the head of gitbroker/rendered,
// whole: 21.5 MB at fleet-10k, 215 MB at fleet-100k, far above what an agent may fetch (24 MiB).
// Above about ten thousand devices a node whose ref was moved back stayed frozen until a person
// stepped in. It now reads only its ref's accepted-tips shard, a few kilobytes at any fleet size:
// here the rendered tree is larger than the restarted agent may fetch, and it recovers anyway.
func TestFailClosedRecoveryReadsOnlyItsShard(t *testing.T) {
	s := newSignedLoop(t)
	ref := verify.InventoryBranch("edge-b")
	var many []string
	for i := range 600 {
		many = append(many, fmt.Sprintf("camera-%04d", i))
	}
	s.nodes["edge-a"].set("default/akri-debug-echo", many...)
	old, _ := s.twoRenders()

	const limit = 64 << 10
	limits := gitsync.WithLimits(limit, 0)
	_, err := s.refs.open(verify.RenderedBranch, limits).Snapshot(t.Context())
	require.ErrorIs(t, err, gitsync.ErrTooLarge, "the rendered tree is larger than the restarted agent may fetch")

	s.srv.SetRef(ref, old)
	restarted := s.startAgent("edge-b", s.keys["node:edge-b"], s.nodes["edge-b"], 0, append(s.refs.acceptedTip(s.allowed, ref, limits), limits)...)
	require.True(t, s.landsWithin(restarted, 4), "the node's change lands within a few cycles")
	require.NotContains(t, s.brokersText(), "baz1")
}

// A signing recorder, as a signing agent, takes the renderer's key: without it, it could not
// tell the render metadata the renderer wrote from any other, and refuses to start.
func TestFailClosedSigningRecorderNeedsTheRendererKey(t *testing.T) {
	key := filepath.Join(t.TempDir(), "recorder")
	_, _, err := trust.LoadOrCreateSigner(key, trust.PrincipalRecorder)
	require.NoError(t, err)
	code, _, stderr := gitbroker(t, "record", "--git", "https://git.example.org/plant/edge.git", "--signing-key", key)
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stderr, "--signing-key needs --renderer-key")

	empty := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(empty, []byte("alice@example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDp8PHnNGaEBDfPjX0FqAvuLMMkcTp1Y6W6P1r9Vq5Vb\n"), 0o644))
	code, _, stderr = gitbroker(t, "record", "--git", "https://git.example.org/plant/edge.git", "--signing-key", key, "--renderer-key", empty)
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stderr, "names no key for principal renderer")
}

// twoRenders has edge-b report baz0 and then baz1, each rendered, and returns edge-b's commit
// with baz0 (a commit of its own to move its ref back to) and the render of it.
func (s *signedLoop) twoRenders() (old, oldRender string) {
	s.t.Helper()
	ref := verify.InventoryBranch("edge-b")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	old, oldRender = s.srv.On(ref).Head(), s.srv.On(verify.RenderedBranch).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	s.renderTrust()
	require.Contains(s.t, s.brokersText(), "baz1")
	return old, oldRender
}

// landsWithin has a restarted edge-b agent report baz2, and reports whether its broker is
// rendered within cycles of its sync and a render.
func (s *signedLoop) landsWithin(restarted *agent.Agent, cycles int) bool {
	s.t.Helper()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz2")
	for cycle := 0; cycle < cycles; cycle++ {
		_, err := restarted.Sync(s.t.Context())
		require.NoError(s.t, err)
		out := s.renderTrust()
		s.t.Logf("cycle %d: rendered %s, edge-b %s\n%s", cycle, s.srv.On(verify.RenderedBranch).Head(), s.srv.On(verify.InventoryBranch("edge-b")).Head(), s.plan(out))
		if strings.Contains(s.brokersText(), "baz2") {
			return true
		}
	}
	return false
}
