package render_test

import (
	"encoding/hex"
	"fmt"
	"math/rand"
	"strings"

	"github.com/gitbroker/gitbroker/render"
	"golang.org/x/crypto/blake2b"
)

func digest3(id string) string {
	h, _ := blake2b.New(3, nil)
	h.Write([]byte(id))
	return hex.EncodeToString(h.Sum(nil))
}

// fleetSpec describes a generated fleet: nodes, Configurations (half Pod brokers with Services,
// half Job brokers) and devices spread over them, about a third of them shared by 2-3 nodes.
type fleetSpec struct {
	nodes, configurations, devices int
	shards                         int
	seed                           int64
}

// generateFleet writes the repository of a fleet. The same spec always gives the same files.
func generateFleet(s fleetSpec) render.Tree {
	rng := rand.New(rand.NewSource(s.seed))
	tree := render.Tree{}
	for c := 0; c < s.configurations; c++ {
		name := fmt.Sprintf("cfg-%02d", c)
		shards := ""
		if s.shards > 1 {
			shards = fmt.Sprintf("  shards: %d\n", s.shards)
		}
		if c%2 == 0 {
			cfg := strings.Replace(podConfig, "name: cam", "name: "+name, 1)
			cfg = strings.Replace(cfg, "apiVersion: akri.sh/v0", "apiVersion: gitbroker.dev/v1alpha1", 1)
			cfg = strings.Replace(cfg, "capacity: 1", "capacity: 2", 1)
			tree["configurations/"+name+".yaml"] = []byte(cfg + shards)
		} else {
			tree["configurations/"+name+".yaml"] = []byte(jobConfig(name, shards))
		}
	}
	type dev struct {
		id     string
		shared bool
	}
	perNode := make([]map[string][]dev, s.nodes)
	for i := range perNode {
		perNode[i] = map[string][]dev{}
	}
	for d := 0; d < s.devices; d++ {
		cfg := fmt.Sprintf("cfg-%02d", rng.Intn(s.configurations))
		id := fmt.Sprintf("dev-%06d", d)
		node := rng.Intn(s.nodes)
		if rng.Intn(3) == 0 && s.nodes > 1 {
			for k := 0; k < 2+rng.Intn(2); k++ {
				n := (node + k) % s.nodes
				perNode[n][cfg] = append(perNode[n][cfg], dev{id, true})
			}
			continue
		}
		perNode[node][cfg] = append(perNode[node][cfg], dev{id, false})
	}
	for n := range perNode {
		node := fmt.Sprintf("node-%04d", n)
		var b strings.Builder
		b.WriteString("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: " + node + "\nspec:\n  configurations:\n")
		for c := 0; c < s.configurations; c++ {
			cfg := fmt.Sprintf("cfg-%02d", c)
			devs := perNode[n][cfg]
			if len(devs) == 0 {
				continue
			}
			b.WriteString("  - name: " + cfg + "\n    devices:\n")
			for _, d := range devs {
				fmt.Fprintf(&b, "    - id: %s\n      shared: %t\n      properties:\n        DEVICE: %s\n        SERIAL: %q\n", d.id, d.shared, d.id, "SN-"+d.id)
			}
		}
		tree["inventory/"+node+".yaml"] = []byte(b.String())
	}
	return tree
}
