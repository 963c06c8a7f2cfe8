package trust

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// MaxTrustedKeys bounds the OpenPGP key files read from .gitbroker/trusted-keys/.
const MaxTrustedKeys = 256

// IsOpenPGP reports whether an armored commit signature is OpenPGP's (what git hosts use to sign
// the merges they make) rather than SSH's.
func IsOpenPGP(armored []byte) bool {
	return bytes.Contains(armored, []byte("-----BEGIN PGP SIGNATURE-----"))
}

// IsOpenPGPPublicKey reports whether data is an armored OpenPGP public key (what a renderer
// that signs for Argo CD pins with --renderer-key).
func IsOpenPGPPublicKey(data []byte) bool {
	return bytes.Contains(data, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----"))
}

// KeyRing is people's OpenPGP public keys: the armored *.asc files of .gitbroker/trusted-keys/.
// Everyone in it is a person; nothing in it can sign as a node, the renderer or the recorder.
type KeyRing struct {
	entities openpgp.EntityList
	files    map[uint64]string // key id -> the file that holds it, for reports
}

// ParseKeyRing reads armored OpenPGP public key files, keyed by path. Every file must parse:
// one that does not would silently trust nobody.
func ParseKeyRing(files map[string][]byte) (*KeyRing, error) {
	if len(files) > MaxTrustedKeys {
		return nil, fmt.Errorf("%d OpenPGP key files; at most %d are read", len(files), MaxTrustedKeys)
	}
	k := &KeyRing{files: map[uint64]string{}}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		data := files[name]
		if len(data) > MaxAllowedSignersSize {
			return nil, fmt.Errorf("%s: larger than %d bytes", name, MaxAllowedSignersSize)
		}
		es, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: not an armored OpenPGP public key: %v", name, err)
		}
		for _, e := range es {
			if e.PrivateKey != nil {
				return nil, fmt.Errorf("%s: holds a private key; commit only public keys", name)
			}
			k.files[e.PrimaryKey.KeyId] = name
			for _, sub := range e.Subkeys {
				k.files[sub.PublicKey.KeyId] = name
			}
		}
		k.entities = append(k.entities, es...)
	}
	return k, nil
}

// signatureTime is when an armored detached OpenPGP signature says it was made.
func signatureTime(armored []byte) (time.Time, bool) {
	block, err := armor.Decode(bytes.NewReader(armored))
	if err != nil {
		return time.Time{}, false
	}
	p, err := packet.Read(block.Body)
	if err != nil {
		return time.Time{}, false
	}
	if sig, ok := p.(*packet.Signature); ok {
		return sig.CreationTime, true
	}
	return time.Time{}, false
}

// Empty reports whether the key ring holds no key.
func (k *KeyRing) Empty() bool { return k == nil || len(k.entities) == 0 }

// Verify checks an OpenPGP signature of payload at time when and returns who made it: the key's
// first identity and the file it came from.
func (k *KeyRing) Verify(payload, armored []byte, when time.Time) (string, error) {
	if k.Empty() {
		return "", fmt.Errorf("an OpenPGP signature, and .gitbroker/trusted-keys/ holds no key")
	}
	// git takes the commit's time, then the signer signs: the signature may be made seconds
	// later (a hardware key waits for a touch), and go-crypto takes a signature made after the
	// time it checks at for expired. The key is checked when the signature was made, which is
	// no less trustworthy than the commit's time: the signer chose both.
	if made, ok := signatureTime(armored); ok && made.After(when) {
		when = made
	}
	cfg := &packet.Config{Time: func() time.Time { return when }}
	e, err := openpgp.CheckArmoredDetachedSignature(k.entities, bytes.NewReader(payload), bytes.NewReader(armored), cfg)
	if err != nil {
		return "", fmt.Errorf("OpenPGP signature does not verify against .gitbroker/trusted-keys/: %v", err)
	}
	var ids []string
	for id := range e.Identities {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return fmt.Sprintf("%s (%s)", strings.Join(ids, ", "), k.files[e.PrimaryKey.KeyId]), nil
}
