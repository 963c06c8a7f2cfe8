package render_test

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/blake2b"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

func digest3(id string) string {
	h, _ := blake2b.New(3, nil)
	h.Write([]byte(id))
	return hex.EncodeToString(h.Sum(nil))
}

// fleetSpec describes a generated fleet (see fixtures.Fleet).
type fleetSpec struct {
	nodes, configurations, devices int
	shards                         int
	seed                           int64
	// deviceAllocation, when set, is gitbroker.yaml's spec.deviceAllocation.
	deviceAllocation string
	// clusterCount, when set, splits the nodes into that many clusters of as many nodes each
	// (gitbroker.yaml spec.clusters), named site-<k>, each matching its nodes by one glob.
	clusterCount int
}

// clusters is the same fleet split into n clusters; nodes must be a multiple of n, with
// node-<k><i> in cluster k for the last digits i.
func (s fleetSpec) clusters(n int) fleetSpec {
	s.clusterCount = n
	return s
}

// generateFleet writes the repository of a fleet. The same spec always gives the same files.
func generateFleet(s fleetSpec) render.Tree {
	t := render.Tree(fixtures.Fleet(s.fixture()))
	if s.deviceAllocation != "" || s.clusterCount > 0 {
		var b strings.Builder
		b.WriteString("apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n")
		if s.deviceAllocation != "" {
			b.WriteString("  deviceAllocation: " + s.deviceAllocation + "\n")
		}
		if s.clusterCount > 0 {
			// Cluster k holds nodes node-<k><i> for every i of the last digits.
			per := s.nodes / s.clusterCount
			digits := len(strconv.Itoa(per - 1))
			b.WriteString("  clusters:\n")
			for k := range s.clusterCount {
				fmt.Fprintf(&b, "  - name: site-%d\n    labels: {ring: r%d}\n    nodes: [\"node-%0*d%s\"]\n", k, k%4, 4-digits, k, strings.Repeat("[0-9]", digits))
			}
		}
		t["gitbroker.yaml"] = []byte(b.String())
	}
	return t
}

// dra is the same fleet in DRA mode.
func (s fleetSpec) dra() fleetSpec {
	s.deviceAllocation = api.DeviceAllocationDRA
	return s
}

func (s fleetSpec) fixture() fixtures.FleetSpec {
	return fixtures.FleetSpec{Nodes: s.nodes, Configurations: s.configurations, Devices: s.devices, Shards: s.shards, Seed: s.seed}
}
