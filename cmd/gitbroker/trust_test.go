package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/recorder"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// signedLoop is the write side with every writer signing, and .gitbroker/allowed_signers on
// main enrolling them: two nodes, the recorder, the renderer and a person.
type signedLoop struct {
	*loop
	keys     map[string]*trust.Signer // by principal
	keyFiles map[string]string
	allowed  string
	refs     layout
	// stopRecorder stops the recorder startRecorder started.
	stopRecorder func()
	// recCluster is the cluster whose recorder startRecorder starts ("": the one-cluster
	// recorder of gitbroker/status), signing as recorder:<cluster>.
	recCluster string
}

func newSignedLoop(t *testing.T) *signedLoop {
	t.Helper()
	_, err := exec.LookPath("ssh-keygen")
	require.NoError(t, err, "git signs and verifies SSH signatures with ssh-keygen: apt-get install openssh-client (.ci/run does)")
	demo, err := readFS(fixtures.Demo())
	require.NoError(t, err)
	files := map[string]string{}
	for p, b := range demo {
		if api.IsConfigurationPath(p) {
			files[p] = string(b)
		}
	}
	s := &signedLoop{keys: map[string]*trust.Signer{}, keyFiles: map[string]string{}}
	dir := t.TempDir()
	for _, p := range []string{"node:edge-a", "node:edge-b", "recorder", "renderer", "alice@example.com"} {
		f := filepath.Join(dir, strings.ReplaceAll(p, ":", "-"))
		k, _, err := trust.LoadOrCreateSigner(f, p)
		require.NoError(t, err)
		s.keys[p], s.keyFiles[p] = k, f
		s.allowed += k.AllowedSignersLine(p) + "\n"
	}
	srv := gitsynctest.NewServer(t, "main", files)
	// The person enrolls everyone in a signed commit.
	srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.AllowedSignersPath: s.allowed}, nil, "enroll the writers")

	l := &loop{t: t, srv: srv, client: fake.NewClientset(), agents: map[string]*agent.Agent{}, nodes: map[string]*nodeDevices{}}
	backoff := gitsync.WithBackoff(gitsync.Backoff{Initial: time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 100, MaxElapsed: time.Minute})
	s.refs = newLayout(t, srv.URL(), backoff)
	l.renderer = s.refs.renderer(s.keys["renderer"])
	for _, node := range []string{"edge-a", "edge-b"} {
		l.nodes[node] = &nodeDevices{devices: map[string][]api.Device{}}
		store, _ := s.refs.agent(node, gitsync.WithSigner(s.keys["node:"+node]), gitsync.WithOwnHistory())
		a, err := agent.New(agent.Options{Node: node, Store: store, Configurations: s.refs.published(s.allowed), Handlers: agent.Builtin{"debugEcho": l.nodes[node]},
			Log: logr.Discard(), SharedGracePeriod: 0, LocalGracePeriod: 0})
		require.NoError(t, err)
		l.agents[node] = a
	}
	s.loop = l
	s.startRecorder()
	t.Cleanup(func() { s.stopRecorder() })
	// The agents read the Configurations the renderer verified: its first render publishes them.
	s.renderTrust()
	return s
}

// startRecorder starts the recorder as a restarted one is: nothing in memory, signing with its
// key, keeping to its own history, and naming the tip the renderer accepted should it start a
// new line.
func (s *signedLoop) startRecorder() { s.startRecorderRepairing(-1) }

