package trust_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/trust"
)

func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "TZ=UTC")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

func sshKeygen(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("ssh-keygen")
	require.NoError(t, err, "git verifies SSH signatures with ssh-keygen: apt-get install openssh-client (.ci/run does)")
}

// keygen makes an ed25519 key with ssh-keygen, as an operator would.
func keygen(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	run(t, dir, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p)
	return p
}

// pushSigned commits one file through gitsync with signer s and returns the commit.
func pushSigned(t *testing.T, srv *gitsynctest.Server, s gitsync.Signer, path, content string) string {
	t.Helper()
	r, err := gitsync.New(srv.URL(), "main", gitsync.WithSigner(s))
	require.NoError(t, err)
	res, err := r.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{
			Owned:   []string{path},
			Files:   map[string][]byte{path: []byte(content)},
			Message: "agent: update " + path,
			Author:  gitsync.Signature{Name: "gitbroker agent", Email: "agent@gitbroker.dev", When: time.Now()},
		}, nil
	})
	require.NoError(t, err)
	return res.Commit
}

// A commit gitsync signs with a key made by ssh-keygen verifies with git verify-commit, for the
// principal allowed_signers names, and not for a key it does not name.
func TestGitVerifiesSignedCommits(t *testing.T) {
	sshKeygen(t)
	dir := t.TempDir()
	key := keygen(t, dir, "edge-a")
	other := keygen(t, dir, "edge-b")
	s, err := trust.LoadSigner(key)
	require.NoError(t, err)
	srv := gitsynctest.NewServer(t, "main", map[string]string{"README.md": "fleet\n"})
	commit := pushSigned(t, srv, s, "inventory/edge-a.yaml", "a: 1\n")

	out, err := srv.VerifyCommit(commit, s.AllowedSignersLine("node:edge-a")+"\n")
	require.NoError(t, err, out)
	require.Contains(t, out, `Good "git" signature for node:edge-a`)

	o, err := trust.LoadSigner(other)
	require.NoError(t, err)
	out, err = srv.VerifyCommit(commit, o.AllowedSignersLine("node:edge-b")+"\n")
	require.Error(t, err, "a key allowed_signers does not name: %s", out)

	// And the same commit through this package's verifier.
	raw := run(t, srv.Bare(), "git", "cat-file", "commit", commit)
	payload, armored := trust.SplitSignedCommit([]byte(raw))
	sig, err := trust.VerifySignature(payload, armored)
	require.NoError(t, err)
	allowed, err := trust.ParseAllowedSigners("allowed_signers", []byte(s.AllowedSignersLine("node:edge-a")+"\n"+o.AllowedSignersLine("node:edge-b")+"\n"))
	require.NoError(t, err)
	require.True(t, allowed.Allows(sig, "node:edge-a", time.Now()))
	require.False(t, allowed.Allows(sig, "node:edge-b", time.Now()), "edge-a's key never signs as edge-b")
	require.Equal(t, []string{"node:edge-a"}, allowed.Principals(sig, time.Now()))

	// A changed payload (another tree, another message) does not verify.
	_, err = trust.VerifySignature([]byte(strings.Replace(string(payload), "update", "delete", 1)), armored)
	require.Error(t, err)
	unsigned := pushUnsigned(t, srv)
	payload, armored = trust.SplitSignedCommit([]byte(run(t, srv.Bare(), "git", "cat-file", "commit", unsigned)))
	_, err = trust.VerifySignature(payload, armored)
	require.ErrorIs(t, err, trust.ErrUnsigned)
}

func pushUnsigned(t *testing.T, srv *gitsynctest.Server) string {
	return srv.Commit(map[string]string{"configurations/x.yaml": "x: 1\n"}, nil, "a person's commit")
}

// Commits git signs (gpg.format=ssh), by a plain key and by a key with a certificate from a
// fleet CA, verify here as git verifies them: the CA line enrolls exactly the principals the
// certificate names, within its validity.
func TestVerifiesWhatGitSigns(t *testing.T) {
	sshKeygen(t)
	dir := t.TempDir()
	person := keygen(t, dir, "alice")
	ca := keygen(t, dir, "fleet-ca")
	node := keygen(t, dir, "edge-7")
	run(t, dir, "ssh-keygen", "-q", "-s", ca, "-I", "edge-7", "-n", "node:edge-7", "-V", "+52w", node+".pub")
	caPub, err := os.ReadFile(ca + ".pub")
	require.NoError(t, err)
	personPub, err := os.ReadFile(person + ".pub")
	require.NoError(t, err)
	allowedText := "# people\nalice@example.org " + string(personPub) +
		"# every node, through the fleet CA\n\"node:*\" cert-authority,namespaces=\"git\" " + string(caPub)
	allowed, err := trust.ParseAllowedSigners(".gitbroker/allowed_signers", []byte(allowedText))
	require.NoError(t, err)

	repo := filepath.Join(dir, "repo")
	run(t, dir, "git", "init", "-q", "-b", "main", repo)
	gitSign := func(key, file string) (payload, armored []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(repo, file), []byte(file), 0o644))
		run(t, repo, "git", "add", file)
		signingKey := key
		if _, err := os.Stat(key + "-cert.pub"); err == nil {
			signingKey = key + "-cert.pub"
		}
		run(t, repo, "git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "gpg.format=ssh",
			"-c", "user.signingkey="+signingKey, "commit", "-q", "-S", "-m", "add "+file)
		return trust.SplitSignedCommit([]byte(run(t, repo, "git", "cat-file", "commit", "HEAD")))
	}

	sig, err := trust.VerifySignature(gitSign(person, "a.yaml"))
	require.NoError(t, err)
	require.Equal(t, []string{"alice@example.org"}, allowed.Principals(sig, time.Now()))
	require.True(t, trust.IsPerson("alice@example.org"))

	sig, err = trust.VerifySignature(gitSign(node, "b.yaml"))
	require.NoError(t, err)
	require.True(t, allowed.Allows(sig, "node:edge-7", time.Now()))
	require.False(t, allowed.Allows(sig, "node:edge-8", time.Now()), "the certificate names edge-7 only")
	require.False(t, allowed.Allows(sig, "renderer", time.Now()), "the CA line admits node:* only")
	require.Equal(t, []string{"node:edge-7"}, allowed.Principals(sig, time.Now()))
	require.False(t, allowed.Allows(sig, "node:edge-7", time.Now().AddDate(2, 0, 0)), "an expired certificate")

	// This package's signer, with the certificate beside the key, signs as the certificate.
	s, err := trust.LoadSigner(node)
	require.NoError(t, err)
	require.Equal(t, "node:edge-7 cert-authority "+strings.Join(strings.Fields(string(caPub))[:2], " "), s.AllowedSignersLine("node:edge-7"))
	srv := gitsynctest.NewServer(t, "main", map[string]string{"README.md": "fleet\n"})
	commit := pushSigned(t, srv, s, "inventory/edge-7.yaml", "a: 1\n")
	out, err := srv.VerifyCommit(commit, allowedText)
	require.NoError(t, err, out)
	require.Contains(t, out, `Good "git" signature for node:edge-7`)
}

