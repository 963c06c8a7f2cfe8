package render

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// maxNameLength is the longest name gitbroker writes: a DNS-1123 label and a label value.
const maxNameLength = api.MaxNameLength

func akriDigest(id, node string, shared bool, size int) string {
	return api.AkriDigest(api.DeviceKey{ID: id, Node: node, Shared: shared}, size)
}

func instanceName(configuration, digest string) string {
	return api.InstanceName(configuration, digest)
}

// brokerName is a Pod broker's Deployment name: "<node>-<instance>" for shared devices, else
// "<instance>" (and for a shared device's one Deployment in DRA mode, node "").
func brokerName(instance, node string, shared bool) string {
	inst := strings.ReplaceAll(instance, ".", "-")
	if shared && node != "" {
		return shorten(node + "-" + inst)
	}
	return shorten(inst)
}

// legacyPodName is the name of the bare broker Pod renders before Deployments wrote (Akri's:
// "<node>-<instance>-pod" for shared devices, else "<instance>-pod"), read to keep placement
// when a repository is upgraded.
func legacyPodName(instance, node string, shared bool) string {
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

func shorten(name string) string { return api.Shorten(name) }

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