// startRecorderRepairing starts the recorder as startRecorder does, putting its ref back every
// repair (never when negative).
func (s *signedLoop) startRecorderRepairing(repair time.Duration) {
	var store gitsync.Store
	if c := s.recCluster; c != "" {
		ref := api.ClusterStatusBranch(c)
		store = recorder.ForCluster(s.refs.open(ref, append([]gitsync.Option{gitsync.WithCreateBranch(), gitsync.WithSigner(s.keys["recorder:"+c]), gitsync.WithOwnHistory()},
			s.refs.acceptedTip(s.allowed, ref)...)...), c)
	} else {
		store = s.refs.recorder(append([]gitsync.Option{gitsync.WithSigner(s.keys["recorder"]), gitsync.WithOwnHistory()},
			s.refs.acceptedTip(s.allowed, verify.StatusBranch)...)...)
	}
	rec, err := recorder.New(recorder.Options{Client: s.client, Store: store,
		Batch: 10 * time.Millisecond, Retry: 10 * time.Millisecond, Repair: repair, Log: logr.Discard()})
	require.NoError(s.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	s.rec = rec
	var once sync.Once
	s.stopRecorder = func() { once.Do(func() { cancel(); require.NoError(s.t, <-done) }) }
}

// as returns a writer holding principal's key and the shared credential, writing branch.
func (s *signedLoop) as(principal, branch string) *gitsync.Repository {
	return s.refs.open(branch, gitsync.WithSigner(s.keys[principal]), gitsync.WithCreateBranch())
}

// forge commits files on branch with principal's key, owning exactly those paths.
func (s *signedLoop) forge(principal, branch string, files map[string][]byte, owned ...string) string {
	s.t.Helper()
	if owned == nil {
		for p := range files {
			owned = append(owned, p)
		}
	}
	res, err := s.as(principal, branch).Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Owned: owned, Files: files, Message: "forged by " + principal,
			Author: gitsync.Signature{Name: "mallory", Email: "mallory@example.com", When: time.Now()}}, nil
	})
	require.NoError(s.t, err)
	return res.Commit
}

// renderTrust renders once and returns the outcome; untrusted inputs are not an error here.
func (s *signedLoop) renderTrust() renderer.Outcome {
	s.t.Helper()
	out, err := s.renderer.Once(context.Background())
	if err != nil {
		require.ErrorIs(s.t, err, gitsync.ErrNoChanges)
	}
	require.Empty(s.t, out.Result.Errors)
	return out
}

func (s *signedLoop) plan(out renderer.Outcome) string {
	var b bytes.Buffer
	out.Result.Plan.WriteText(&b)
	return b.String()
}

func (s *signedLoop) rendered() *gitsynctest.Server { return s.srv.On(verify.RenderedBranch) }

func (s *signedLoop) renderedFile(p string) string {
	c, _ := s.rendered().File(p)
	return c
}