func TestLoadOrCreateSigner(t *testing.T) {
	sshKeygen(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "signing-key")
	s, created, err := trust.LoadOrCreateSigner(path, "node:edge-a")
	require.NoError(t, err)
	require.True(t, created)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	// ssh-keygen reads the key it wrote: the public key it derives is the one beside it.
	derived := run(t, dir, "ssh-keygen", "-y", "-f", path)
	pub, err := os.ReadFile(path + ".pub")
	require.NoError(t, err)
	require.Equal(t, strings.Fields(derived)[:2], strings.Fields(string(pub))[:2])
	require.Equal(t, "node:edge-a "+strings.Join(strings.Fields(string(pub))[:2], " "), s.AllowedSignersLine("node:edge-a"))

	again, created, err := trust.LoadOrCreateSigner(path, "node:edge-a")
	require.NoError(t, err)
	require.False(t, created, "a key that exists is kept")
	require.Equal(t, s.AllowedSignersLine("x"), again.AllowedSignersLine("x"))

	_, err = trust.LoadSigner(filepath.Join(dir, "missing"))
	require.Error(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk"), []byte("not a key"), 0o600))
	_, err = trust.LoadSigner(filepath.Join(dir, "junk"))
	require.ErrorContains(t, err, "not an SSH private key")
	run(t, dir, "ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", filepath.Join(dir, "locked"))
	_, err = trust.LoadSigner(filepath.Join(dir, "locked"))
	require.ErrorContains(t, err, "passphrase")
}

func TestParseAllowedSignersErrors(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOb4tKqZ0pFy0f3tY6Vx2m0n1Jm3v4mZqk6R6c8xj0aQ"
	for _, tc := range []struct{ name, text, want string }{
		{"no key", "alice@example.org\n", ":1: expected principals"},
		{"bad key", "alice ssh-ed25519 AAAA\n", ":1: principals \"alice\": no key"},
		{"unknown option", "# c\nalice nocert " + key + "\n", ":2: unknown option \"nocert\""},
		{"bad time", "alice valid-after=\"2026\" " + key + "\n", ":1: option valid-after"},
		{"empty principal", "alice,,bob " + key + "\n", ":1: empty principal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trust.ParseAllowedSigners(".gitbroker/allowed_signers", []byte(tc.text))
			require.ErrorContains(t, err, ".gitbroker/allowed_signers"+tc.want)
		})
	}
	a, err := trust.ParseAllowedSigners("f", []byte("\n# only comments\n\n"))
	require.NoError(t, err)
	require.NotNil(t, a)
}

// BenchmarkVerifySignature is one SSH signature of a commit checked: what verify.Signatures saves
// a render daemon per node whose tip did not move.
func BenchmarkVerifySignature(b *testing.B) {
	s, _, err := trust.LoadOrCreateSigner(filepath.Join(b.TempDir(), "key"), "node:edge-a")
	require.NoError(b, err)
	payload := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@example.com> 1 +0000\ncommitter a <a@example.com> 1 +0000\n\ninventory: edge-a\n")
	armored, err := s.Sign(payload)
	require.NoError(b, err)
	for b.Loop() {
		if _, err := trust.VerifySignature(payload, armored); err != nil {
			b.Fatal(err)
		}
	}
}

// A revocation file lists keys one a line, as git's gpg.ssh.revocationFile in its plain form;
// a line that is not a key is an error with its line, never a silently empty list.
func TestRevokeParses(t *testing.T) {
	a, err := trust.ParseAllowedSigners("allowed", []byte("renderer ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC0wlKSnOSmbF4zjjdXlHcjIVEsMkl2y0RkwkEFfqfGc\n"))
	require.NoError(t, err)
	err = a.Revoke(".gitbroker/revoked_keys", []byte("# retired\n\nnot a key\n"))
	require.ErrorContains(t, err, ".gitbroker/revoked_keys:3: no public key or certificate")
	require.NoError(t, a.Revoke(".gitbroker/revoked_keys", []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC0wlKSnOSmbF4zjjdXlHcjIVEsMkl2y0RkwkEFfqfGc edge-z\n")))
}
