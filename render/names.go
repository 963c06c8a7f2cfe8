package render

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"golang.org/x/crypto/blake2b"
)

// maxNameLength is the longest name gitbroker writes: a DNS-1123 label and a label value.
const maxNameLength = 63

// akriDigest is Akri's instance digest: BLAKE2b with a size-byte output over the device id, with
// the node name appended for unshared devices. Akri uses 3 bytes; collisions escalate to 6.
func akriDigest(id, node string, shared bool, size int) string {
	s := id
	if !shared {
		s += node
	}
	h, err := blake2b.New(size, nil)
	if err != nil {
		// Sizes are constants in 1..64; New only fails outside that range.
		panic(err)
	}
	h.Write([]byte(s))
	return hex.EncodeToString(h.Sum(nil))
}

// instanceName is Akri's "<configuration>-<digest>" with '.' and '/' replaced, shortened if needed.
func instanceName(configuration, digest string) string {
	n := strings.NewReplacer(".", "-", "/", "-").Replace(configuration + "-" + digest)
	return shorten(n)
}

// podName is Akri's broker Pod name: "<node>-<instance>-pod" for shared devices, else "<instance>-pod".
func podName(instance, node string, shared bool) string {
	inst := strings.ReplaceAll(instance, ".", "-")
	if shared {
		return shorten(node + "-" + inst + "-pod")
	}
	return shorten(inst + "-pod")
}

func instanceServiceName(instance string) string {
	return shorten(strings.ReplaceAll(instance, ".", "-") + "-svc")
}

func configurationServiceName(configuration string) string {
	return shorten(strings.ReplaceAll(configuration, ".", "-") + "-svc")
}

func jobName(instance, runHash string) string {
	return shorten(strings.ReplaceAll(instance, ".", "-") + "-" + runHash + "-job")
}

// shorten keeps names within 63 characters: a long name keeps its first 54 characters and gets a
// hash of the whole name, so different long names stay different and the same name stays the same.
func shorten(name string) string {
	if len(name) <= maxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	prefix := strings.TrimRight(name[:maxNameLength-9], "-.")
	return prefix + "-" + hex.EncodeToString(sum[:4])
}

// hashHex returns the first n hex characters of the SHA-256 of the parts, separated so that
// ("ab","c") and ("a","bc") differ.
func hashHex(n int, parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		var l [8]byte
		for i, v := 0, len(p); i < 8; i++ {
			l[i] = byte(v >> (8 * i))
		}
		h.Write(l[:])
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:n]
}