// With edge-a's key and the shared git credential, an attacker tries everything the trust
// issue lists. None of it is rendered; each is reported; what was verified before stays.
func TestStolenNodeCredential(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.nodes["edge-a"].set("plant/plc-firmware", "shared:plc-1")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.plan(out), "Inputs: verified: every commit on main signed by a person")
	require.Len(t, s.apply(), 1, "plc-1's firmware Job")
	firmware := s.jobs(render.RenderedDir, "plc-firmware")
	require.Len(t, firmware, 1)
	edgeB := s.renderedFile(api.InventoryPath("edge-b"))
	require.Contains(t, edgeB, "baz0")

	// git's own verify-commit accepts the renderer's commit for renderer, and each node's.
	msg, err := s.srv.VerifyCommit(s.rendered().Head(), s.allowed)
	require.NoError(t, err, msg)
	require.Contains(t, msg, `Good "git" signature for renderer`)
	msg, err = s.srv.VerifyCommit(s.srv.On(verify.InventoryBranch("edge-b")).Head(), s.allowed)
	require.NoError(t, err, msg)
	require.Contains(t, msg, `Good "git" signature for node:edge-b`)

	// 1. Writing edge-b's inventory with edge-a's key.
	goodB := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.forge("node:edge-a", verify.InventoryBranch("edge-b"), map[string][]byte{
		api.InventoryPath("edge-b"): []byte(strings.ReplaceAll(edgeB, "baz0", "evil0")),
	})
	out = s.renderTrust()
	s.untrusted(out, verify.InventoryBranch("edge-b"), "not by node:edge-b")
	require.Equal(t, edgeB, s.renderedFile(api.InventoryPath("edge-b")), "edge-b's verified inventory is kept")
	require.False(t, s.has("evil0"))
	require.Contains(t, s.plan(out), "untrusted: gitbroker/inventory/edge-b")
	s.srv.SetRef(verify.InventoryBranch("edge-b"), goodB)

	// 2. Replaying an old edge-b commit after edge-b moved on.
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.True(t, s.has("baz1") || strings.Contains(s.renderedFile(api.InventoryPath("edge-b")), "baz1"))
	newB := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.srv.SetRef(verify.InventoryBranch("edge-b"), goodB)
	out = s.renderTrust()
	s.untrusted(out, verify.InventoryBranch("edge-b"), "does not descend from "+newB[:12])
	require.Contains(t, s.renderedFile(api.InventoryPath("edge-b")), "baz1", "the replay is not rendered")
	s.srv.SetRef(verify.InventoryBranch("edge-b"), newB)

	// 3. Rolling edge-a's own ref back.
	oldA := s.srv.On(verify.InventoryBranch("edge-a")).Head()
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar1")
	s.discover()
	s.renderTrust()
	newA := s.srv.On(verify.InventoryBranch("edge-a")).Head()
	s.srv.SetRef(verify.InventoryBranch("edge-a"), oldA)
	out = s.renderTrust()
	s.untrusted(out, verify.InventoryBranch("edge-a"), "a replay or a rollback")
	require.Contains(t, s.renderedFile(api.InventoryPath("edge-a")), "bar1")
	s.srv.SetRef(verify.InventoryBranch("edge-a"), newA)

	// 4. Forging and replaying JobRecords: one signed by edge-a retiring the running Job, one
	// signed by the recorder's ref rolled back, one naming a Job that was never rendered.
	job := strings.TrimSuffix(firmware[0], ".yaml")
	var instance string
	for _, p := range s.rendered().Files() {
		if strings.HasSuffix(p, "/job-"+job+".yaml") {
			_, rest, _ := strings.Cut(s.renderedFile(p), "akri.sh/instance: ")
			instance, _, _ = strings.Cut(rest, "\n")
		}
	}
	require.NotEmpty(t, instance)
	record := []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: " + job + "\n  namespace: plant\nspec:\n  configuration: plc-firmware\n  instance: " + instance + "\n  deviceID: plc-1\n  outcome: Succeeded\n  succeeded: 1\n  failed: 0\n")
	s.forge("node:edge-a", verify.StatusBranch, map[string][]byte{api.JobRecordPath("plant", job): record})
	out = s.renderTrust()
	s.untrusted(out, verify.StatusBranch, "not by recorder")
	require.Equal(t, firmware, s.jobs(render.RenderedDir, "plc-firmware"), "the running Job is not retired by a forged record")
	s.srv.SetRef(verify.StatusBranch, "") // the recorder had written nothing yet
	never := strings.Replace(string(record), job, "plc-firmware-never-rendered", 1)
	s.forge("recorder", verify.StatusBranch, map[string][]byte{api.JobRecordPath("plant", "plc-firmware-never-rendered"): []byte(never)})
	out = s.renderTrust()
	found := false
	for _, u := range out.Result.Untrusted {
		found = found || strings.Contains(u, "was never rendered here")
	}
	require.True(t, found, s.plan(out))

	// The real record retires the Job.
	s.finish("plant", job, true)
	out = s.renderTrust()
	require.Contains(t, s.plan(out), job+" retired")
	statusTip := s.srv.On(verify.StatusBranch).Head()
	statusLog := s.srv.On(verify.StatusBranch).Log()
	s.srv.SetRef(verify.StatusBranch, statusLog[len(statusLog)-1].Hash)
	out = s.renderTrust()
	s.untrusted(out, verify.StatusBranch, "a replay or a rollback")
	s.srv.SetRef(verify.StatusBranch, statusTip)

	// 5. Committing a Configuration to the source branch with edge-a's key: rendering stops at
	// its parent, while nodes' changes still render.
	evil := strings.Replace(string(s.mustFile("configurations/akri-debug-echo.yaml")), "nginx:stable-alpine", "attacker/miner:latest", 1)
	bad := s.forge("node:edge-a", "main", map[string][]byte{"configurations/akri-debug-echo.yaml": []byte(evil)})
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz2")
	s.discover()
	out = s.renderTrust()
	s.untrusted(out, "main", "commit "+bad[:12]+" is not signed by a person")
	require.False(t, s.has("miner") || strings.Contains(s.brokersText(), "attacker/miner"), "the Configuration is not rendered")
	require.Contains(t, s.renderedFile(api.InventoryPath("edge-b")), "baz2", "nodes' changes still render on the trusted source")
	require.NotEqual(t, bad, out.Source)

	// 6. Planting files on gitbroker/rendered: a privileged Pod Flux would apply, and a file
	// outside rendered/. The next render drops them and commits over them.
	own := s.rendered().Head()
	s.forge("node:edge-a", verify.RenderedBranch, map[string][]byte{
		"rendered/default/akri-debug-echo/pod-planted.yaml": []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: planted\n  namespace: default\nspec:\n  hostPID: true\n  containers:\n  - name: x\n    image: attacker/root\n"),
		"planted.yaml": []byte("x: 1\n"),
	})
	out = s.renderTrust()
	s.untrusted(out, verify.RenderedBranch, "is not a render signed by this renderer")
	require.NotEmpty(t, out.Commit, "the render commits over the planted commit although nothing else changed")
	for _, p := range s.rendered().Files() {
		require.NotContains(t, p, "planted", "planted files are dropped")
	}
	ownFiles, _ := gitsynctest.Git(t, s.srv.Bare(), "ls-tree", "-r", "--name-only", own), ""
	require.Equal(t, strings.Fields(ownFiles), s.rendered().Files(), "the tree is the renderer's own again")
	msg, err = s.srv.VerifyCommit(s.rendered().Head(), s.allowed)
	require.NoError(t, err, msg)
}

