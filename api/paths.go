package api

import "strings"

// Where the inputs live in the GitOps repository.
const (
	SettingsPath      = "gitbroker.yaml"
	ConfigurationsDir = "configurations"
	InventoryDir      = "inventory"
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

// InventoryPath is the file a node's agent writes.
func InventoryPath(node string) string { return InventoryDir + "/" + node + ".yaml" }
