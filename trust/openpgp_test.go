package trust

import (
	"bytes"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/stretchr/testify/require"
)

func armored(t *testing.T, e *openpgp.Entity, private bool) []byte {
	var b bytes.Buffer
	typ := openpgp.PublicKeyType
	if private {
		typ = openpgp.PrivateKeyType
	}
	w, err := armor.Encode(&b, typ, nil)
	require.NoError(t, err)
	if private {
		require.NoError(t, e.SerializePrivate(w, nil))
	} else {
		require.NoError(t, e.Serialize(w))
	}
	require.NoError(t, w.Close())
	return b.Bytes()
}

func TestKeyRing(t *testing.T) {
	host, err := openpgp.NewEntity("GitHub", "", "noreply@github.com", nil)
	require.NoError(t, err)
	other, err := openpgp.NewEntity("Mallory", "", "mallory@example.com", nil)
	require.NoError(t, err)
	k, err := ParseKeyRing(map[string][]byte{".gitbroker/trusted-keys/github.asc": armored(t, host, false)})
	require.NoError(t, err)

	payload := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nmerge\n")
	sign := func(e *openpgp.Entity, p []byte) []byte {
		var b bytes.Buffer
		require.NoError(t, openpgp.ArmoredDetachSign(&b, e, bytes.NewReader(p), nil))
		return b.Bytes()
	}
	sig := sign(host, payload)
	require.True(t, IsOpenPGP(sig))
	who, err := k.Verify(payload, sig, time.Now())
	require.NoError(t, err)
	require.Contains(t, who, "noreply@github.com")
	require.Contains(t, who, "github.asc")

	// git takes the commit's time, then the signer signs, a second or a touch of a hardware
	// key later: a signature made after the commit's time verifies (it was refused as
	// "signature expired", which made the quick start test flaky under load).
	var late bytes.Buffer
	commitTime := time.Now()
	require.NoError(t, openpgp.ArmoredDetachSign(&late, host, bytes.NewReader(payload), &packet.Config{Time: func() time.Time { return commitTime.Add(3 * time.Second) }}))
	_, err = k.Verify(payload, late.Bytes(), commitTime)
	require.NoError(t, err)

	_, err = k.Verify(append([]byte("x"), payload...), sig, time.Now())
	require.Error(t, err, "a changed payload")
	_, err = k.Verify(payload, sign(other, payload), time.Now())
	require.Error(t, err, "a key that is not in the ring")

	_, err = ParseKeyRing(map[string][]byte{"a.asc": []byte("not a key")})
	require.ErrorContains(t, err, "a.asc: not an armored OpenPGP public key")
	_, err = ParseKeyRing(map[string][]byte{"secret.asc": armored(t, host, true)})
	require.ErrorContains(t, err, "secret.asc: holds a private key")
	var empty *KeyRing
	_, err = empty.Verify(payload, sig, time.Now())
	require.ErrorContains(t, err, "holds no key")
}