func (s *signedLoop) mustFile(p string) []byte {
	s.t.Helper()
	c, ok := s.srv.File(p)
	require.True(s.t, ok, p)
	return []byte(c)
}

// podsText is every rendered Pod's content.
func (s *signedLoop) brokersText() string {
	var b strings.Builder
	for _, p := range s.rendered().Files() {
		if strings.Contains(p, "/deployment-") {
			c, _ := s.rendered().File(p)
			b.WriteString(c)
		}
	}
	return b.String()
}

// An unenrolled node is not rendered; a renderer without a key cannot render a verified
// repository; a repository that declares its branch protected needs no signed people's commits;
// and a rendered branch from before verification is adopted only when told.
func TestVerificationModes(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()

	// An agent whose key is not in allowed_signers.
	dir := t.TempDir()
	stranger, _, err := trust.LoadOrCreateSigner(filepath.Join(dir, "edge-c"), "node:edge-c")
	require.NoError(t, err)
	store, source := s.refs.agent("edge-c", gitsync.WithSigner(stranger))
	devices := &nodeDevices{devices: map[string][]api.Device{}}
	devices.set("default/akri-debug-echo", "cam0")
	c, err := agent.New(agent.Options{Node: "edge-c", Store: store, Configurations: source, Handlers: agent.Builtin{"debugEcho": devices}, Log: logr.Discard()})
	require.NoError(t, err)
	_, err = c.Sync(context.Background())
	require.NoError(t, err)
	out := s.renderTrust()
	require.Len(t, out.Result.Untrusted, 1, s.plan(out))
	require.Contains(t, out.Result.Untrusted[0], "gitbroker/inventory/edge-c: commit")
	require.Contains(t, out.Result.Untrusted[0], "does not list")
	require.NotContains(t, s.brokersText(), "cam0")
	require.Contains(t, s.brokersText(), "bar0")

	// Enrolling it (a person's signed commit) renders it.
	s.allowed += stranger.AllowedSignersLine("node:edge-c") + "\n"
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.AllowedSignersPath: s.allowed}, nil, "enroll edge-c")
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.brokersText(), "cam0")

	// Without its key the renderer refuses a verified repository.
	unsigned := s.refs.renderer(nil)
	_, err = unsigned.Once(context.Background())
	require.ErrorContains(t, err, "the renderer must sign: give it --signing-key")

	// A new renderer key finds none of its own commits: it starts only from an adopted one.
	other, _, err := trust.LoadOrCreateSigner(filepath.Join(dir, "renderer-2"), "renderer")
	require.NoError(t, err)
	rotated := s.refs.renderer(other)
	_, err = rotated.Once(context.Background())
	require.ErrorContains(t, err, "enroll the key as renderer there (gitbroker enroll --principal renderer), check the branch and give --adopt-rendered <commit>")
	// A node's key given to the renderer by mistake is named for what it is, and adopting is
	// not suggested: it would publish the Configurations signed by that node.
	mistaken := s.refs.renderer(s.keys["node:edge-a"])
	_, err = mistaken.Once(context.Background())
	require.ErrorContains(t, err, ".gitbroker/allowed_signers enrolls that key as node:edge-a, not as renderer: give the renderer the key enrolled as renderer")
	require.NotContains(t, err.Error(), "--adopt-rendered")
	rotated.Sources.Adopt = s.rendered().Head()
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar1")
	s.discover()
	_, err = rotated.Once(context.Background())
	require.NoError(t, err)
	require.Contains(t, s.brokersText(), "bar1")

	// A person's unsigned commit stops the source, unless the branch is declared protected
	// (by a signed commit).
	cfg := string(s.mustFile("configurations/akri-debug-echo.yaml"))
	unsignedCommit := s.srv.Commit(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:1.27-alpine", 1)}, nil, "unsigned bump")
	out, err = rotated.Once(context.Background())
	if err != nil {
		require.ErrorIs(t, err, gitsync.ErrNoChanges)
	}
	require.Contains(t, strings.Join(out.Result.Untrusted, "\n"), "main: commit "+unsignedCommit[:12]+" is not signed by a person")
	require.NotContains(t, s.brokersText(), "nginx:1.27-alpine")
	s.srv.SetRef("main", s.srv.Log()[1].Hash)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.TrustPath: "apiVersion: gitbroker.dev/v1alpha1\nkind: Trust\nspec:\n  sourceBranch: protected\n"}, nil, "the host protects main")
	s.srv.Commit(map[string]string{"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:1.27-alpine", 1)}, nil, "a reviewed merge")
	out, err = rotated.Once(context.Background())
	require.NoError(t, err)
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.plan(out), "declares the branch protected by its host")
	require.Contains(t, s.brokersText(), "nginx:1.27-alpine")
}

