package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
	key := filepath.Join(t.TempDir(), "state", "signing-key")
	code, stdout, stderr := gitbroker(t, "agent", "--git", srv.URL(), "--node", "edge-z", "--once", "--signing-key", key,
		"--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "committed")
	agentCommit := srv.On(verify.InventoryBranch("edge-z")).Head()
	node := enrolled(t, "node:edge-z", key+".pub")
	out, err := srv.VerifyCommit(agentCommit, node)
	require.NoError(t, err, out)
	require.Contains(t, out, `Good "git" signature for node:edge-z`)

	rendererKey := filepath.Join(t.TempDir(), "renderer")
	out2, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", rendererKey).CombinedOutput()
	require.NoError(t, err, string(out2))
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--signing-key", rendererKey)
	require.Equal(t, exitOK, code, stderr)
	renderCommit := srv.On(verify.RenderedBranch).Head()
	require.NotEqual(t, agentCommit, renderCommit)
	renderer := enrolled(t, "renderer", rendererKey+".pub")
	out, err = srv.VerifyCommit(renderCommit, node+renderer)
	require.NoError(t, err, out)
	require.Contains(t, out, `Good "git" signature for renderer`)
	_, err = srv.VerifyCommit(renderCommit, node)
	require.Error(t, err, "the node's key did not sign the render")

	// A key that is not there is an error for the renderer: only agents make their own.
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--signing-key", filepath.Join(t.TempDir(), "missing"))
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--signing-key: reading signing key")
	code, _, stderr = gitbroker(t, "agent", "--dir", t.TempDir(), "--node", "edge-z", "--once", "--signing-key", key)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "makes none")
}
