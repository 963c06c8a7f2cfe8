package trust

import (
	"bytes"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"
)

// Identity is a writer's own signing key, of either kind git signs commits with: an OpenSSH key
// (*Signer: what allowed_signers enrolls and Flux verifies) or an OpenPGP key (*OpenPGPSigner:
// the renderer's, for Argo CD, which verifies GnuPG signatures only). It signs the writer's
// commits and tells them from anyone else's, one value however the key is kept, as
// fluxcd/pkg/git's signing entity is for Flux's image automation.
type Identity interface {
	// Sign returns payload's armored signature, as it goes into a commit's gpgsig header.
	Sign(payload []byte) ([]byte, error)
	// Verifies reports whether raw, a commit object as git stores it, carries a signature this
	// key made.
	Verifies(raw []byte) bool
	// String names the key in messages (its SSH fingerprint, or its OpenPGP identity and key id).
	String() string
}

var (
	_ Identity = (*Signer)(nil)
	_ Identity = (*OpenPGPSigner)(nil)
)

// String is the key's SHA256 fingerprint, as ssh-keygen -l prints it.
func (s *Signer) String() string { return ssh.FingerprintSHA256(s.PublicKey()) }

// Verifies reports whether raw, a commit object as git stores it, carries a valid signature this
// key made, checked at the commit's committer time (a key that expired since still knows what it
// signed while it was valid).
func (s *OpenPGPSigner) Verifies(raw []byte) bool {
	payload, armored := SplitSignedCommit(raw)
	return s.VerifiesDetached(payload, armored, CommitTime(raw))
}

// CommitTime is the committer time of raw, a commit object as git stores it; the zero time when
// it has none that parses.
func CommitTime(raw []byte) time.Time {
	end := bytes.Index(raw, []byte("\n\n"))
	if end < 0 {
		end = len(raw)
	}
	for _, l := range bytes.Split(raw[:end], []byte("\n")) {
		rest, ok := bytes.CutPrefix(l, []byte("committer "))
		if !ok {
			continue
		}
		// "Name <email> <unix seconds> <zone>"
		f := bytes.Fields(rest[bytes.LastIndexByte(rest, '>')+1:])
		if len(f) != 2 {
			return time.Time{}
		}
		sec, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return time.Time{}
		}
		return time.Unix(sec, 0)
	}
	return time.Time{}
}
