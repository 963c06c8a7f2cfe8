package gitsync_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/gitkit"
	"github.com/fluxcd/pkg/gittestserver"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

const (
	user     = "agent"
	password = "s3cret-Passw0rd-4711"
)

func TestHTTPBasicAuth(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed(), gitsynctest.WithAuth(user, password))
	up := write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "a: 9\n"})

	t.Run("password", func(t *testing.T) {
		r := open(t, srv, gitsync.WithAuth(gitsync.Auth{Username: user, Password: password}))
		_, err := r.Update(context.Background(), up)
		require.NoError(t, err)
		require.Equal(t, "http://"+strings.TrimPrefix(srv.URL(), "http://"), r.URL())
	})

	t.Run("credentials in the URL are moved out of it", func(t *testing.T) {
		withCreds := strings.Replace(srv.URL(), "http://", "http://"+user+":"+password+"@", 1)
		r, err := gitsync.New(withCreds, "main", fastBackoff())
		require.NoError(t, err)
		require.NotContains(t, r.URL(), password)
		_, err = r.Update(context.Background(), write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "a: 10\n"}))
		require.NoError(t, err)
	})

	// Every way of getting it wrong fails at once, not after retries, and
	// the secret given is nowhere in the error.
	wrong := map[string]struct {
		url  string
		auth *gitsync.Auth
		hide string
	}{
		"wrong password":                 {auth: &gitsync.Auth{Username: user, Password: "wr0ng-Passw0rd-0815"}, hide: "wr0ng-Passw0rd-0815"},
		"wrong password in URL":          {url: strings.Replace(srv.URL(), "http://", "http://"+user+":wr0ng-URL-Pass-1234@", 1), hide: "wr0ng-URL-Pass-1234"},
		"token the server does not take": {auth: &gitsync.Auth{Token: "tok3n-ghp-abcdef123456"}, hide: "tok3n-ghp-abcdef123456"},
		"no credentials":                 {},
		"token alone in URL":             {url: strings.Replace(srv.URL(), "http://", "http://tok3n-in-url-999@", 1), hide: "tok3n-in-url-999"},
	}
	for name, tc := range wrong {
		t.Run(name, func(t *testing.T) {
			url := srv.URL()
			if tc.url != "" {
				url = tc.url
			}
			opts := []gitsync.Option{fastBackoff()}
			if tc.auth != nil {
				opts = append(opts, gitsync.WithAuth(*tc.auth))
			}
			r, err := gitsync.New(url, "main", opts...)
			require.NoError(t, err)
			res, err := r.Update(context.Background(), up)
			require.Error(t, err)
			require.Contains(t, err.Error(), "authentication required")
			require.Zero(t, res.Retries, "an authentication failure is not retried")
			if tc.hide != "" {
				require.NotContains(t, err.Error(), tc.hide)
				require.NotContains(t, fmt.Sprintf("%+v %#v", err, err), tc.hide)
				require.NotContains(t, r.URL(), tc.hide)
			}
		})
	}
}

func TestHTTPBearerToken(t *testing.T) {
	const token = "ghs-T0ken-0123456789"
	srv := gitsynctest.NewServer(t, "main", seed(), gitsynctest.WithToken(token))
	up := write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "a: 11\n"})
	r := open(t, srv, gitsync.WithAuth(gitsync.Auth{Token: token}))
	_, err := r.Update(context.Background(), up)
	require.NoError(t, err)
	got, _ := srv.File("inventory/edge-a.yaml")
	require.Equal(t, "a: 11\n", got)

	r = open(t, srv, gitsync.WithAuth(gitsync.Auth{Token: "ghs-Wr0ng-9876543210"}))
	_, err = r.Update(context.Background(), up)
	require.ErrorContains(t, err, "authentication required")
	require.NotContains(t, err.Error(), "ghs-Wr0ng-9876543210")
}

func TestAuthConfigurationErrors(t *testing.T) {
	cases := map[string]struct {
		url  string
		auth gitsync.Auth
		want string
	}{
		"ssh without key":         {"ssh://git@127.0.0.1:22/x.git", gitsync.Auth{SSHKnownHosts: "/nonexistent"}, "needs an SSH private key"},
		"ssh without known_hosts": {"ssh://git@127.0.0.1:22/x.git", gitsync.Auth{SSHKey: []byte("k")}, "needs a known_hosts file"},
		"password over ssh":       {"ssh://git@127.0.0.1:22/x.git", gitsync.Auth{Password: "pw-hidden-1"}, "use an SSH key"},
		"key over https":          {"https://example.com/x.git", gitsync.Auth{SSHKey: []byte("k")}, "SSH key was given for an HTTP(S) URL"},
		"token and password":      {"https://example.com/x.git", gitsync.Auth{Token: "t-hidden-2", Password: "p-hidden-3"}, "either a token or a password"},
		"bad key":                 {"ssh://git@127.0.0.1:22/x.git", gitsync.Auth{SSHKey: []byte("-----BEGIN key-hidden-4"), SSHKnownHosts: "/x"}, "parsing the SSH private key failed"},
		"unsupported scheme":      {"ftp://example.com/x.git", gitsync.Auth{}, "not supported"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := gitsync.New(tc.url, "main", gitsync.WithAuth(tc.auth))
			require.ErrorContains(t, err, tc.want)
			for _, s := range []string{"pw-hidden-1", "t-hidden-2", "p-hidden-3", "key-hidden-4"} {
				require.NotContains(t, err.Error(), s)
			}
		})
	}
}

