package render

import (
	"fmt"
	"maps"
	"path"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gitbroker/gitbroker/api"
)

// placement is what the place stage makes: the devices of every Configuration grouped into
// instances as Akri names them.
type placement struct {
	instances map[string][]*instance  // by configuration key
	sets      map[string]*instanceSet // by configuration key
	disputed  []*instance             // shared instances whose reporting nodes disagree
}

// frozenSet is what the frozen stage makes, from the placement and the scope: the instances
// kept as they were.
type frozenSet struct {
	files map[string][]string // namespace/configuration/instance -> previous files
	why   map[string]string   // why an instance is frozen, when not for an invalid inventory
}

// place is the stage after load: it groups every valid inventory's devices into Akri instances
// and hands them on by Configuration, with those whose reporting nodes disagree.
func (p *pass) place() *placement {
	pl := &placement{instances: map[string][]*instance{}}
	// Which inventories report devices for each Configuration, in node order: with the
	// Configuration itself, all its instances are made of.
	reports := map[string][]report{}
	for _, inv := range p.loaded.invs {
		for j := range inv.Spec.Configurations {
			ic := &inv.Spec.Configurations[j]
			k := ic.Namespace + "/" + ic.Name
			if _, ok := p.loaded.configs[k]; ok {
				reports[k] = append(reports[k], report{inv: inv, ic: ic})
			}
		}
	}
	// A Configuration whose parsed object and reporting inventories are the very ones of the
	// last pass (the memos hand back the same values for the same bytes) has the same instances:
	// only the others are grouped and named again, each on a CPU of its own. A daemon's change
	// of one device then groups one Configuration's devices, not the fleet's.
	keys := sortedKeys(reports)
	sets := make([]*instanceSet, len(keys))
	var todo []int
	for i, k := range keys {
		if s := p.r.instanceSets[k]; s != nil && s.reusable(p.loaded.configs[k], reports[k]) {
			sets[i] = s
			continue
		}
		todo = append(todo, i)
	}
	parallel(len(todo), func(j int) {
		k := keys[todo[j]]
		sets[todo[j]] = p.groupInstances(k, reports[k])
	})
	// Names are sticky (sticky.go). When a broker of the instance is not where its name puts
	// it, the files of prev that may hold an instance whose 3-byte name a collision now contests
	// are found in one pass over prev, on first need.
	var contested map[string][]string
	lookup := func(name string) []string {
		if contested == nil {
			contested = map[string][]string{}
			for _, i := range todo {
				for _, in := range sets[i].list {
					if in.collided {
						contested[instanceName(sets[i].cfg.Name, api.AkriDigest(in.key(), 3))] = nil
					}
				}
			}
			for f := range p.prev {
				base := path.Base(f)
				for n := range contested {
					if strings.Contains(base, n) {
						contested[n] = append(contested[n], f)
					}
				}
			}
		}
		return contested[name]
	}
	for _, i := range todo {
		p.stickyNames(keys[i], sets[i], lookup)
	}
	kept := make(map[string]*instanceSet, len(keys))
	for i, k := range keys {
		s := sets[i]
		kept[k] = s
		for _, w := range s.warns {
			p.warn("%s", w)
		}
		pl.instances[k] = s.list
		for _, in := range s.list {
			if in.disputed != "" {
				pl.disputed = append(pl.disputed, in)
			}
		}
	}
	p.r.instanceSets, pl.sets = kept, kept
	return pl
}

// instance finds an instance by namespace/configuration/instance.
func (p *pass) instance(ik string) *instance {
	ns, rest, _ := strings.Cut(ik, "/")
	cfg, name, _ := strings.Cut(rest, "/")
	s := p.placement.sets[ns+"/"+cfg]
	if s == nil {
		return nil
	}
	return s.byName()[name]
}

// report is one inventory's entry for one Configuration.
type report struct {
	inv *api.ParsedInventory
	ic  *api.InventoryConfiguration
}

