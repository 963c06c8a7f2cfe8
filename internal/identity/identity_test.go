package identity_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/internal/identity"
)

func TestBytes(t *testing.T) {
	// Built at run time: the compiler may let two []byte conversions of one constant share
	// its read-only bytes.
	a := bytes.Repeat([]byte("same content"), 1)
	b := bytes.Repeat([]byte("same content"), 1)
	require.True(t, identity.Bytes(a, a))
	require.True(t, identity.Bytes(a, a[:len(a):len(a)]))
	require.False(t, identity.Bytes(a, b), "equal contents in two arrays")
	require.False(t, identity.Bytes(a, a[:4]), "a prefix")
	require.True(t, identity.Bytes(nil, []byte{}))
}

func TestMap(t *testing.T) {
	a := map[string][]byte{"f": nil}
	b := map[string][]byte{"f": nil}
	alias := a
	require.True(t, identity.Map(a, alias))
	require.False(t, identity.Map(a, b), "equal entries in two maps")
	require.False(t, identity.Map(a, nil))
	require.True(t, identity.Map[map[string]int](nil, nil))
}
