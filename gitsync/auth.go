package gitsync

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// Auth holds the credentials for a remote. At most one of the HTTPS forms
// (Username/Password, Token) and the SSH form (SSHKey) is used, chosen by
// the URL's scheme.
type Auth struct {
	// Username and Password authenticate HTTPS with basic auth. Hosts
	// that take a token as a password (GitHub, GitLab) use this form.
	Username string
	Password string
	// Token authenticates HTTPS with an "Authorization: Bearer" header.
	Token string

	// SSHKey is a PEM private key; SSHKeyPassphrase decrypts it if needed.
	SSHKey           []byte
	SSHKeyPassphrase string
	// SSHKnownHosts is the known_hosts file the server's key must match.
	// It is required for SSH: host keys are always checked.
	SSHKnownHosts string
}

// secrets lists the strings that must never appear in an error.
func (a Auth) secrets() []string {
	var s []string
	for _, v := range []string{a.Password, a.Token, a.SSHKeyPassphrase} {
		if v != "" {
			s = append(s, v)
		}
	}
	if len(a.SSHKey) > 0 {
		s = append(s, string(a.SSHKey))
	}
	return s
}

// endpoint parses a remote URL. Credentials in the URL's user info are
// moved into auth, so they never reach go-git's messages, and the URL
// returned carries none.
func endpoint(raw string, auth Auth) (string, Auth, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		// scp-like "git@host:path" is SSH; it has no password to hide.
		if strings.Contains(raw, "@") && strings.Contains(raw, ":") && !strings.Contains(raw, "://") {
			return raw, auth, nil
		}
		if err != nil {
			return "", auth, fmt.Errorf("parsing git URL: %w", redactURLError(err))
		}
		return "", auth, fmt.Errorf("git URL %q has no scheme", raw)
	}
	if u.User != nil && (u.Scheme == "http" || u.Scheme == "https") {
		if p, ok := u.User.Password(); ok {
			if auth.Password == "" && auth.Token == "" {
				auth.Username, auth.Password = u.User.Username(), p
			}
		} else if auth.Username == "" {
			auth.Username = u.User.Username()
		}
		u.User = nil
	}
	return u.String(), auth, nil
}

// redactURLError hides the raw URL that url.Parse puts in its errors.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// method builds go-git's auth method for the URL's transport.
func (a Auth) method(rawURL string) (transport.AuthMethod, error) {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parsing git URL: %w", redactURLError(err))
	}
	switch ep.Protocol {
	case "http", "https":
		if len(a.SSHKey) > 0 {
			return nil, errors.New("an SSH key was given for an HTTP(S) URL")
		}
		switch {
		case a.Token != "" && a.Password != "":
			return nil, errors.New("give either a token or a password, not both")
		case a.Token != "":
			return &githttp.TokenAuth{Token: a.Token}, nil
		case a.Password != "" || a.Username != "":
			return &githttp.BasicAuth{Username: a.Username, Password: a.Password}, nil
		}
		return nil, nil
	case "ssh":
		if a.Password != "" || a.Token != "" {
			return nil, errors.New("a password or token was given for an SSH URL; use an SSH key")
		}
		if len(a.SSHKey) == 0 {
			return nil, errors.New("an SSH URL needs an SSH private key")
		}
		if a.SSHKnownHosts == "" {
			return nil, errors.New("an SSH URL needs a known_hosts file: host keys are always checked")
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, a.SSHKey, a.SSHKeyPassphrase)
		if err != nil {
			// The parser's message may quote key material; say only what failed.
			return nil, errors.New("parsing the SSH private key failed (wrong format or passphrase)")
		}
		db, err := gitssh.NewKnownHostsDb(a.SSHKnownHosts)
		if err != nil {
			return nil, fmt.Errorf("reading known_hosts %s: %w", a.SSHKnownHosts, err)
		}
		keys.HostKeyCallback = db.HostKeyCallback()
		port := ep.Port
		if port == 0 {
			port = 22
		}
		keys.HostKeyAlgorithms = db.HostKeyAlgorithms(net.JoinHostPort(ep.Host, fmt.Sprint(port)))
		return keys, nil
	case "file":
		return nil, nil
	}
	return nil, fmt.Errorf("git URL scheme %q is not supported", ep.Protocol)
}

// LoadAuthFiles fills an Auth from files, the way Kubernetes Secrets are
// mounted. Empty names are skipped. Trailing newlines are trimmed from
// passwords and tokens, never from keys.
func LoadAuthFiles(username, passwordFile, tokenFile, sshKeyFile, knownHostsFile string) (Auth, error) {
	a := Auth{Username: username, SSHKnownHosts: knownHostsFile}
	read := func(name string) ([]byte, error) {
		if name == "" {
			return nil, nil
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("reading credentials file: %w", err)
		}
		return b, nil
	}
	p, err := read(passwordFile)
	if err != nil {
		return a, err
	}
	a.Password = strings.TrimRight(string(p), "\r\n")
	t, err := read(tokenFile)
	if err != nil {
		return a, err
	}
	a.Token = strings.TrimRight(string(t), "\r\n")
	if a.SSHKey, err = read(sshKeyFile); err != nil {
		return a, err
	}
	return a, nil
}

// redactor removes secrets from error messages.
type redactor struct{ secrets []string }

// redactedError keeps the chain for errors.Is while hiding secrets from
// its message.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func (r redactor) wrap(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := redactString(msg, r.secrets)
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}

// redactString replaces every secret and every URL user info in s.
func redactString(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "***")
		}
	}
	// "scheme://user:password@host" anywhere in the text.
	for _, scheme := range []string{"https://", "http://", "ssh://"} {
		rest := s
		var b strings.Builder
		for {
			i := strings.Index(rest, scheme)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			b.WriteString(rest[:i+len(scheme)])
			rest = rest[i+len(scheme):]
			end := strings.IndexAny(rest, "/ \"'")
			if end < 0 {
				end = len(rest)
			}
			if at := strings.LastIndex(rest[:end], "@"); at >= 0 && (scheme != "ssh://" || strings.Contains(rest[:at], ":")) {
				b.WriteString("***@")
				rest = rest[at+1:]
			}
		}
		s = b.String()
	}
	return s
}
