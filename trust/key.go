package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Namespace is the SSHSIG namespace git signs commits in.
const Namespace = "git"

// hash is what ssh-keygen -Y sign uses by default, and so git.
const hash = sshsig.HashSHA512

// Signer signs commits with one SSH key, or with an SSH certificate when one lies beside the key
// (<key>-cert.pub, as ssh-keygen -s writes it): the signature then carries the certificate, so
// an allowed_signers cert-authority line verifies it.
type Signer struct {
	signer ssh.Signer
	// Path is the private key's file.
	Path string
}

// Sign returns payload's armored SSH signature in namespace git, as it goes into a commit's
// gpgsig header.
func (s *Signer) Sign(payload []byte) ([]byte, error) {
	sig, err := sshsig.Sign(bytes.NewReader(payload), s.signer, hash, Namespace)
	if err != nil {
		return nil, fmt.Errorf("signing with %s: %w", s.Path, err)
	}
	return sshsig.Armor(sig), nil
}

// PublicKey is the key (or certificate) signatures carry.
func (s *Signer) PublicKey() ssh.PublicKey { return s.signer.PublicKey() }

// AllowedSignersLine is the line of .gitbroker/allowed_signers that enrolls this key as
// principal. A certificate's line names its CA instead (cert-authority), which enrolls every
// key it signs for that principal.
func (s *Signer) AllowedSignersLine(principal string) string {
	if c, ok := s.signer.PublicKey().(*ssh.Certificate); ok {
		return principal + " cert-authority " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(c.SignatureKey)))
	}
	return principal + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.signer.PublicKey())))
}

// LoadSigner reads the OpenSSH private key at path (and <path>-cert.pub if it exists).
func LoadSigner(path string) (*Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading signing key: %w", err)
	}
	raw, err := ssh.ParseRawPrivateKey(data)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		return nil, fmt.Errorf("signing key %s is protected by a passphrase; a daemon needs a key without one (keep it in a Secret or on the node's disk, readable only by the writer)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("signing key %s is not an SSH private key: %v", path, err)
	}
	signer, err := ssh.NewSignerFromKey(raw)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %v", path, err)
	}
	s := &Signer{signer: signer, Path: path}
	certData, err := os.ReadFile(path + "-cert.pub")
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading signing certificate: %w", err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(certData)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %s-cert.pub: %v", path, err)
	}
	cert, ok := pub.(*ssh.Certificate)
	if !ok {
		return nil, fmt.Errorf("signing certificate %s-cert.pub holds a plain key, not a certificate", path)
	}
	if !bytes.Equal(cert.Key.Marshal(), signer.PublicKey().Marshal()) {
		return nil, fmt.Errorf("signing certificate %s-cert.pub is for another key", path)
	}
	if cert.CertType != ssh.UserCert {
		return nil, fmt.Errorf("signing certificate %s-cert.pub is a host certificate; git verifies user certificates only", path)
	}
	cs, err := ssh.NewCertSigner(cert, signer)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %s-cert.pub: %v", path, err)
	}
	s.signer = cs
	return s, nil
}

// LoadOrCreateSigner is LoadSigner, except that a missing key is made (ed25519, as ssh-keygen -t
// ed25519 would) and written to path with its public key at <path>.pub; created says so, so
// the caller can print the key's allowed_signers line for a person to enroll.
func LoadOrCreateSigner(path, comment string) (s *Signer, created bool, err error) {
	if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		s, err := LoadSigner(path)
		return s, false, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("making a signing key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, false, fmt.Errorf("making a signing key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("making a signing key: %w", err)
	}
	keyFile := pem.EncodeToMemory(block)
	// O_EXCL: two agents started at once on one node never overwrite each other's key.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		s, err := LoadSigner(path)
		return s, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("writing signing key: %w", err)
	}
	if _, err := f.Write(keyFile); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("writing signing key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("writing signing key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("writing signing key: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, false, err
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))
	if comment != "" {
		line += " " + comment
	}
	if err := os.WriteFile(path+".pub", []byte(line+"\n"), 0o644); err != nil {
		return nil, false, fmt.Errorf("writing signing key's public key: %w", err)
	}
	s, err = LoadSigner(path)
	return s, true, err
}

// Verifies reports whether raw, a commit object as git stores it, carries a signature this
// key made, directly or through any certificate of it (a renewed certificate still knows the
// commits its key signed before): a writer's own commits (gitsync.WithOwnHistory).
func (s *Signer) Verifies(raw []byte) bool {
	payload, armored := SplitSignedCommit(raw)
	sig, err := VerifySignature(payload, armored)
	return err == nil && bytes.Equal(plainKey(sig.Key).Marshal(), plainKey(s.PublicKey()).Marshal())
}

// plainKey is the key a certificate certifies, or the key itself.
func plainKey(k ssh.PublicKey) ssh.PublicKey {
	if c, ok := k.(*ssh.Certificate); ok {
		return c.Key
	}
	return k
}