// instanceSet is one Configuration's instances and what they were made of. Its instances are
// shared by the passes that reuse it and never changed after they are made; what they were
// made of is brought up to the inventories that report the same devices again.
type instanceSet struct {
	cfg   *api.ParsedConfiguration
	invs  []*api.ParsedInventory
	ics   []*api.InventoryConfiguration
	list  []*instance
	warns []string

	index     sync.Once
	instances map[string]*instance // by name, made when first asked for
}

func (s *instanceSet) byName() map[string]*instance {
	s.index.Do(func() {
		s.instances = make(map[string]*instance, len(s.list))
		for _, in := range s.list {
			s.instances[in.name] = in
		}
	})
	return s.instances
}

func (s *instanceSet) reusable(cfg *api.ParsedConfiguration, reports []report) bool {
	if s.cfg != cfg || len(s.invs) != len(reports) {
		return false
	}
	for i, r := range reports {
		// Another inventory of the same node may report the very same devices for this
		// Configuration: a node's change to one Configuration leaves the others' instances.
		if s.invs[i] != r.inv && (s.invs[i].Name != r.inv.Name || !reflect.DeepEqual(s.ics[i].Devices, r.ic.Devices)) {
			return false
		}
	}
	// What the set was made of is now these inventories: the next pass compares with them.
	for i, r := range reports {
		s.invs[i], s.ics[i] = r.inv, r.ic
	}
	return true
}

// deviceKey is what names a device's instance: a shared device's node is not part of it.
func deviceKey(id, node string, shared bool) api.DeviceKey {
	if shared {
		node = ""
	}
	return api.DeviceKey{ID: id, Node: node, Shared: shared}
}

