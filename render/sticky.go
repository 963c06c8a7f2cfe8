package render

import (
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// Names are sticky (docs/DESIGN.md, "Trust fails closed"): an instance keeps the name it was
// rendered with. Akri's 3-byte digest collides in practice, and a node that reports a device
// whose digest matches another node's instance must not rename that instance (its Service's DNS
// name), re-run its finished Jobs or leave its broker asking for a resource its own device
// plugin does not serve. Only a newcomer whose digest collides gets the longer name; the render
// metadata lists every device whose digest is not Akri's 3-byte one (InstanceDigest), so the
// next render, and the agents through the renderer's publication, name it the same.

// InstanceDigest is a device whose instance does not use Akri's 3-byte digest.
type InstanceDigest = api.InstanceDigest

// instanceKey is the device key of an instance.
func (in *instance) key() api.DeviceKey {
	node := ""
	if !in.shared && len(in.nodes) > 0 {
		node = in.nodes[0]
	}
	return api.DeviceKey{ID: in.deviceID, Node: node, Shared: in.shared}
}

// stickyNames gives the instances of one Configuration the names they were rendered with: a
// device the last render named with a longer digest keeps it, and of devices that now share a
// 3-byte digest, the one the last render named with it keeps it. Everything else is as
// api.InstanceDigests names it. Should two instances end with one name, the default naming
// stands for all of them.
func (p *pass) stickyNames(k string, s *instanceSet, lookup func(name string) []string) {
	recorded := map[api.DeviceKey]string{}
	for _, d := range p.loaded.prevMeta.InstanceDigests[k] {
		recorded[d.Key()] = d.Digest
	}
	if len(recorded) == 0 && !slices.ContainsFunc(s.list, func(in *instance) bool { return in.collided }) {
		return
	}
	cfg := s.cfg
	digests := make([]string, len(s.list))
	changed := false
	for i, in := range s.list {
		key := in.key()
		digests[i] = in.digest
		if d, ok := recorded[key]; ok && len(d) > 6 {
			digests[i] = d
		} else if in.collided {
			if short := api.AkriDigest(key, 3); p.renderedAs(cfg, in, instanceName(cfg.Name, short), key, lookup) {
				digests[i] = short
			}
		}
		changed = changed || digests[i] != in.digest
	}
	if !changed {
		return
	}
	seen := map[string]bool{}
	for _, d := range digests {
		n := instanceName(cfg.Name, d)
		if seen[n] {
			return
		}
		seen[n] = true
	}
	for i, in := range s.list {
		if digests[i] == in.digest {
			continue
		}
		old := in.name
		in.digest, in.name = digests[i], instanceName(cfg.Name, digests[i])
		in.folder = p.instanceFolder(cfg, in.name)
		in.disputed = strings.Replace(in.disputed, "instance "+old+" ", "instance "+in.name+" ", 1)
	}
	sort.Slice(s.list, func(i, j int) bool { return s.list[i].name < s.list[j].name })
}

// renderedAs reports whether the previous render holds an object of instance name for the
// device key: first where the name puts them (its broker on a node that reports it, its
// Service), else among the files lookup gives (a broker elsewhere, a Job of the Configuration,
// a finished Job in history/).
func (p *pass) renderedAs(cfg *api.ParsedConfiguration, in *instance, name string, key api.DeviceKey, lookup func(string) []string) bool {
	holds := func(f string) bool {
		h := p.head(f, p.prev[f])
		return h != nil && h.Metadata.Labels[api.LabelInstance] == name && h.Metadata.Annotations[api.AnnotationDeviceID] == key.ID &&
			(key.Shared || h.Metadata.Labels[api.LabelTargetNode] == key.Node)
	}
	for _, node := range in.nodes {
		if f, ok := p.prevID(objectKey{"deployment", cfg.Namespace, brokerName(name, node, in.shared)}); ok && holds(f) {
			return true
		}
	}
	folder, history := configFolder(cfg.Namespace, cfg.Name)+"/", path.Join("history/jobs", cfg.Namespace, cfg.Name, name)+"/"
	for _, f := range lookup(name) {
		if (strings.HasPrefix(f, folder) || strings.HasPrefix(f, history)) && holds(f) {
			return true
		}
	}
	return false
}

// instanceDigests lists, by Configuration, the devices whose instances do not use Akri's 3-byte
// digest, for the metadata; a frozen Configuration keeps its last list.
func (p *pass) instanceDigests() map[string][]InstanceDigest {
	out := map[string][]InstanceDigest{}
	for k, list := range p.placement.instances {
		for _, in := range list {
			if len(in.digest) > 6 {
				key := in.key()
				out[k] = append(out[k], InstanceDigest{Device: key.ID, Node: key.Node, Digest: in.digest})
			}
		}
		slices.SortFunc(out[k], func(a, b InstanceDigest) int {
			if c := strings.Compare(a.Device, b.Device); c != 0 {
				return c
			}
			return strings.Compare(a.Node, b.Node)
		})
	}
	for k := range p.loaded.frozenConfigs {
		if l, ok := p.loaded.prevMeta.InstanceDigests[k]; ok {
			out[k] = l
		}
	}
	for k, l := range out {
		if len(l) == 0 {
			delete(out, k)
		}
	}
	return out
}
