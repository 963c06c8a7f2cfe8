package trust_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/trust"
)

// The renderer's OpenPGP commits are what gpg, through git verify-commit, accepts: what Argo CD's
// repo-server runs.
func TestOpenPGPSignerAgainstGitAndGPG(t *testing.T) {
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Fatalf("gpg is needed to check OpenPGP signatures the way git and Argo CD do (.ci/run installs gnupg): %v", err)
	}
	dir := t.TempDir()
	priv, pub, err := trust.NewOpenPGPKey("gitbroker renderer", "renderer@gitbroker.dev")
	require.NoError(t, err)
	keyFile := filepath.Join(dir, "renderer.asc")
	require.NoError(t, os.WriteFile(keyFile, priv, 0o600))
	s, err := trust.LoadOpenPGPSigner(keyFile)
	require.NoError(t, err)
	require.Len(t, s.KeyID(), 16)
	armored, err := s.PublicKey()
	require.NoError(t, err)
	require.Equal(t, string(pub), string(armored))

	srv := gitsynctest.NewServer(t, "main", map[string]string{"a.yaml": "a\n"})
	repo, err := gitsync.New(srv.URL(), "main", gitsync.WithSigner(s))
	require.NoError(t, err)
	res, err := repo.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Owned: []string{"b.yaml"}, Files: map[string][]byte{"b.yaml": []byte("b\n")}, Message: "signed",
			Author: gitsync.Signature{Name: "gitbroker-renderer", Email: "renderer@gitbroker.dev", When: time.Now()}}, nil
	})
	require.NoError(t, err)

	home := filepath.Join(dir, "gnupg")
	require.NoError(t, os.Mkdir(home, 0o700))
	gpgEnv := append(os.Environ(), "GNUPGHOME="+home, "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	imp := exec.Command("gpg", "--batch", "--import", filepath.Join(dir, "pub.asc"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pub.asc"), pub, 0o644))
	imp.Env = gpgEnv
	out, err := imp.CombinedOutput()
	require.NoError(t, err, "%s", out)

	verify := exec.Command("git", "verify-commit", "--raw", res.Commit)
	verify.Dir, verify.Env = srv.Bare(), gpgEnv
	out, err = verify.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "GOODSIG "+s.KeyID())

	// A commit signed by another key does not verify against this one.
	other, _, err := trust.NewOpenPGPKey("mallory", "mallory@example.com")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.asc"), other, 0o600))
	o, err := trust.LoadOpenPGPSigner(filepath.Join(dir, "other.asc"))
	require.NoError(t, err)
	raw := gitsynctest.Git(t, srv.Bare(), "cat-file", "commit", res.Commit)
	payload, sig := trust.SplitSignedCommit([]byte(raw))
	require.True(t, s.VerifiesDetached(payload, sig, time.Now()))
	require.False(t, o.VerifiesDetached(payload, sig, time.Now()))
	require.False(t, s.VerifiesDetached(append(payload, 'x'), sig, time.Now()))
	require.True(t, strings.HasPrefix(s.String(), "gitbroker renderer"))

	// As an Identity, on the raw commit, at its committer time.
	var id, mallory trust.Identity = s, o
	require.True(t, id.Verifies([]byte(raw)))
	require.False(t, mallory.Verifies([]byte(raw)))
	require.False(t, id.Verifies([]byte(strings.Replace(raw, "\n\n", "\n\nchanged ", 1))))
	ct := strings.TrimSpace(gitsynctest.Git(t, srv.Bare(), "log", "-1", "--format=%ct", res.Commit))
	require.Equal(t, ct, strconv.FormatInt(trust.CommitTime([]byte(raw)).Unix(), 10))
}