// groupInstances groups one Configuration's devices into instances and names them, as Akri
// does: a shared device is one instance seen by every node that reports it, an unshared one an
// instance per node.
func (p *pass) groupInstances(k string, reports []report) *instanceSet {
	type agg struct {
		id, node string
		shared   bool
		nodes    []string
		props    map[string]string
		// disagree names a node that reports the shared device with other properties than
		// the first node did.
		disagree string
	}
	cfg := p.loaded.configs[k]
	set := &instanceSet{cfg: cfg, invs: make([]*api.ParsedInventory, len(reports)), ics: make([]*api.InventoryConfiguration, len(reports))}
	devs := map[string]*agg{}
	for i, r := range reports {
		set.invs[i], set.ics[i] = r.inv, r.ic
		for _, d := range r.ic.Devices {
			ident := "s\x00" + d.ID
			if !d.Shared {
				ident = "u\x00" + d.ID + "\x00" + r.inv.Name
			}
			a := devs[ident]
			if a == nil {
				a = &agg{id: d.ID, node: r.inv.Name, shared: d.Shared, props: d.Properties}
				devs[ident] = a
			} else if a.disagree == "" && !maps.Equal(a.props, d.Properties) {
				a.disagree = r.inv.Name
			}
			a.nodes = append(a.nodes, r.inv.Name)
		}
	}
	idents := sortedKeys(devs)
	keys := make([]api.DeviceKey, len(idents))
	for i, id := range idents {
		a := devs[id]
		keys[i] = deviceKey(a.id, a.node, a.shared)
	}
	digests, collisions := api.InstanceDigests(keys)
	collided := map[api.DeviceKey]bool{}
	for _, g := range collisions {
		ids := make([]string, len(g))
		for i, key := range g {
			collided[key] = true
			ids[i] = fmt.Sprintf("%q", key.ID)
		}
		set.warns = append(set.warns, fmt.Sprintf("Configuration %s: devices %s share the Akri digest %s; their instances use %d-character digests", k, strings.Join(ids, ", "), akriDigest(g[0].ID, g[0].Node, g[0].Shared, 3), 12))
	}
	list := make([]*instance, 0, len(idents))
	for _, id := range idents {
		a := devs[id]
		key := deviceKey(a.id, a.node, a.shared)
		in := &instance{cfg: cfg, digest: digests[key], deviceID: a.id, shared: a.shared,
			nodes: a.nodes, properties: a.props, collided: collided[key]}
		in.name = instanceName(cfg.Name, in.digest)
		if a.disagree != "" {
			// A node cannot give another node's device its own properties (a stream URL, say):
			// the instance is held as it was until the nodes that report it agree.
			in.disputed = fmt.Sprintf("instance %s held as it was: nodes %s and %s report shared device %q with different properties", in.name, a.node, a.disagree, a.id)
		}
		sort.Strings(in.nodes)
		in.folder = p.instanceFolder(cfg, in.name)
		list = append(list, in)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	set.list = list
	return set
}

func configFolder(ns, cfg string) string { return RenderedDir + ns + "/" + cfg }

// instanceFolder is the folder of an instance's objects: the Configuration's folder, or one of
// its shards by a stable hash of the instance name.
func (p *pass) instanceFolder(cfg *api.ParsedConfiguration, inst string) string {
	base := configFolder(cfg.Namespace, cfg.Name)
	n := cfg.Policy.Shards
	if n <= 1 {
		return base
	}
	h := hashHex(8, []byte(inst))
	v, _ := strconv.ParseUint(h, 16, 64)
	width := len(strconv.Itoa(n - 1))
	return fmt.Sprintf("%s/shard-%0*d", base, width, int(v%uint64(n)))
}

func (p *pass) commonFolder(cfg *api.ParsedConfiguration) string {
	base := configFolder(cfg.Namespace, cfg.Name)
	if cfg.Policy.Shards > 1 {
		return base + "/common"
	}
	return base
}

// findFrozenInstances, once the scope is known, keeps, for each node whose inventory is invalid, every instance that node
// took part in exactly as it was rendered before.
//
// A shared instance that valid inventories still report is frozen by such a node only when that
// node holds one of its Pods: a node cannot freeze another node's broker (or its runs) by
// making its own inventory invalid. An instance whose reporting nodes disagree about its
// properties is held as it was too (instance.disputed).
func (p *pass) findFrozenInstances() frozenSet {
	frozen, why := map[string][]string{}, map[string]string{}
	disputed := map[string]*instance{}
	for _, in := range p.placement.disputed {
		disputed[in.cfg.Namespace+"/"+in.cfg.Name+"/"+in.name] = in
	}
	if len(p.loaded.frozenNodes) == 0 && len(disputed) == 0 {
		return frozenSet{frozen, why}
	}
	files := map[string][]string{}
	involved := map[string]bool{}
	paths := p.prevPaths
	if p.scoping.scope != nil {
		// The Configurations out of scope keep their frozen instances with their files.
		paths = func() []string { return p.prevPathsIn(p.scoping.scope) }
	}
	for _, f := range paths() {
		ref, ok := parseObjectPath(f)
		if !ok {
			continue
		}
		h := p.head(f, p.prev[f])
		inst := h.Metadata.Labels[api.LabelInstance]
		if inst == "" {
			continue
		}
		k := ref.namespace + "/" + ref.configuration + "/" + inst
		files[k] = append(files[k], f)
		if len(p.loaded.frozenNodes) == 0 {
			continue
		}
		if cur := p.instance(k); cur != nil && cur.shared && ref.kind != "deployment" && ref.kind != "pod" {
			continue // reported by valid nodes: only a broker on the frozen node freezes it
		}
		for _, n := range h.nodes() {
			if p.loaded.frozenNodes[n] {
				involved[k] = true
			}
		}
	}
	for k := range involved {
		frozen[k] = files[k]
	}
	for k, in := range disputed {
		if p.scoping.scope != nil && !p.scoping.scope[in.cfg.Namespace+"/"+in.cfg.Name] {
			continue
		}
		frozen[k] = append([]string{}, files[k]...)
		why[k] = in.disputed
	}
	return frozenSet{frozen, why}
}