func TestLoadAuthFiles(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "password")
	require.NoError(t, os.WriteFile(pw, []byte(password+"\n"), 0o600))
	a, err := gitsync.LoadAuthFiles(user, pw, "", "", "")
	require.NoError(t, err)
	require.Equal(t, password, a.Password)
	_, err = gitsync.LoadAuthFiles(user, filepath.Join(dir, "missing"), "", "", "")
	require.ErrorContains(t, err, "reading credentials file")
}

// sshServer serves the repository over SSH (Flux's gittestserver, which
// runs git's receive-pack and upload-pack), accepting only clientKey.
func sshServer(t *testing.T, clientKey ssh.PublicKey) (url, knownHosts string) {
	t.Helper()
	root := t.TempDir()
	gitsynctest.Init(t, filepath.Join(root, "fleet.git"), "main")
	srv := gittestserver.NewGitServer(root).KeyDir(filepath.Join(root, "keys")).Auth("unused", "unused")
	want := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(clientKey)))
	srv.PublicKeyLookupFunc(func(content string) (*gitkit.PublicKey, error) {
		if content != want {
			return nil, fmt.Errorf("unknown key")
		}
		return &gitkit.PublicKey{Id: "agent"}, nil
	})
	require.NoError(t, srv.ListenSSH())
	go func() { _ = srv.StartSSH() }()
	t.Cleanup(func() { _ = srv.StopSSH() })

	hostPub, err := os.ReadFile(filepath.Join(root, "keys", "gitkit.rsa.pub"))
	require.NoError(t, err)
	addr := strings.TrimPrefix(srv.SSHAddress(), "ssh://git@")
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	knownHosts = filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(knownHosts, []byte(fmt.Sprintf("[%s]:%s %s", host, port, hostPub)), 0o600))
	return srv.SSHAddress() + "/fleet.git", knownHosts
}

func newKey(t *testing.T, passphrase string) (ssh.PublicKey, []byte) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	var block *pem.Block
	if passphrase == "" {
		block, err = ssh.MarshalPrivateKey(priv, "")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
	}
	require.NoError(t, err)
	sshPub, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	return sshPub, pem.EncodeToMemory(block)
}

func TestSSHWithKnownHosts(t *testing.T) {
	const passphrase = "k3y-Passphrase-777"
	pub, key := newKey(t, passphrase)
	url, knownHosts := sshServer(t, pub)
	auth := gitsync.Auth{SSHKey: key, SSHKeyPassphrase: passphrase, SSHKnownHosts: knownHosts}
	up := write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "over ssh\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	r, err := gitsync.New(url, "main", gitsync.WithAuth(auth), fastBackoff(), gitsync.WithCreateBranch())
	require.NoError(t, err)
	res, err := r.Update(ctx, up)
	require.NoError(t, err)
	snap, err := r.Snapshot(ctx)
	require.NoError(t, err)
	require.Equal(t, res.Commit, snap.Commit())
	b, err := snap.ReadFile("inventory/edge-a.yaml")
	require.NoError(t, err)
	require.Equal(t, "over ssh\n", string(b))

	t.Run("host key mismatch", func(t *testing.T) {
		rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
		other, err := ssh.NewPublicKey(&rsaKey.PublicKey)
		require.NoError(t, err)
		bad := filepath.Join(t.TempDir(), "known_hosts")
		line, err := os.ReadFile(knownHosts)
		require.NoError(t, err)
		hostField := strings.Fields(string(line))[0]
		require.NoError(t, os.WriteFile(bad, []byte(hostField+" "+string(ssh.MarshalAuthorizedKey(other))), 0o600))
		a := auth
		a.SSHKnownHosts = bad
		r, err := gitsync.New(url, "main", gitsync.WithAuth(a), fastBackoff())
		require.NoError(t, err)
		res, err := r.Update(ctx, up)
		require.ErrorContains(t, err, "knownhosts")
		require.Zero(t, res.Retries)
		require.NotContains(t, err.Error(), passphrase)
	})

	t.Run("key the server does not know", func(t *testing.T) {
		_, stranger := newKey(t, "")
		a := auth
		a.SSHKey, a.SSHKeyPassphrase = stranger, ""
		r, err := gitsync.New(url, "main", gitsync.WithAuth(a), fastBackoff())
		require.NoError(t, err)
		res, err := r.Update(ctx, up)
		require.ErrorContains(t, err, "unable to authenticate")
		require.Zero(t, res.Retries)
		require.NotContains(t, err.Error(), string(stranger))
	})

	t.Run("wrong passphrase", func(t *testing.T) {
		a := auth
		a.SSHKeyPassphrase = "n0t-the-Passphrase"
		_, err := gitsync.New(url, "main", gitsync.WithAuth(a))
		require.ErrorContains(t, err, "parsing the SSH private key failed")
		require.NotContains(t, err.Error(), "n0t-the-Passphrase")
	})
}

