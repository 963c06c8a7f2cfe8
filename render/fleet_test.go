package render_test

import (
	"encoding/hex"

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
}

// generateFleet writes the repository of a fleet. The same spec always gives the same files.
func generateFleet(s fleetSpec) render.Tree {
	t := render.Tree(fixtures.Fleet(s.fixture()))
	if s.deviceAllocation != "" {
		t["gitbroker.yaml"] = []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  deviceAllocation: " + s.deviceAllocation + "\n")
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
