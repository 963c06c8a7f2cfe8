package trust

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Principals gitbroker's own writers sign as; any other principal is a person.
const (
	PrincipalRenderer   = "renderer"
	PrincipalRecorder   = "recorder"
	PrincipalNodePrefix = "node:"
	// PrincipalRecorderPrefix + <cluster> is the recorder of one cluster of several.
	PrincipalRecorderPrefix = "recorder:"
)

// NodePrincipal is the principal of the agent of node.
func NodePrincipal(node string) string { return PrincipalNodePrefix + node }

// RecorderPrincipal is the principal of the recorder of cluster (gitbroker.yaml spec.clusters);
// "" is the recorder of a repository of one cluster.
func RecorderPrincipal(cluster string) string {
	if cluster == "" {
		return PrincipalRecorder
	}
	return PrincipalRecorderPrefix + cluster
}

// IsPerson reports whether principal names a person rather than one of gitbroker's writers.
func IsPerson(principal string) bool {
	return principal != PrincipalRenderer && principal != PrincipalRecorder &&
		!strings.HasPrefix(principal, PrincipalNodePrefix) && !strings.HasPrefix(principal, PrincipalRecorderPrefix) &&
		!strings.ContainsAny(principal, "*?!")
}

// MaxAllowedSignersSize bounds the file: it is read on every render.
const MaxAllowedSignersSize = 1 << 20

// AllowedSigners is a parsed allowed_signers file (ssh-keygen(1), "ALLOWED SIGNERS").
type AllowedSigners struct {
	File    string
	entries []entry
	// revoked are the keys of a revocation file (git's gpg.ssh.revocationFile), by their
	// wire form.
	revoked map[string]bool
}

type entry struct {
	line       int
	principals []string // patterns, ssh's syntax: * and ?, a leading ! negates
	ca         bool
	key        ssh.PublicKey
	namespaces []string // nil: any
	after      time.Time
	before     time.Time
}

// LineError is a problem with one line of an allowed_signers file.
type LineError struct {
	File    string
	Line    int
	Message string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Message) }

// ParseAllowedSigners reads an allowed_signers file. Every line must parse: a line that does
// not would silently enroll nobody, and the file is reviewed like code.
func ParseAllowedSigners(file string, data []byte) (*AllowedSigners, error) {
	if len(data) > MaxAllowedSignersSize {
		return nil, &LineError{File: file, Line: 1, Message: fmt.Sprintf("file is %d bytes, above the limit of %d", len(data), MaxAllowedSignersSize)}
	}
	a := &AllowedSigners{File: file}
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		text := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fail := func(format string, args ...any) error {
			return &LineError{File: file, Line: n, Message: fmt.Sprintf(format, args...)}
		}
		principals, rest, ok := firstField(text)
		if !ok || rest == "" {
			return nil, fail("expected principals, optional options, a key type and a key")
		}
		e := entry{line: n}
		for _, p := range strings.Split(principals, ",") {
			if p == "" {
				return nil, fail("empty principal in %q", principals)
			}
			e.principals = append(e.principals, p)
		}
		key, _, options, leftover, err := ssh.ParseAuthorizedKey([]byte(rest))
		if err != nil {
			return nil, fail("principals %q: no key (%v)", principals, err)
		}
		if len(bytes.TrimSpace(leftover)) > 0 {
			return nil, fail("one key per line")
		}
		if _, isCert := key.(*ssh.Certificate); isCert {
			return nil, fail("a certificate cannot be a signer; name its CA's key with cert-authority")
		}
		e.key = key
		for _, o := range options {
			name, value, hasValue := strings.Cut(o, "=")
			value = strings.Trim(value, `"`)
			switch strings.ToLower(name) {
			case "cert-authority":
				e.ca = true
			case "namespaces":
				e.namespaces = strings.Split(value, ",")
			case "valid-after", "valid-before":
				if !hasValue {
					return nil, fail("option %s needs a time", name)
				}
				t, err := parseSSHTime(value)
				if err != nil {
					return nil, fail("option %s: %v", name, err)
				}
				if strings.EqualFold(name, "valid-after") {
					e.after = t
				} else {
					e.before = t
				}
			default:
				return nil, fail("unknown option %q (allowed: cert-authority, namespaces, valid-after, valid-before)", name)
			}
		}
		a.entries = append(a.entries, e)
	}
	return a, nil
}

