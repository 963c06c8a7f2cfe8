package verify

import (
	"fmt"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/publication"
)

// The Configurations the renderer verified, published for the agents (docs/DESIGN.md, "Trust: an
// edge credential reaches only its own node": agents read Configurations only from the renderer's
// verified commit), which they read with package publication. The branch lives in the
// repository that holds the node refs (--inventory-git when the fleet has one), so an agent
// reads it where it writes, and holds no credential for the people's branch.
const (
	// ConfigurationsBranch holds gitbroker.yaml and configurations/ exactly as the renderer
	// verified and rendered them, in commits the renderer signs.
	ConfigurationsBranch = api.ConfigurationsBranch
	// TrailerConfigurations marks a commit of ConfigurationsBranch (api.TrailerConfigurations).
	TrailerConfigurations = api.TrailerConfigurations
	// TrailerPublication, on an agent's inventory commit, names the publication it used.
	TrailerPublication = api.TrailerPublication
)

// PublishedChange is the commit that publishes, on ConfigurationsBranch, the settings and
// Configurations of in: what the renderer verified (and rendered) from source commit in.Source,
// and the instance digests the render gave that are not Akri's 3-byte ones (the render
// metadata's, api.InstanceDigestsPath), nil when there are none.
func PublishedChange(in *Inputs, instanceDigests []byte, author gitsync.Signature) *gitsync.Change {
	files := map[string][]byte{}
	for p, b := range in.Inputs {
		if publication.IsPublished(p) && p != api.InstanceDigestsPath {
			files[p] = b
		}
	}
	if len(instanceDigests) > 0 {
		files[api.InstanceDigestsPath] = instanceDigests
	}
	return &gitsync.Change{
		Owned:    append([]string{api.ConfigurationsDir + "/"}, publication.Files...),
		Files:    files,
		Message:  fmt.Sprintf("configurations: as verified at %s, for the agents", short(in.Source)),
		Trailers: []gitsync.Trailer{{Key: TrailerConfigurations, Value: in.Source}},
		Author:   author,
	}
}
