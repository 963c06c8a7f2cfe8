package render

import (
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// shares splits each shared instance's capacity among the nodes that report it (docs/DESIGN.md,
// "Devices counted once across the cluster"): a slot for each broker where the brokers were
// placed, then the rest over the nodes in that order (the brokers' nodes, then the other live
// nodes, by name), round and round. A lost node gets none while another reports the device. So
// the nodes together offer the device's capacity, never capacity times the nodes. What is kept
// as it was (an instance frozen by a node's invalid inventory, a Configuration whose file is
// invalid) keeps its shares as they were, with its brokers. By node, then instance; only the
// slots a node has.
func (p *pass) shares() map[string]map[string]int {
	out := map[string]map[string]int{}
	add := func(node, inst string, n int) {
		if out[node] == nil {
			out[node] = map[string]int{}
		}
		out[node][inst] += n
	}
	// carried are the instances whose shares are kept as they were, by name: frozen ones, and
	// in a scoped pass those of the Configurations out of its scope, carried with their files.
	carried, placed := map[string]bool{}, map[string]bool{}
	for k, list := range p.placement.instances {
		cfg := p.loaded.configs[k]
		if cfg == nil {
			continue
		}
		outOfScope := p.scoping.scope != nil && !p.scoping.scope[k]
		for _, in := range list {
			placed[in.name] = true
			if !in.shared {
				continue
			}
			if _, frozen := p.frozen.files[k+"/"+in.name]; frozen || outOfScope {
				carried[in.name] = true
				continue
			}
			order := shareOrder(in, p.loaded.lost)
			for i := range cfg.Policy.Capacity {
				add(order[i%len(order)], in.name, 1)
			}
		}
	}
	for ik := range p.frozen.files {
		carried[ik[strings.LastIndex(ik, "/")+1:]] = true
	}
	frozenConfigs := map[string]bool{}
	for k := range p.loaded.frozenConfigs {
		_, name, _ := strings.Cut(k, "/")
		frozenConfigs[name] = true
	}
	if len(carried) == 0 && len(frozenConfigs) == 0 {
		return out
	}
	for _, nodes := range p.prevShares() {
		for node, s := range nodes {
			for inst, n := range s {
				if carried[inst] || frozenConfigs[configurationOf(inst)] && !placed[inst] {
					add(node, inst, n)
				}
			}
		}
	}
	return out
}

// prevShares are the shares of prev, by shard: the Renderer's last ones when prev holds their
// very bytes, else prev's files decoded.
func (p *pass) prevShares() map[string]map[string]map[string]int {
	out := map[string]map[string]map[string]int{}
	if c := p.r.cluster; c != nil {
		// One cluster's of several: its own last shares, or, for a Renderer that has none yet,
		// its nodes' in the repository's files (clusters.go passes them on).
		if p.r.shares != nil {
			for shard, sf := range p.r.shares {
				out[shard] = sf.nodes
			}
			return out
		}
		cs := p.loaded.settings.Clusters
		for i := range api.AcceptedShards {
			shard := api.AcceptedShardName(i)
			var prev api.DeviceShares
			if b, ok := p.prev[api.SharesFile(shard)]; !ok || yaml.Unmarshal(b, &prev) != nil {
				continue
			}
			for node, s := range prev.Nodes {
				if in := cs.Of(node); len(in) == 1 && in[0] == c.Name {
					if out[shard] == nil {
						out[shard] = map[string]map[string]int{}
					}
					out[shard][node] = s
				}
			}
		}
		return out
	}
	for i := range api.AcceptedShards {
		shard := api.AcceptedShardName(i)
		b, ok := p.prev[api.SharesFile(shard)]
		if !ok {
			continue
		}
		if last, ok := p.r.shares[shard]; ok && string(last.data) == string(b) {
			out[shard] = last.nodes
			continue
		}
		var prev api.DeviceShares
		if yaml.Unmarshal(b, &prev) == nil {
			out[shard] = prev.Nodes
		}
	}
	return out
}

// configurationOf is the Configuration an instance name is of (Akri's <configuration>-<digest>,
// the digest 6 or 12 hex characters).
func configurationOf(inst string) string {
	i := strings.LastIndex(inst, "-")
	if i < 0 || len(inst)-i-1 != 6 && len(inst)-i-1 != 12 {
		return ""
	}
	for _, c := range inst[i+1:] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return ""
		}
	}
	return inst[:i]
}

// shareOrder is the order a shared instance's slots go round its nodes in: the nodes of its
// brokers, then its other live nodes.
func shareOrder(in *instance, lost map[string]*api.NodeLoss) []string {
	var order []string
	if in.broker != nil {
		order = slices.Clone(in.broker.nodes)
	}
	for _, n := range liveNodes(in, lost) {
		if !slices.Contains(order, n) {
			order = append(order, n)
		}
	}
	return order
}

// writeShares writes each shard's shares (api.SharesFile) beside its accepted tips: a node's
// shares go in the shard of its inventory ref, and a shard whose nodes have none has no file.
// A shard whose shares are those of the Renderer's last pass keeps its file's bytes without
// encoding it again (a daemon's change of one device changes one shard at most). The diff is
// brought up to date with them.
func (p *pass) writeShares(shares map[string]map[string]int) {
	shards := map[string]map[string]map[string]int{}
	for node, s := range shares {
		shard := api.AcceptedShard(api.InventoryBranch(node))
		if shards[shard] == nil {
			shards[shard] = map[string]map[string]int{}
		}
		shards[shard][node] = s
	}
	paths := make([]string, 0, api.AcceptedShards)
	for i := range api.AcceptedShards {
		f := api.SharesFile(api.AcceptedShardName(i))
		paths = append(paths, f)
		delete(p.output.files, f)
	}
	kept := make(map[string]sharesFile, len(shards))
	if p.r.cluster != nil {
		// One cluster's of several: its shares are written with every cluster's, at the top.
		for shard, nodes := range shards {
			kept[shard] = sharesFile{nodes: nodes}
		}
		p.r.nextShares = kept
		return
	}
	for _, shard := range slices.Sorted(maps.Keys(shards)) {
		f, nodes := api.SharesFile(shard), shards[shard]
		last, ok := p.r.shares[shard]
		if old, had := p.prev[f]; ok && had && string(old) == string(last.data) && sameShares(last.nodes, nodes) {
			p.output.files[f], kept[shard] = old, last
			continue
		}
		b := yamlcodec.Marshal(api.DeviceShares{APIVersion: api.APIVersion, Kind: api.KindDeviceShares, Nodes: nodes})
		if old, had := p.prev[f]; had && string(old) == string(b) {
			b = old // the same bytes: the file is unchanged
		}
		p.output.files[f], kept[shard] = b, sharesFile{nodes: nodes, data: b}
	}
	if !p.r.once {
		p.r.nextShares = kept
	}
	p.rediff(paths...)
}

// sharesFile is a shard's shares as a pass wrote them, for the next pass to know again.
type sharesFile struct {
	nodes map[string]map[string]int
	data  []byte
}

func sameShares(a, b map[string]map[string]int) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]int) bool { return maps.Equal(x, y) })
}