// firstField splits off the principals field, which may be quoted.
func firstField(s string) (field, rest string, ok bool) {
	if strings.HasPrefix(s, `"`) {
		end := strings.Index(s[1:], `"`)
		if end < 0 {
			return "", "", false
		}
		return s[1 : end+1], strings.TrimSpace(s[end+2:]), true
	}
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, "", true
	}
	return s[:i], strings.TrimSpace(s[i:]), true
}

// parseSSHTime reads YYYYMMDD[HHMM[SS]][Z]. Times without Z are read as UTC too (ssh-keygen
// reads them in local time), so a verdict never depends on a machine's time zone.
func parseSSHTime(v string) (time.Time, error) {
	v = strings.TrimSuffix(strings.TrimSuffix(v, "Z"), "z")
	for _, layout := range []string{"20060102150405", "200601021504", "20060102"} {
		if len(v) == len(layout) {
			return time.ParseInLocation(layout, v, time.UTC)
		}
	}
	return time.Time{}, fmt.Errorf("%q is not YYYYMMDD, YYYYMMDDHHMM or YYYYMMDDHHMMSS", v)
}

// Errors a verification can end in; callers report them, and branch on ErrUnsigned.
var (
	ErrUnsigned  = errors.New("not signed")
	ErrNotSigner = errors.New("signed by a key allowed_signers does not enroll for that principal")
)

// Signature is a verified signature: the key that made it (a certificate for an SSH-CA
// enrolled signer) and its fingerprint, for reports.
type Signature struct {
	Key         ssh.PublicKey
	Fingerprint string
}

// VerifySignature checks that armored is a valid SSH signature of payload in namespace git,
// whatever its key. It says nothing about who may sign; Allows does.
func VerifySignature(payload, armored []byte) (*Signature, error) {
	if len(bytes.TrimSpace(armored)) == 0 {
		return nil, ErrUnsigned
	}
	if !bytes.Contains(armored, []byte("-----BEGIN SSH SIGNATURE-----")) {
		return nil, errors.New("not an SSH signature (OpenPGP and X.509 signatures are not accepted here)")
	}
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return nil, fmt.Errorf("reading SSH signature: %w", err)
	}
	if err := sshsig.Verify(bytes.NewReader(payload), sig, sig.PublicKey, sig.HashAlgorithm, Namespace); err != nil {
		return nil, fmt.Errorf("SSH signature does not verify: %w", err)
	}
	return &Signature{Key: sig.PublicKey, Fingerprint: ssh.FingerprintSHA256(sig.PublicKey)}, nil
}

// Allows reports whether allowed_signers lets the signature's key sign as principal at time when.
// git verify-commit passes the committer time, which the signer chooses; a writer accepting a new
// tip should pass the time it accepts it, so an expired certificate cannot backdate its way in.
func (a *AllowedSigners) Allows(sig *Signature, principal string, when time.Time) bool {
	if a.Revoked(sig.Key) {
		return false
	}
	for _, e := range a.entries {
		if e.permits(sig.Key, principal, when) {
			return true
		}
	}
	return false
}