// pgpSigner signs commits with an OpenPGP key, as a git host signs the merges it makes.
type pgpSigner struct{ e *openpgp.Entity }

func (p pgpSigner) Sign(payload []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, p.e, bytes.NewReader(payload), nil); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func armoredPublic(t *testing.T, e *openpgp.Entity) string {
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	require.NoError(t, err)
	require.NoError(t, e.Serialize(w))
	require.NoError(t, w.Close())
	return b.String()
}

// A merge the git host signed with its OpenPGP key is a person's commit when the key is in
// .gitbroker/trusted-keys/; one signed by any other OpenPGP key stops the source.
func TestOpenPGPMerges(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.discover()
	s.renderTrust()

	host, err := openpgp.NewEntity("GitHub", "web-flow commit signing", "noreply@github.com", nil)
	require.NoError(t, err)
	other, err := openpgp.NewEntity("Mallory", "", "mallory@example.com", nil)
	require.NoError(t, err)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.TrustedKeysDir + "/github.asc": armoredPublic(t, host)}, nil, "trust the host's merges")
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))

	cfg := string(s.mustFile("configurations/akri-debug-echo.yaml"))
	merge := func(signer *openpgp.Entity, image string) string {
		r := s.refs.open("main", gitsync.WithSigner(pgpSigner{signer}))
		res, err := r.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
			return &gitsync.Change{Owned: []string{"configurations/akri-debug-echo.yaml"},
				Files:   map[string][]byte{"configurations/akri-debug-echo.yaml": []byte(strings.Replace(cfg, "nginx:stable-alpine", image, 1))},
				Message: "Merge pull request #7", Author: gitsync.Signature{Name: "GitHub", Email: "noreply@github.com", When: time.Now()}}, nil
		})
		require.NoError(t, err)
		return res.Commit
	}
	merge(host, "nginx:1.27-alpine")
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.brokersText(), "nginx:1.27-alpine")

	bad := merge(other, "attacker/miner:latest")
	out = s.renderTrust()
	require.Contains(t, strings.Join(out.Result.Untrusted, "\n"), "main: commit "+bad[:12]+" is not signed by a person: OpenPGP signature does not verify")
	require.NotContains(t, s.brokersText(), "attacker/miner")
}

