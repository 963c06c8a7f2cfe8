package api

import (
	"bytes"
	"strconv"
)

// KindDeviceShares is the kind of a shard's device shares (SharesFile).
const KindDeviceShares = "DeviceShares"

// SharesFile is shard's file of device shares, beside its accepted tips (AcceptedFile): for each
// node in the shard (by its inventory ref's shard), the slots of each shared instance it may
// offer (docs/DESIGN.md, "Devices counted once across the cluster"). A node's shared instance
// it does not list has no slot there: its other nodes offer the device's capacity.
func SharesFile(shard string) string { return AcceptedFolder(shard) + "/shares.yaml" }

// DeviceShares is the content of a SharesFile.
type DeviceShares struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Nodes are the shares by node name, then by instance name.
	Nodes map[string]map[string]int `json:"nodes"`
}

// MaxSharesPerNode bounds what SharesOf takes for one node: more shared instances than a node
// could serve.
const MaxSharesPerNode = 4096

// SharesOf reads node's shares from a SharesFile as the renderer writes it, line by line and
// without decoding the rest: an agent reads its own entry of a file it fetched within its
// limits, and a file made to blow up a YAML decoder costs it nothing more. Lines it cannot read
// give no share.
func SharesOf(data []byte, node string) map[string]int {
	out := map[string]int{}
	state := 0 // 0 before nodes:, 1 in nodes:, 2 in node's block
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		switch {
		case state == 0 && bytes.Equal(line, []byte("nodes:")):
			state = 1
		case state == 1 && len(line) > 2 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ':
			if k, _, ok := bytes.Cut(line[2:], []byte(":")); ok && unquoteScalar(k) == node {
				state = 2
			}
		case state == 1 && (len(line) < 2 || line[0] != ' '):
			return out
		case state == 2 && len(line) > 4 && bytes.HasPrefix(line, []byte("    ")) && line[4] != ' ':
			k, v, ok := bytes.Cut(line[4:], []byte(": "))
			n, err := strconv.Atoi(string(v))
			if ok && err == nil && n > 0 && len(out) < MaxSharesPerNode {
				out[unquoteScalar(k)] = n
			}
		case state == 2:
			return out // the node's block ended
		}
	}
	return out
}