// Principals lists the concrete principals the signature's key may sign as at time when: a
// plain key's literal principals, a certificate's principals that a cert-authority line of its
// CA admits. Sorted, each once.
func (a *AllowedSigners) Principals(sig *Signature, when time.Time) []string {
	seen := map[string]bool{}
	var candidates []string
	if c, ok := sig.Key.(*ssh.Certificate); ok {
		candidates = c.ValidPrincipals
	} else {
		for _, e := range a.entries {
			for _, p := range e.principals {
				if !strings.ContainsAny(p, "*?!") {
					candidates = append(candidates, p)
				}
			}
		}
	}
	for _, p := range candidates {
		if !seen[p] && a.Allows(sig, p, when) {
			seen[p] = true
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// MaxRevokedKeysSize bounds a revocation file: it is read on every render.
const MaxRevokedKeysSize = 1 << 20

// Revoke reads a revocation file, as git's gpg.ssh.revocationFile in its plain form (one
// public key or certificate per line, as authorized_keys and ssh-keygen -Y verify -r take
// them; blank lines and # comments ignored), and refuses every signature whose key is listed:
// a listed key is retired with every certificate of it, a listed certificate alone, and a
// listed CA key takes every certificate it signed with it. Every line must parse.
func (a *AllowedSigners) Revoke(file string, data []byte) error {
	if len(data) > MaxRevokedKeysSize {
		return &LineError{File: file, Line: 1, Message: fmt.Sprintf("file is %d bytes, above the limit of %d", len(data), MaxRevokedKeysSize)}
	}
	if a.revoked == nil {
		a.revoked = map[string]bool{}
	}
	for i, raw := range strings.Split(string(data), "\n") {
		text := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, _, _, leftover, err := ssh.ParseAuthorizedKey([]byte(text))
		if err != nil {
			return &LineError{File: file, Line: i + 1, Message: fmt.Sprintf("no public key or certificate (%v); a binary KRL is not read here, list the keys", err)}
		}
		if len(bytes.TrimSpace(leftover)) > 0 {
			return &LineError{File: file, Line: i + 1, Message: "one key per line"}
		}
		a.revoked[string(key.Marshal())] = true
	}
	return nil
}

// Revoked reports whether a signature's key is revoked: the key, or for a certificate the
// certificate itself, the key it certifies or the CA key that signed it.
func (a *AllowedSigners) Revoked(k ssh.PublicKey) bool {
	if len(a.revoked) == 0 || k == nil {
		return false
	}
	if a.revoked[string(k.Marshal())] {
		return true
	}
	if c, ok := k.(*ssh.Certificate); ok {
		return a.revoked[string(c.Key.Marshal())] || c.SignatureKey != nil && a.revoked[string(c.SignatureKey.Marshal())]
	}
	return false
}

// Empty reports whether the file enrolls nobody (only comments and blank lines).
func (a *AllowedSigners) Empty() bool { return len(a.entries) == 0 }

// Enrolled reports whether any line names principal and is valid at when, whatever its key:
// a node still enrolled keeps its last verified inventory while its ref is missing.
func (a *AllowedSigners) Enrolled(principal string, when time.Time) bool {
	for _, e := range a.entries {
		if matchList(e.principals, principal) && (e.after.IsZero() || !when.Before(e.after)) && (e.before.IsZero() || when.Before(e.before)) {
			return true
		}
	}
	return false
}

func (e *entry) permits(key ssh.PublicKey, principal string, when time.Time) bool {
	if !matchList(e.principals, principal) {
		return false
	}
	if e.namespaces != nil && !matchList(e.namespaces, Namespace) {
		return false
	}
	if !e.after.IsZero() && when.Before(e.after) {
		return false
	}
	if !e.before.IsZero() && !when.Before(e.before) {
		return false
	}
	cert, isCert := key.(*ssh.Certificate)
	if e.ca != isCert {
		return false
	}
	if !isCert {
		return bytes.Equal(key.Marshal(), e.key.Marshal())
	}
	if !bytes.Equal(cert.SignatureKey.Marshal(), e.key.Marshal()) || cert.CertType != ssh.UserCert || len(cert.ValidPrincipals) == 0 {
		// A certificate without principals would be valid for any (x/crypto's reading);
		// ssh-keygen refuses it for signatures, and so does this.
		return false
	}
	// The CA's signature over the certificate, its validity at the commit's time, and the
	// principal among those it was issued for.
	checker := ssh.CertChecker{
		IsUserAuthority: func(auth ssh.PublicKey) bool { return bytes.Equal(auth.Marshal(), e.key.Marshal()) },
		Clock:           func() time.Time { return when },
	}
	return checker.CheckCert(principal, cert) == nil
}

// matchList is ssh's match_pattern_list: a negated pattern that matches refuses, else any
// pattern that matches admits.
func matchList(patterns []string, s string) bool {
	matched := false
	for _, p := range patterns {
		if neg := strings.HasPrefix(p, "!"); neg {
			if match(p[1:], s) {
				return false
			}
		} else if match(p, s) {
			matched = true
		}
	}
	return matched
}

// match is ssh's glob: * any run of characters, ? one character, nothing else special.
func match(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := len(s); i >= 0; i-- {
				if match(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			p, s = p[1:], s[1:]
		default:
			if s == "" || p[0] != s[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
	}
	return s == ""
}