// An SSH fetch is bounded like an HTTP one: past --git-max-fetch-bytes it fails with
// ErrTooLarge instead of reading the pack into memory.
func TestSSHFetchLimit(t *testing.T) {
	pub, key := newKey(t, "")
	url, knownHosts := sshServer(t, pub)
	auth := gitsync.Auth{SSHKey: key, SSHKnownHosts: knownHosts}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := gitsync.New(url, "main", gitsync.WithAuth(auth), fastBackoff(), gitsync.WithCreateBranch())
	require.NoError(t, err)
	big := make([]byte, 256<<10)
	_, _ = rand.Read(big)
	_, err = r.Update(ctx, write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": fmt.Sprintf("%x", big)}))
	require.NoError(t, err)

	small, err := gitsync.New(url, "main", gitsync.WithAuth(auth), fastBackoff(), gitsync.WithLimits(64<<10, 0))
	require.NoError(t, err)
	_, err = small.Snapshot(ctx)
	require.ErrorIs(t, err, gitsync.ErrTooLarge)

	enough, err := gitsync.New(url, "main", gitsync.WithAuth(auth), fastBackoff(), gitsync.WithLimits(4<<20, 0))
	require.NoError(t, err)
	snap, err := enough.Snapshot(ctx)
	require.NoError(t, err)
	b, err := snap.ReadFile("inventory/edge-a.yaml")
	require.NoError(t, err)
	require.Len(t, b, 512<<10)
}

// --git-credentials-dir reads a mounted Secret in Flux's GitRepository form: username and
// password for HTTPS, identity, known_hosts and password (the key's passphrase) for SSH; a flag
// given beside it wins.
func TestCredentialsDir(t *testing.T) {
	dir := func(files map[string][]byte) string {
		d := t.TempDir()
		for name, b := range files {
			require.NoError(t, os.WriteFile(filepath.Join(d, name), b, 0o400))
		}
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up := write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "from a Secret\n"})

	srv := gitsynctest.NewServer(t, "main", seed(), gitsynctest.WithAuth(user, password))
	https := dir(map[string][]byte{"username": []byte(user + "\n"), "password": []byte(password + "\n")})
	o := gitsync.RemoteFlags{URL: srv.URL(), Branch: "main", CredentialsDir: https}
	r, err := o.Open(fastBackoff())
	require.NoError(t, err)
	_, err = r.Update(ctx, up)
	require.NoError(t, err)
	secrets, err := o.Secrets()
	require.NoError(t, err)
	require.Equal(t, []string{password}, secrets, "the password is kept out of what the writer writes")

	wrong := filepath.Join(t.TempDir(), "wrong")
	require.NoError(t, os.WriteFile(wrong, []byte("wr0ng-Passw0rd-0815"), 0o400))
	o.PasswordFile = wrong
	r, err = o.Open(fastBackoff())
	require.NoError(t, err)
	_, err = r.Update(ctx, up)
	require.Error(t, err, "--git-password-file wins over the folder")

	const passphrase = "k3y-Passphrase-778"
	pub, key := newKey(t, passphrase)
	url, knownHosts := sshServer(t, pub)
	hosts, err := os.ReadFile(knownHosts)
	require.NoError(t, err)
	ssh := dir(map[string][]byte{"identity": key, "known_hosts": hosts, "password": []byte(passphrase)})
	r, err = (&gitsync.RemoteFlags{URL: url, Branch: "main", CredentialsDir: ssh}).Open(fastBackoff(), gitsync.WithCreateBranch())
	require.NoError(t, err)
	_, err = r.Update(ctx, up)
	require.NoError(t, err)

	// A second remote with no credentials of its own (the inventory repository) uses the
	// first's: deploy/ mounts one Secret per writer.
	inv := gitsync.RemoteFlags{URL: srv.URL()}
	inv.Inherit(gitsync.RemoteFlags{Branch: "main", CredentialsDir: https})
	r, err = inv.Open(fastBackoff())
	require.NoError(t, err)
	_, err = r.Update(ctx, write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "inherited\n"}))
	require.NoError(t, err)

	_, err = (&gitsync.RemoteFlags{URL: url, Branch: "main", CredentialsDir: filepath.Join(t.TempDir(), "absent")}).Open()
	require.ErrorContains(t, err, "--git-credentials-dir")
}
