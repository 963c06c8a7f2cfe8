package trust

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// IsOpenPGPPrivateKey reports whether a key file holds an armored OpenPGP private key rather
// than an OpenSSH one.
func IsOpenPGPPrivateKey(data []byte) bool {
	return bytes.Contains(data, []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----"))
}

// OpenPGPSigner signs commits with an OpenPGP key, as git does with gpg.format=openpgp: what
// Argo CD verifies (it verifies GnuPG signatures only), and Flux too. Only the renderer signs
// this way; every other writer is checked against allowed_signers, which holds SSH keys.
type OpenPGPSigner struct {
	entity *openpgp.Entity
	// Path is the private key's file.
	Path string
}

// LoadOpenPGPSigner reads an armored OpenPGP private key without a passphrase (gpg
// --export-secret-keys --armor of a key made with an empty passphrase).
func LoadOpenPGPSigner(path string) (*OpenPGPSigner, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	es, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: not an armored OpenPGP private key: %v", path, err)
	}
	if len(es) != 1 {
		return nil, fmt.Errorf("%s: holds %d keys; give the renderer one", path, len(es))
	}
	e := es[0]
	if e.PrivateKey == nil {
		return nil, fmt.Errorf("%s: holds a public key only", path)
	}
	if e.PrivateKey.Encrypted {
		return nil, fmt.Errorf("%s: the key is protected by a passphrase; a daemon cannot type one", path)
	}
	return &OpenPGPSigner{entity: e, Path: path}, nil
}

// NewOpenPGPKey makes an ed25519 OpenPGP key for name and email, for tests and for people
// without gpg at hand, and returns it armored: the private key, and the public key.
func NewOpenPGPKey(name, email string) (private, public []byte, err error) {
	e, err := openpgp.NewEntity(name, "", email, &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA, Time: time.Now})
	if err != nil {
		return nil, nil, err
	}
	var priv, pub bytes.Buffer
	w, err := armor.Encode(&priv, openpgp.PrivateKeyType, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := e.SerializePrivate(w, nil); err != nil {
		return nil, nil, err
	}
	w.Close()
	w, err = armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := e.Serialize(w); err != nil {
		return nil, nil, err
	}
	w.Close()
	return append(priv.Bytes(), '\n'), append(pub.Bytes(), '\n'), nil
}

// Sign returns payload's armored detached OpenPGP signature, as it goes into a commit's gpgsig
// header.
func (s *OpenPGPSigner) Sign(payload []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.entity, bytes.NewReader(payload), nil); err != nil {
		return nil, fmt.Errorf("signing with %s: %w", s.Path, err)
	}
	return append(b.Bytes(), '\n'), nil
}

// KeyID is the signing key's long id in upper-case hex, as gpg and Argo CD's AppProject
// signatureKeys write it.
func (s *OpenPGPSigner) KeyID() string { return fmt.Sprintf("%016X", s.signingKey().KeyId) }

func (s *OpenPGPSigner) signingKey() *packet.PublicKey {
	if k, ok := s.entity.SigningKey(time.Now()); ok {
		return k.PublicKey
	}
	return s.entity.PrimaryKey
}

// PublicKey is the key armored, as Flux's verify Secret and argocd-gpg-keys-cm hold it.
func (s *OpenPGPSigner) PublicKey() ([]byte, error) {
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		return nil, err
	}
	if err := s.entity.Serialize(w); err != nil {
		return nil, err
	}
	w.Close()
	return append(b.Bytes(), '\n'), nil
}

// VerifiesDetached reports whether armored is this key's valid signature of payload, made at when
// (or after it).
func (s *OpenPGPSigner) VerifiesDetached(payload, armored []byte, when time.Time) bool {
	if !IsOpenPGP(armored) {
		return false
	}
	if made, ok := signatureTime(armored); ok && made.After(when) {
		when = made // signed after the commit's time was taken (KeyRing.Verify)
	}
	cfg := &packet.Config{Time: func() time.Time { return when }}
	_, err := openpgp.CheckArmoredDetachedSignature(openpgp.EntityList{s.entity}, bytes.NewReader(payload), bytes.NewReader(armored), cfg)
	return err == nil
}

// String names the key for messages.
func (s *OpenPGPSigner) String() string {
	for id := range s.entity.Identities {
		return strings.TrimSpace(id) + " (OpenPGP " + s.KeyID() + ")"
	}
	return "OpenPGP " + s.KeyID()
}
