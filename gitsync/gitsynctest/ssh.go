package gitsynctest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fluxcd/gitkit"
	"github.com/fluxcd/pkg/gittestserver"
)

// ServeSSH serves the repositories of servers over SSH as well, as one git host serves several
// repositories: each at its path in repos (such as "plant/edge.git"), from one SSH server on
// loopback until the test ends. It is Flux's gittestserver, which runs git's own upload-pack
// and receive-pack in the repository (so its hooks run as over HTTP), for a client whose public
// key allow accepts, given in authorized_keys form ("ssh-ed25519 AAAA..."). It returns the
// host's address, ssh://git@127.0.0.1:<port>. The host key is the server's own (RSA):
// ssh-keyscan reads it as from any server. Pushes over SSH are not counted by Pushes and send
// no webhook. gittestserver keeps one key check for the whole process: the last ServeSSH's
// allow is every SSH server's.
func ServeSSH(t testing.TB, allow func(authorizedKey string) bool, repos map[string]*Server) string {
	t.Helper()
	root := t.TempDir()
	for path, s := range repos {
		link := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(s.Bare(), link); err != nil {
			t.Fatal(err)
		}
	}
	srv := gittestserver.NewGitServer(root).KeyDir(filepath.Join(t.TempDir(), "keys")).Auth("unused", "unused")
	srv.PublicKeyLookupFunc(func(content string) (*gitkit.PublicKey, error) {
		if !allow(content) {
			return nil, fmt.Errorf("unknown key")
		}
		return &gitkit.PublicKey{Id: "deploy-key"}, nil
	})
	if err := srv.ListenSSH(); err != nil {
		t.Fatalf("serving over SSH: %v", err)
	}
	go func() { _ = srv.StartSSH() }()
	t.Cleanup(func() { _ = srv.StopSSH() })
	return srv.SSHAddress()
}
