package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

func enrolled(t *testing.T, principal, pubFile string) string {
	t.Helper()
	pub, err := os.ReadFile(pubFile)
	require.NoError(t, err)
	return principal + " " + strings.Join(strings.Fields(string(pub))[:2], " ") + "\n"
}

// The agent makes its key on first start and signs as node:<node>; the renderer signs with the
// key it is given. git verify-commit accepts each for its own principal only.
func TestWritersSign(t *testing.T) {
	_, err := exec.LookPath("ssh-keygen")
	require.NoError(t, err, "git verifies SSH signatures with ssh-keygen: apt-get install openssh-client (.ci/run does)")
	srv := demoServer(t)
	rendererKey := filepath.Join(t.TempDir(), "renderer")
	out2, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", rendererKey).CombinedOutput()
	require.NoError(t, err, string(out2))
	renderer := enrolled(t, "renderer", rendererKey+".pub")
	pinned := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(pinned, []byte(renderer), 0o644))
	// A signing agent reads only what the renderer published: the renderer goes first.
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL(), "--signing-key", rendererKey)
	require.Equal(t, exitOK, code, stderr)
	key := filepath.Join(t.TempDir(), "state", "signing-key")
	code, _, stderr = gitbroker(t, "agent", "--allow-debug-echo", "--git", srv.URL(), "--node", "edge-z", "--once", "--signing-key", key,
		"--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitInvalid, code, "a signing agent needs the renderer's key pinned")
	require.Contains(t, stderr, "--signing-key needs --renderer-key")
	code, stdout, stderr := gitbroker(t, "agent", "--allow-debug-echo", "--git", srv.URL(), "--node", "edge-z", "--once", "--signing-key", key, "--renderer-key", pinned,
		"--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "committed")
	agentCommit := srv.On(verify.InventoryBranch("edge-z")).Head()
	node := enrolled(t, "node:edge-z", key+".pub")
	out, err := srv.VerifyCommit(agentCommit, node)
	require.NoError(t, err, out)
	require.Contains(t, out, `Good "git" signature for node:edge-z`)

	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--signing-key", rendererKey)
	require.Equal(t, exitOK, code, stderr)
	renderCommit := srv.On(verify.RenderedBranch).Head()
	require.NotEqual(t, agentCommit, renderCommit)
	out, err = srv.VerifyCommit(renderCommit, node+renderer)
	require.NoError(t, err, out)
	require.Contains(t, out, `Good "git" signature for renderer`)
	_, err = srv.VerifyCommit(renderCommit, node)
	require.Error(t, err, "the node's key did not sign the render")

	// The render published the Configurations it rendered for the agents, signed; an agent
	// given the renderer's key reads them from there.
	publication := srv.On(verify.ConfigurationsBranch)
	out, err = srv.VerifyCommit(publication.Head(), renderer)
	require.NoError(t, err, out)
	cfg, ok := publication.File("configurations/akri-debug-echo.yaml")
	require.True(t, ok, "the publication holds the Configurations")
	mainCfg, _ := srv.File("configurations/akri-debug-echo.yaml")
	require.Equal(t, mainCfg, cfg)
	agentWith := func(extra ...string) (int, string, string) {
		return gitbroker(t, append([]string{"agent", "--allow-debug-echo", "--git", srv.URL(), "--node", "edge-y", "--once", "--signing-key", filepath.Join(t.TempDir(), "key"),
			"--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none")}, extra...)...)
	}
	code, stdout, stderr = agentWith("--renderer-key", pinned)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "committed")
	// Another key pinned: the publication is refused, and with nothing accepted before, the
	// agent writes nothing.
	code, _, stderr = agentWith("--renderer-key", filepath.Join(t.TempDir(), "absent"))
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--renderer-key")
	require.NoError(t, os.WriteFile(pinned, []byte(node), 0o644))
	code, _, stderr = agentWith("--renderer-key", pinned)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "names no key for principal renderer")
	require.NoError(t, os.WriteFile(pinned, []byte(strings.Replace(node, "node:edge-z", "renderer", 1)), 0o644))
	code, stdout, _ = agentWith("--renderer-key", pinned)
	require.Equal(t, exitRefused, code, "the cycle fails (its log says why)")
	require.Empty(t, stdout)

	// A key that is not there is an error for the renderer: only agents make their own.
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--signing-key", filepath.Join(t.TempDir(), "missing"))
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--signing-key: reading signing key")
	code, _, stderr = gitbroker(t, "agent", "--allow-debug-echo", "--dir", t.TempDir(), "--node", "edge-z", "--once", "--signing-key", key)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "makes none")
}

