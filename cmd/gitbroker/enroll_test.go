package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// enroll prints the line an agent logs at first start, appends it to a work tree once, refuses
// a private key, a wrong principal and a symlinked file, and gives a certificate's CA line.
func TestEnroll(t *testing.T) {
	keys := t.TempDir()
	key := filepath.Join(keys, "signing-key")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput()
	require.NoError(t, err, string(out))
	line := strings.TrimSpace(enrolled(t, "node:edge-a", key+".pub"))

	code, stdout, stderr := gitbroker(t, "enroll", "--node", "edge-a", "--key", key+".pub")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, line+"\n", stdout)

	dir := t.TempDir()
	code, _, stderr = gitbroker(t, "init", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	for range 2 {
		code, stdout, stderr = gitbroker(t, "enroll", "--node", "edge-a", "--key", key+".pub", "--dir", dir)
		require.Equal(t, exitOK, code, stderr)
	}
	require.Contains(t, stdout, "already enrolls node:edge-a")
	data, err := os.ReadFile(filepath.Join(dir, ".gitbroker", "allowed_signers"))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(data), line), string(data))

	code, _, stderr = gitbroker(t, "enroll", "--node", "edge-a", "--key", key)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "is a private key")
	code, _, stderr = gitbroker(t, "enroll", "--principal", "alice", "--key", key+".pub")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "renderer, recorder (recorder:<cluster> with spec.clusters) and node:<node>")
	code, _, _ = gitbroker(t, "enroll", "--principal", "recorder:site-a", "--key", key+".pub", "--dir", dir)
	require.Equal(t, exitOK, code, "the recorder of one cluster of several")
	code, _, stderr = gitbroker(t, "enroll", "--principal", "recorder:Site_A", "--key", key+".pub", "--dir", dir)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "is not a valid cluster name")
	code, _, stderr = gitbroker(t, "enroll", "--node", "Edge_A", "--key", key+".pub")
	require.Equal(t, exitInvalid, code, stderr)

	// A certificate from the fleet's CA enrolls through the CA's line, for its principal only.
	ca := filepath.Join(keys, "fleet-ca")
	out, err = exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", ca).CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command("ssh-keygen", "-q", "-s", ca, "-I", "edge-a", "-n", "node:edge-a", key+".pub").CombinedOutput()
	require.NoError(t, err, string(out))
	code, stdout, stderr = gitbroker(t, "enroll", "--node", "edge-a", "--key", key+"-cert.pub")
	require.Equal(t, exitOK, code, stderr)
	caPub, err := os.ReadFile(ca + ".pub")
	require.NoError(t, err)
	require.Equal(t, "node:edge-a cert-authority "+strings.Join(strings.Fields(string(caPub))[:2], " ")+"\n", stdout)
	code, _, stderr = gitbroker(t, "enroll", "--node", "edge-b", "--key", key+"-cert.pub")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "not node:edge-b")

	// Never written through a symlink.
	other := filepath.Join(t.TempDir(), "elsewhere")
	require.NoError(t, os.WriteFile(other, nil, 0o644))
	link := t.TempDir()
	code, _, stderr = gitbroker(t, "init", "--dir", link)
	require.Equal(t, exitOK, code, stderr)
	_ = os.Remove(filepath.Join(link, ".gitbroker", "allowed_signers"))
	require.NoError(t, os.Symlink(other, filepath.Join(link, ".gitbroker", "allowed_signers")))
	code, _, stderr = gitbroker(t, "enroll", "--node", "edge-a", "--key", key+".pub", "--dir", link)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "not writing through it")
	data, err = os.ReadFile(other)
	require.NoError(t, err)
	require.Empty(t, data)
}