// With --inventory-git the node refs live in a repository of their own: the agent needs no
// credential that writes the main one, and the renderer reads the nodes from there.
func TestInventoryRepository(t *testing.T) {
	main := gitsynctest.NewServer(t, "main", map[string]string{"configurations/echo.yaml": echoConfiguration})
	inv := gitsynctest.NewServer(t, "unused", nil, gitsynctest.WithAuth(agentUser, agentPassword))
	pw := filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(pw, []byte(agentPassword), 0o600))
	code, stdout, stderr := gitbroker(t, "agent", "--allow-debug-echo", "--git", main.URL(), "--inventory-git", inv.URL(),
		"--inventory-git-username", agentUser, "--inventory-git-password-file", pw,
		"--node", "edge-a", "--once", "--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "committed")
	require.ElementsMatch(t, []string{"main"}, main.Branches(), "nothing is written to the main repository")
	require.ElementsMatch(t, []string{verify.InventoryBranch("edge-a")}, inv.Branches())

	code, stdout, stderr = gitbroker(t, "render", "--git", main.URL(), "--inventory-git", inv.URL(),
		"--inventory-git-username", agentUser, "--inventory-git-password-file", pw)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Deployment edge-a-")
	file, ok := main.On(verify.RenderedBranch).File(api.InventoryPath("edge-a"))
	require.True(t, ok)
	require.Contains(t, file, "foo0")
	require.NotContains(t, stderr, agentPassword)
}

// The daemon takes a node's inventory from what it rendered while the node's tip has not moved,
// but it checks that tip's signature on every render: once a person takes the node's key out of
// allowed_signers, the unchanged tip is refused like a new one.
func TestUnmovedTipIsVerifiedAgain(t *testing.T) {
	s := newSignedLoop(t)
	rec := &changeRecorder{Store: s.renderer.Store}
	s.renderer.Store = rec
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.nodes["edge-b"].set("default/akri-debug-echo", "foo0")
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	s.nodes["edge-b"].set("default/akri-debug-echo", "foo1")
	s.discover()
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	require.Contains(t, s.brokersText(), "foo1")
	edgeA := s.srv.On(verify.InventoryBranch("edge-a")).Head()

	// The person takes edge-a's key out (edge-a's tip stays where it is) and edge-b reports
	// another device, so the render has something to commit.
	var kept []string
	for _, line := range strings.Split(strings.TrimSpace(s.allowed), "\n") {
		if !strings.HasPrefix(line, "node:edge-a ") {
			kept = append(kept, line)
		}
	}
	require.Len(t, kept, 4)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{verify.AllowedSignersPath: strings.Join(kept, "\n") + "\n"}, nil, "remove edge-a's key")
	s.nodes["edge-b"].set("default/akri-debug-echo", "foo2")
	s.discover()
	out = s.renderTrust()
	require.Equal(t, edgeA, s.srv.On(verify.InventoryBranch("edge-a")).Head())
	require.NotNil(t, rec.changes[len(rec.changes)-1].Edits, "the render was made on the renderer's own commit, held in memory")
	require.Len(t, out.Result.Untrusted, 1, s.plan(out))
	require.Contains(t, out.Result.Untrusted[0], "gitbroker/inventory/edge-a: commit "+edgeA[:12])
	require.Contains(t, s.brokersText(), "foo2")
}
