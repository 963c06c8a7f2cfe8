package api

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	"golang.org/x/crypto/blake2b"
)

// MaxNameLength is the longest name gitbroker writes: a DNS-1123 label and a label value.
const MaxNameLength = 63

// DeviceKey is what names a device's instance: its id, and its node when it is not shared (an
// unshared device is a different instance on every node).
type DeviceKey struct {
	ID     string
	Node   string
	Shared bool
}

// AkriDigest is Akri's instance digest: BLAKE2b with a size-byte output over the device id, with
// the node name appended for unshared devices. Akri uses 3 bytes.
func AkriDigest(k DeviceKey, size int) string {
	s := k.ID
	if !k.Shared {
		s += k.Node
	}
	h, err := blake2b.New(size, nil)
	if err != nil {
		// Sizes are constants in 1..64; New only fails outside that range.
		panic(err)
	}
	h.Write([]byte(s))
	return hex.EncodeToString(h.Sum(nil))
}

// InstanceDigests gives each device of one Configuration its instance digest: Akri's 3-byte
// digest, and for every member of a group that shares one, 6 bytes (then 16), so two devices never
// share a name. It is deterministic in the set of keys, whatever their order. collisions lists the
// groups that shared a 3-byte digest, each sorted, in digest order.
func InstanceDigests(keys []DeviceKey) (digests map[DeviceKey]string, collisions [][]DeviceKey) {
	digests = make(map[DeviceKey]string, len(keys))
	pending := slices.Clone(keys)
	for _, size := range []int{3, 6, 16} {
		groups := map[string][]DeviceKey{}
		for _, k := range pending {
			d := AkriDigest(k, size)
			digests[k] = d
			groups[d] = append(groups[d], k)
		}
		pending = nil
		for _, d := range slices.Sorted(maps.Keys(groups)) {
			g := groups[d]
			if len(g) < 2 {
				continue
			}
			slices.SortFunc(g, compareKeys)
			g = slices.CompactFunc(g, func(a, b DeviceKey) bool { return a == b })
			if len(g) < 2 {
				continue
			}
			if size == 3 {
				collisions = append(collisions, g)
			}
			pending = append(pending, g...)
		}
		if len(pending) == 0 {
			break
		}
	}
	return digests, collisions
}

func compareKeys(a, b DeviceKey) int {
	if c := strings.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	if c := strings.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	switch {
	case a.Shared == b.Shared:
		return 0
	case a.Shared:
		return -1
	}
	return 1
}

// InstanceName is Akri's "<configuration>-<digest>" with '.' and '/' replaced, shortened if needed.
func InstanceName(configuration, digest string) string {
	n := strings.NewReplacer(".", "-", "/", "-").Replace(configuration + "-" + digest)
	return Shorten(n)
}

// Shorten keeps names within 63 characters: a long name keeps its first 54 characters and gets a
// hash of the whole name, so different long names stay different and the same name stays the same.
func Shorten(name string) string {
	if len(name) <= MaxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	prefix := strings.TrimRight(name[:MaxNameLength-9], "-.")
	return prefix + "-" + hex.EncodeToString(sum[:4])
}

// InstanceDigest is a device whose instance does not use Akri's 3-byte digest (a digest
// collision). Names are sticky: the render metadata lists these, and the renderer publishes
// them to the agents (InstanceDigestsPath), so every node names its instances as the renderer
// rendered them.
type InstanceDigest struct {
	Device string `json:"device"`
	// Node is the node of an unshared device; empty for a shared one.
	Node   string `json:"node,omitempty"`
	Digest string `json:"digest"`
	// Cluster, with gitbroker.yaml spec.clusters, is the cluster whose render gave the digest:
	// the agents of its nodes alone name the device so. A shared device's id may be seen in
	// several clusters (a camera's private address, at every site) and collide in one of them
	// only; the others name it by Akri's digest.
	Cluster string `json:"cluster,omitempty"`
}

// Key is the device key of d.
func (d InstanceDigest) Key() DeviceKey {
	return DeviceKey{ID: d.Device, Node: d.Node, Shared: d.Node == ""}
}

// InstanceDigestsPath, on the renderer's publication (gitbroker/configurations), lists by
// Configuration ("<namespace>/<name>") the devices whose instances do not use Akri's 3-byte
// digest; absent when there are none.
const InstanceDigestsPath = "instance-digests.yaml"

// MaxInstanceDigestsSize bounds the file an agent reads.
const MaxInstanceDigestsSize = 4 << 20
