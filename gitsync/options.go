package gitsync

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Flag names for a remote; every daemon that writes to git takes them.
const (
	FlagGit                  = "git"
	FlagBranch               = "branch"
	FlagUsername             = "git-username"
	FlagPasswordFile         = "git-password-file"
	FlagTokenFile            = "git-token-file"
	FlagSSHKeyFile           = "ssh-key-file"
	FlagSSHKeyPassphraseFile = "ssh-key-passphrase-file"
	FlagSSHKnownHostsFile    = "ssh-known-hosts-file"
	FlagCredentialsDir       = "git-credentials-dir"
	FlagPushAttempts         = "push-attempts"
	FlagPushTimeout          = "push-timeout"
	FlagMaxFetchBytes        = "git-max-fetch-bytes"
	FlagMaxFileBytes         = "git-max-file-bytes"
	FlagStallTimeout         = "git-timeout"
)

// RemoteFlags are the command-line settings of a remote branch. Secrets come
// from files (a mounted Secret), never from flag values, so they do not
// show in process listings.
type RemoteFlags struct {
	URL                  string
	Branch               string
	Username             string
	PasswordFile         string
	TokenFile            string
	SSHKeyFile           string
	SSHKeyPassphraseFile string
	SSHKnownHostsFile    string
	// CredentialsDir is a mounted Secret in Flux's GitRepository form (credentialFiles).
	CredentialsDir string
	PushAttempts   int
	PushTimeout    time.Duration
	MaxFetchBytes  int64
	MaxFileBytes   int64
	// StallTimeout fails a request that makes no progress for this long.
	StallTimeout time.Duration
}

// BindReadFlags registers the flags of a command that only reads the repository: its URL,
// credentials, limits and branch, described by branchUsage (what the command reads there).
func (o *RemoteFlags) BindReadFlags(fs *pflag.FlagSet, branchUsage string) {
	o.bindRemote(fs, "", "Git repository URL (https://, http://, ssh:// or git@host:path).")
	fs.StringVar(&o.Branch, FlagBranch, "main", branchUsage)
	fs.Int64Var(&o.MaxFetchBytes, FlagMaxFetchBytes, DefaultMaxFetchBytes, "A fetch (HTTP(S) or SSH) that would receive more than this many bytes fails instead of reading them into memory.")
	fs.Int64Var(&o.MaxFileBytes, FlagMaxFileBytes, DefaultMaxFileSize, "Reading a file larger than this from the branch fails instead of reading it into memory.")
	fs.DurationVar(&o.StallTimeout, FlagStallTimeout, DefaultStallTimeout, "A git request fails when the server accepts, takes or sends nothing for this long (git servers send keepalives every 5s while they work).")
}

// BindFlags registers the read flags and those of writing (push attempts and timeout).
func (o *RemoteFlags) BindFlags(fs *pflag.FlagSet, branchUsage string) {
	o.BindReadFlags(fs, branchUsage)
	fs.IntVar(&o.PushAttempts, FlagPushAttempts, DefaultBackoff.MaxAttempts, "Attempts to land one write (fetch, recompute, push) before giving up until the next cycle.")
	fs.DurationVar(&o.PushTimeout, FlagPushTimeout, DefaultBackoff.MaxElapsed, "Time to land one write (every attempt, a stalled one included) before giving up until the next cycle.")
}

// BindRemoteFlags registers a second remote's URL and credentials with every flag name
// prefixed ("inventory-": --inventory-git, --inventory-git-password-file, ...). Its branch,
// attempts and limits are the main remote's (Inherit).
func (o *RemoteFlags) BindRemoteFlags(fs *pflag.FlagSet, prefix, urlUsage string) {
	o.bindRemote(fs, prefix, urlUsage)
}

func (o *RemoteFlags) bindRemote(fs *pflag.FlagSet, prefix, urlUsage string) {
	fs.StringVar(&o.URL, prefix+FlagGit, "", urlUsage)
	fs.StringVar(&o.Username, prefix+FlagUsername, "", "HTTPS user name (for a token used as a password, any name the host accepts).")
	fs.StringVar(&o.PasswordFile, prefix+FlagPasswordFile, "", "File holding the HTTPS password or access token, sent with basic auth.")
	fs.StringVar(&o.TokenFile, prefix+FlagTokenFile, "", "File holding an HTTPS bearer token.")
	fs.StringVar(&o.SSHKeyFile, prefix+FlagSSHKeyFile, "", "File holding the SSH private key (PEM or OpenSSH format).")
	fs.StringVar(&o.SSHKeyPassphraseFile, prefix+FlagSSHKeyPassphraseFile, "", "File holding the SSH key's passphrase, if it has one.")
	fs.StringVar(&o.SSHKnownHostsFile, prefix+FlagSSHKnownHostsFile, "", "known_hosts file the SSH server's key must match (required for SSH).")
	fs.StringVar(&o.CredentialsDir, prefix+FlagCredentialsDir, "", "Folder holding the credentials as files named like the keys of Flux's GitRepository Secret (a mounted Secret): username and password, or bearerToken, for HTTPS; identity and known_hosts (and password, the key's passphrase) for SSH. The flags above win over it.")
}

