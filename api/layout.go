package api

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// The refs of the GitOps repository, one per writer (docs/FORMATS.md).
const (
	// InventoryPrefix + <node> is the ref the agent of <node> writes.
	InventoryPrefix = "gitbroker/inventory/"
	// StatusBranch is the recorder's.
	StatusBranch = "gitbroker/status"
	// RenderedBranch is the renderer's; Flux or Argo CD applies it.
	RenderedBranch = "gitbroker/rendered"
	// ConfigurationsBranch holds gitbroker.yaml and configurations/ as the renderer verified
	// them, for the agents.
	ConfigurationsBranch = "gitbroker/configurations"
)

// InventoryBranch is the ref the agent of node writes.
func InventoryBranch(node string) string { return InventoryPrefix + node }

// Where the renderer says which tip of each writer's ref it accepted last, for a writer that
// restarts (its ref gone or moved back) to read without fetching the rendered tree, which at
// 100,000 nodes is far larger than an agent may fetch. The writers are spread over
// AcceptedShards shards by AcceptedShard; shard s is the file AcceptedFile(s) of the rendered
// tree (a copy of the render metadata's writers for that shard), and the branch
// AcceptedBranchPrefix + s shows its folder alone, signed by the renderer and moved with each
// render like a folder source's branch.
const (
	AcceptedBranchPrefix = "gitbroker/accepted/"
	AcceptedDir          = RenderedDir + ".gitbroker-accepted/"
	AcceptedShards       = 256
)

// AcceptedShard is the shard ("00" to "ff") that holds ref's accepted tip: the low byte of the
// ref's FNV-1a hash, which every writer computes alike.
func AcceptedShard(ref string) string {
	h := fnv.New32a()
	h.Write([]byte(ref))
	return AcceptedShardName(int(h.Sum32() % AcceptedShards))
}

// AcceptedShardName is the name of shard i (0 to AcceptedShards-1): two hex digits.
func AcceptedShardName(i int) string { return fmt.Sprintf("%02x", i) }

// AcceptedBranch is the branch a writer of ref reads its accepted tip from.
func AcceptedBranch(ref string) string { return AcceptedBranchPrefix + AcceptedShard(ref) }

// AcceptedFolder is shard's folder of the rendered tree, the one its branch shows.
func AcceptedFolder(shard string) string { return AcceptedDir + shard }

// AcceptedFile is shard's file: the accepted tips of its writers' refs.
func AcceptedFile(shard string) string { return AcceptedFolder(shard) + "/writers.yaml" }

// RendererBranch reports whether the renderer writes ref (a branch name, with or without
// "refs/heads/"), given its rendered branch: a push there is the renderer's own, which wakes no
// render.
func RendererBranch(ref, rendered string) bool {
	b := strings.TrimPrefix(ref, "refs/heads/")
	return b == rendered || b == ConfigurationsBranch || strings.HasPrefix(b, FolderBranchPrefix) || strings.HasPrefix(b, AcceptedBranchPrefix)
}

// What the renderer writes on its branch (render owns what is in them).
const (
	RenderedDir = "rendered/"
	HistoryDir  = "history/"
	// MetadataPath records the source commit and inputs of the last render that changed rendered/.
	MetadataPath = "rendered/.gitbroker-render.yaml"
)

// Where the inputs live in the GitOps repository.
const (
	SettingsPath      = "gitbroker.yaml"
	ConfigurationsDir = "configurations"
	InventoryDir      = "inventory"
)

// Files on the source branch that say who is trusted.
const (
	AllowedSignersPath = ".gitbroker/allowed_signers"
	TrustPath          = ".gitbroker/trust.yaml"
	// RevokedKeysPath lists retired keys and certificates (git's gpg.ssh.revocationFile):
	// how a node enrolled through an SSH CA is decommissioned.
	RevokedKeysPath = ".gitbroker/revoked_keys"
	TrustedKeysDir  = ".gitbroker/trusted-keys"
	// RendererKeysDir holds the OpenPGP public keys (*.asc) of a renderer that signs with
	// OpenPGP (for Argo CD), so that a plan, check or history, which holds no renderer key,
	// knows the renderer's commits; allowed_signers lists SSH keys only.
	RendererKeysDir = ".gitbroker/renderer-keys"
)

// Trailers of the renderer's commits. Only a commit that carries TrailerSourceCommit (and the
// render metadata) is a render: the renderer signs its folder branches' commits too
// (gitsync.TrailerCompanion marks them), and one of those must never be taken for its previous
// render.
const (
	TrailerSourceCommit = "Gitbroker-Source-Commit"
	TrailerInputsDigest = "Gitbroker-Inputs-Digest"
)

// IsYAML reports whether a path names a YAML file.
func IsYAML(p string) bool { return strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") }

// IsConfigurationPath reports whether p holds Configurations: any YAML file
// under configurations/.
func IsConfigurationPath(p string) bool {
	return strings.HasPrefix(p, ConfigurationsDir+"/") && IsYAML(p)
}

// IsInventoryPath reports whether p is a node's inventory: inventory/<node>.yaml.
func IsInventoryPath(p string) bool {
	return strings.HasPrefix(p, InventoryDir+"/") && strings.Count(p, "/") == 1 && IsYAML(p)
}

// InventoryFolder returns the folder directly under inventory/ that p is in or is, such as
// inventory/edge-d.yaml for inventory/edge-d.yaml/devices.yaml: inventory/ holds one file per
// node and no folders, so nothing in one is ever read, and saying so beats ignoring it.
func InventoryFolder(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, InventoryDir+"/")
	if !ok {
		return "", false
	}
	folder, _, nested := strings.Cut(rest, "/")
	if !nested || folder == "" {
		return "", false
	}
	return InventoryDir + "/" + folder, true
}

// InventoryFolderError says why a folder under inventory/ is not read; example is a file in it,
// if it has one.
func InventoryFolderError(example string) string {
	what := "a folder"
	if example != "" {
		what = fmt.Sprintf("a folder (holding %s)", example)
	}
	return what + "; inventory/ holds one file per node, inventory/<node>.yaml, and nothing in a folder is read"
}

// InventoryPath is the file a node's agent writes.
func InventoryPath(node string) string { return InventoryDir + "/" + node + ".yaml" }

// TrailerConfigurations marks a commit of ConfigurationsBranch and names the source commit its
// files come from; a render commit or a folder commit, which the renderer signs too, never
// carries it, so neither can be pushed there in its place.
const TrailerConfigurations = "Gitbroker-Configurations"

// TrailerPublication, on an agent's inventory commit, names the renderer's publication of
// Configurations (gitbroker/configurations) the agent discovered with, and its committer time
// (FormatPublication): a restarted agent never takes an older one.
const TrailerPublication = "Gitbroker-Publication"

// FormatPublication is TrailerPublication's value: the commit and its committer time.
func FormatPublication(commit string, when time.Time) string {
	return commit + " " + when.UTC().Format(time.RFC3339)
}

// ParsePublication reads TrailerPublication's value; ok is false when it is not one.
func ParsePublication(v string) (commit string, when time.Time, ok bool) {
	commit, t, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found || len(commit) != 40 {
		return "", time.Time{}, false
	}
	when, err := time.Parse(time.RFC3339, t)
	return commit, when, err == nil
}