// A renderer that signs with OpenPGP (for Argo CD) is verified like one with an SSH key: its
// own previous commit anchors the next render, another key's is not taken, and a plan, holding
// no key, knows it from .gitbroker/renderer-keys/. Agents keep SSH keys.
func TestOpenPGPRenderer(t *testing.T) {
	srv := demoServer(t)
	for _, n := range []string{"edge-a", "edge-b"} {
		srv.SetRef(verify.InventoryBranch(n), "") // unsigned: only edge-z is enrolled here
	}
	dir := t.TempDir()
	alice, _, err := trust.LoadOrCreateSigner(filepath.Join(dir, "alice"), "alice@example.com")
	require.NoError(t, err)
	nodeKey := filepath.Join(dir, "edge-z")
	node, _, err := trust.LoadOrCreateSigner(nodeKey, "node:edge-z")
	require.NoError(t, err)
	priv, pub, err := trust.NewOpenPGPKey("gitbroker renderer", "renderer@gitbroker.dev")
	require.NoError(t, err)
	rendererKey := filepath.Join(dir, "renderer.asc")
	require.NoError(t, os.WriteFile(rendererKey, priv, 0o600))
	srv.CommitSigned(filepath.Join(dir, "alice"), map[string]string{
		verify.AllowedSignersPath:                alice.AllowedSignersLine("alice@example.com") + "\n" + node.AllowedSignersLine("node:edge-z") + "\n",
		verify.RendererKeysDir + "/renderer.asc": string(pub),
	}, nil, "enroll edge-z and the OpenPGP renderer")
	// The agents pin the renderer's armored OpenPGP public key, as deploy/ does for Argo CD.
	pinned := filepath.Join(dir, "renderer.pub.asc")
	require.NoError(t, os.WriteFile(pinned, pub, 0o644))
	agent := func(avail string) {
		t.Helper()
		f := filepath.Join(dir, "avail")
		require.NoError(t, os.WriteFile(f, []byte(avail), 0o644))
		code, _, stderr := gitbroker(t, "agent", "--allow-debug-echo", "--git", srv.URL(), "--node", "edge-z", "--once", "--signing-key", nodeKey, "--renderer-key", pinned,
			"--discovery-handlers-dir", "", "--debug-echo-availability-file", f)
		require.Equal(t, exitOK, code, stderr)
	}
	code, _, stderr := gitbroker(t, "render", "--git", srv.URL(), "--signing-key", rendererKey, "--first-render")
	require.Equal(t, exitOK, code, stderr)
	agent("foo0\n")
	agent("foo0\nbar0\n")
	code, stdout, stderr := gitbroker(t, "render", "--git", srv.URL(), "--signing-key", rendererKey)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Inputs: verified")
	raw := gitsynctest.Git(t, srv.Bare(), "cat-file", "commit", srv.On(verify.RenderedBranch).Head())
	require.Contains(t, raw, "-----BEGIN PGP SIGNATURE-----")

	code, stdout, stderr = gitbroker(t, "plan", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Inputs: verified")

	// Another OpenPGP key is not this renderer.
	other, _, err := trust.NewOpenPGPKey("mallory", "mallory@example.com")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.asc"), other, 0o600))
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--signing-key", filepath.Join(dir, "other.asc"))
	require.Equal(t, exitRefused, code)
	require.Contains(t, stderr, "give --adopt-rendered <commit>")

	// Only the renderer signs with OpenPGP.
	code, _, stderr = gitbroker(t, "agent", "--allow-debug-echo", "--git", srv.URL(), "--node", "edge-z", "--once", "--signing-key", rendererKey, "--discovery-handlers-dir", "")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "only the renderer may sign with OpenPGP")
}

// An agent the renderer would ignore does not look healthy: on a repository that enrolls its
// writers, agent --once writes its inventory (which counts once the key is enrolled) but exits
// 1 and prints the allowed_signers line that enrolls it; with no key at all it says so; once
// the line is on the branch, it exits 0. A revoked key is not enrolled again.
func TestAgentOnceFailsUntilEnrolled(t *testing.T) {
	srv := demoServer(t)
	dir := t.TempDir()
	keygen := func(f string) {
		out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	person, rendererKey := filepath.Join(dir, "alice"), filepath.Join(dir, "renderer")
	keygen(person)
	keygen(rendererKey)
	signers := enrolled(t, "alice@example.com", person+".pub") + enrolled(t, "renderer", rendererKey+".pub")
	pinned := filepath.Join(dir, "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(pinned, []byte(enrolled(t, "renderer", rendererKey+".pub")), 0o644))
	// Each change on main reaches the agents through the renderer's publication.
	adopt := srv.On(verify.RenderedBranch).Head()
	commit := func(files map[string]string, msg string) {
		t.Helper()
		srv.CommitSigned(person, files, nil, msg)
		// The repository's first verified render starts from nothing (inert once it rendered).
		args := []string{"render", "--git", srv.URL(), "--signing-key", rendererKey, "--first-render"}
		if adopt != "" {
			args, adopt = append(args, "--adopt-rendered", adopt), ""
		}
		code, _, stderr := gitbroker(t, args...)
		// The demo's nodes are not enrolled here: their refs are untrusted inputs (exit 1).
		require.Contains(t, []int{exitOK, exitRefused}, code, stderr)
		require.NotContains(t, stderr, "error: giving up")
	}
	commit(map[string]string{".gitbroker/allowed_signers": signers}, "enroll alice and the renderer")
	key := filepath.Join(dir, "state", "signing-key")
	once := func(extra ...string) (int, string, string) {
		return gitbroker(t, append([]string{"agent", "--allow-debug-echo", "--git", srv.URL(), "--node", "edge-e", "--once",
			"--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none")}, extra...)...)
	}

	code, stdout, stderr := once()
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stderr, "this agent signs nothing")

	code, stdout, stderr = once("--signing-key", key, "--renderer-key", pinned)
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stdout, "committed", "the inventory is written all the same")
	line := enrolled(t, "node:edge-e", key+".pub")
	require.Contains(t, stderr, "does not enroll this agent's key as node:edge-e")
	require.Contains(t, stderr, strings.TrimSpace(line), "the error gives the line to add")

	signers += line
	commit(map[string]string{".gitbroker/allowed_signers": signers}, "enroll edge-e")
	code, _, stderr = once("--signing-key", key, "--renderer-key", pinned)
	require.Equal(t, exitOK, code, stderr)

	pub, err := os.ReadFile(key + ".pub")
	require.NoError(t, err)
	commit(map[string]string{".gitbroker/revoked_keys": string(pub)}, "retire edge-e's key")
	code, _, stderr = once("--signing-key", key, "--renderer-key", pinned)
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stderr, "revoked")
}