// credentialFiles are the keys of a Flux GitRepository Secret, as files of CredentialsDir.
const (
	credUsername    = "username"
	credPassword    = "password"
	credBearerToken = "bearerToken"
	credIdentity    = "identity"
	credKnownHosts  = "known_hosts"
)

// resolved returns the options with CredentialsDir's files filling the credential options no
// flag set: HTTPS from username and password (or bearerToken), SSH from identity and
// known_hosts, whose password is then the key's passphrase, as Flux reads such a Secret.
func (o RemoteFlags) resolved() (RemoteFlags, error) {
	if o.CredentialsDir == "" {
		return o, nil
	}
	has := func(name string) (string, bool) {
		p := filepath.Join(o.CredentialsDir, name)
		_, err := os.Stat(p)
		return p, err == nil
	}
	if _, err := os.Stat(o.CredentialsDir); err != nil {
		return o, fmt.Errorf("--%s: %w", FlagCredentialsDir, err)
	}
	fill := func(field *string, name string) {
		if p, ok := has(name); ok && *field == "" {
			*field = p
		}
	}
	if _, ssh := has(credIdentity); ssh {
		fill(&o.SSHKeyFile, credIdentity)
		fill(&o.SSHKnownHostsFile, credKnownHosts)
		fill(&o.SSHKeyPassphraseFile, credPassword)
		return o, nil
	}
	fill(&o.PasswordFile, credPassword)
	fill(&o.TokenFile, credBearerToken)
	if p, ok := has(credUsername); ok && o.Username == "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return o, fmt.Errorf("reading credentials file: %w", err)
		}
		o.Username = strings.TrimRight(string(b), "\r\n")
	}
	return o, nil
}

// Inherit copies the branch, attempts, timeouts and limits of main into a second remote's
// options, so one set of flags governs both.
//
// A second remote given no credentials of its own uses main's: one writer's credential (one
// Secret) usually reaches both repositories, as deploy/ mounts it.
func (o *RemoteFlags) Inherit(main RemoteFlags) {
	o.Branch, o.PushAttempts, o.PushTimeout = main.Branch, main.PushAttempts, main.PushTimeout
	o.MaxFetchBytes, o.MaxFileBytes, o.StallTimeout = main.MaxFetchBytes, main.MaxFileBytes, main.StallTimeout
	if o.Username == "" && o.PasswordFile == "" && o.TokenFile == "" && o.SSHKeyFile == "" && o.CredentialsDir == "" {
		o.Username, o.PasswordFile, o.TokenFile = main.Username, main.PasswordFile, main.TokenFile
		o.SSHKeyFile, o.SSHKeyPassphraseFile, o.SSHKnownHostsFile = main.SSHKeyFile, main.SSHKeyPassphraseFile, main.SSHKnownHostsFile
		o.CredentialsDir = main.CredentialsDir
	}
}

// Secrets returns the credentials the options load (password, token, SSH key passphrase), so a
// writer can keep them out of what it writes.
func (o *RemoteFlags) Secrets() ([]string, error) {
	r, err := o.resolved()
	if err != nil {
		return nil, err
	}
	o = &r
	auth, err := LoadAuthFiles(o.Username, o.PasswordFile, o.TokenFile, "", "")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range []string{auth.Password, auth.Token} {
		if s != "" {
			out = append(out, s)
		}
	}
	if o.SSHKeyPassphraseFile != "" {
		b, err := os.ReadFile(o.SSHKeyPassphraseFile)
		if err != nil {
			return nil, fmt.Errorf("reading credentials file: %w", err)
		}
		if s := strings.TrimRight(string(b), "\r\n"); s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// Open returns the Repository the options describe.
func (o *RemoteFlags) Open(extra ...Option) (*Repository, error) {
	if o.URL == "" {
		return nil, errors.New("--" + FlagGit + " is required")
	}
	if o.StallTimeout < 0 || o.PushTimeout < 0 {
		return nil, fmt.Errorf("--%s and --%s must not be negative", FlagStallTimeout, FlagPushTimeout)
	}
	r, err := o.resolved()
	if err != nil {
		return nil, err
	}
	o = &r
	auth, err := LoadAuthFiles(o.Username, o.PasswordFile, o.TokenFile, o.SSHKeyFile, o.SSHKnownHostsFile)
	if err != nil {
		return nil, err
	}
	if o.SSHKeyPassphraseFile != "" {
		b, err := os.ReadFile(o.SSHKeyPassphraseFile)
		if err != nil {
			return nil, fmt.Errorf("reading credentials file: %w", err)
		}
		auth.SSHKeyPassphrase = strings.TrimRight(string(b), "\r\n")
	}
	b := DefaultBackoff
	if o.PushAttempts > 0 {
		b.MaxAttempts = o.PushAttempts
	}
	if o.PushTimeout > 0 {
		b.MaxElapsed = o.PushTimeout
	}
	return New(o.URL, o.Branch, append([]Option{WithAuth(auth), WithBackoff(b), WithLimits(o.MaxFetchBytes, o.MaxFileBytes), WithStallTimeout(o.StallTimeout)}, extra...)...)
}
