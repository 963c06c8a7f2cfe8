package render

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// loaded is what the load stage makes of the request's inputs: the settings, the valid
// Configurations, inventories and records, and what it had to freeze or refuse.
type loaded struct {
	settings api.ResolvedSettings
	prevMeta Metadata

	configs     map[string]*api.ParsedConfiguration // valid, by namespace/name
	configFiles map[string][]string
	// discovery digests what each Configuration asks the agents to discover (discoveryDigest).
	discovery     map[string]string
	frozenConfigs map[string]bool
	frozenNodes   map[string]bool
	invs          []*api.ParsedInventory

	records     map[string]*api.JobRecord // by namespace/job, from status/ and history/
	recordBytes map[string][]byte         // by namespace/job, status/ files only
	byDevice    map[string][]*api.JobRecord
	// lost are the nodes the recorder found lost (status/nodes/), by name.
	lost map[string]*api.NodeLoss
	// rollouts are the recorder's RolloutRecords (status/rollouts/), by namespace/deployment.
	rollouts map[string]*api.RolloutRecord
	// ignoredRecords are JobRecords refused under RenderedJobsOnly, for the plan.
	ignoredRecords []Problem
	// refused are this pass's checks of device properties, by inventory (kept for the next).
	refused map[*api.ParsedInventory]refusedCheck
	// rendered counts the Jobs of prev when RenderedJobsOnly needed them (renderedJobs).
	rendered map[string]int
}

// load is the first stage: it parses and checks the request's inputs (docs/ARCHITECTURE.md,
// "The render's stages") and hands on the valid Configurations, inventories and records, and
// what it had to freeze. Each reader takes what the readers before it loaded from l.
func (p *pass) load(settings api.ResolvedSettings) *loaded {
	l := &loaded{settings: settings, prevMeta: ParseMetadata(p.prev[MetadataPath])}
	p.loadConfigurations(l)
	p.loadInventories(l)
	p.loadRecords(l)
	l.lost = p.loadNodeLosses()
	l.rollouts = p.loadRollouts()
	return l
}

func (p *pass) loadConfigurations(l *loaded) {
	l.configs = map[string]*api.ParsedConfiguration{}
	l.configFiles = map[string][]string{}
	l.frozenConfigs = map[string]bool{}
	set := p.parseConfigurationFiles(l)
	set.checkDuplicates()
	p.checkAfter(l, set)
	p.checkDiscovery(l, set)
	p.checkDRA(l, set)
	invalid := set.unreadable
	for _, f := range set.files {
		if errs := set.errs[f]; len(errs) > 0 {
			p.errs = append(p.errs, errs...)
			invalid = append(invalid, f)
			continue
		}
		var keys []string
		for _, c := range set.parsed[f].configs {
			if p.r.cluster != nil && !p.r.cluster.Selects(c.Policy.Clusters()) {
				continue // for other clusters
			}
			l.configs[c.Key()] = c
			keys = append(keys, c.Key())
		}
		sort.Strings(keys)
		l.configFiles[f] = keys
	}
	p.freezeInvalid(l, invalid)
	p.digestDiscovery(l)
}

// configSet is the Configuration files of one render, parsed, before checks across files decide
// which are valid.
type configSet struct {
	files    []string // sorted
	parsed   map[string]parsedConfigFile
	definers map[string][]string // Configuration key -> the files that define it
	// errs are each file's errors; a file with any is invalid and keeps its output.
	errs map[string]api.ErrorList
	// unreadable are Configuration files that could not be read as regular files.
	unreadable []string
}

// parseConfigurationFiles parses every Configuration file, through the memo.
func (p *pass) parseConfigurationFiles(l *loaded) *configSet {
	set := &configSet{parsed: map[string]parsedConfigFile{}, definers: map[string][]string{}, errs: map[string]api.ErrorList{}}
	for _, f := range sortedKeys(p.req.Unreadable) {
		if isConfigurationPath(f) {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: p.req.Unreadable[f]})
			set.unreadable = append(set.unreadable, f)
		}
	}
	for _, f := range p.inputPaths() {
		if !isConfigurationPath(f) {
			continue
		}
		data := p.req.Files[f]
		// Parsing fills in the default namespace, so it is part of the memo key.
		parsed := p.r.configMemo().get(l.settings.DefaultNamespace+"\x00"+f, data, func() parsedConfigFile {
			cs, errs := api.ParseConfigurations(f, data, l.settings.DefaultNamespace)
			return parsedConfigFile{configs: cs, errs: errs}
		})
		set.files = append(set.files, f)
		set.parsed[f] = parsed
		set.errs[f] = slices.Clone(parsed.errs)
		seen := map[string]bool{}
		for _, c := range parsed.configs {
			if !seen[c.Key()] {
				set.definers[c.Key()] = append(set.definers[c.Key()], f)
				seen[c.Key()] = true
			}
		}
	}
	return set
}

// checkDuplicates refuses a Configuration defined in two files, or twice in one. Neither
// definition wins: which one sorts first must never decide what runs. Both files are invalid,
// and the Configuration keeps its output.
func (s *configSet) checkDuplicates() {
	for _, f := range s.files {
		inFile := map[string]bool{}
		for _, c := range s.parsed[f].configs {
			if others := slices.DeleteFunc(slices.Clone(s.definers[c.Key()]), func(o string) bool { return o == f }); len(others) > 0 {
				s.errs[f] = append(s.errs[f], c.Doc.Errorf("metadata.name", "Configuration %s is also defined in %s; define it in one file only (both definitions are ignored and its previous output is kept)", c.Key(), strings.Join(others, ", ")))
			} else if inFile[c.Key()] {
				s.errs[f] = append(s.errs[f], c.Doc.Errorf("metadata.name", "Configuration %s is defined twice in this file", c.Key()))
			}
			inFile[c.Key()] = true
		}
	}
}

// freezeInvalid keeps what an invalid file rendered before: its Configurations are frozen, and
// its entry in the metadata is carried so the next render still knows them.
func (p *pass) freezeInvalid(l *loaded, invalid []string) {
	for _, f := range invalid {
		var kept []string
		for _, k := range l.prevMeta.ConfigurationFiles[f] {
			if _, ok := l.configs[k]; !ok {
				l.frozenConfigs[k] = true
				kept = append(kept, k)
			}
		}
		if len(kept) > 0 {
			l.configFiles[f] = kept
		}
	}
}

// digestDiscovery digests each Configuration's discoveryHandler for the metadata file; a frozen
// one keeps its last digest.
func (p *pass) digestDiscovery(l *loaded) {
	l.discovery = map[string]string{}
	for k, c := range l.configs {
		l.discovery[k] = discoveryDigest(c)
	}
	for k := range l.frozenConfigs {
		if d, ok := l.prevMeta.Discovery[k]; ok {
			l.discovery[k] = d
		}
	}
}

// checkAfter refuses an after: that names no Configuration, or one without a Job broker: its
// Pods would be held for ever. The Configuration's file is invalid and keeps its output, so the
// mistake is an input error at the after: line, not a wave of deletions. A Configuration that is
// itself invalid (known from the last render) is taken to be what it was.
func (p *pass) checkAfter(l *loaded, set *configSet) {
	known := map[string]*api.ParsedConfiguration{}
	for _, f := range set.files {
		for _, c := range set.parsed[f].configs {
			known[c.Key()] = c
		}
	}
	frozen := map[string]bool{}
	for _, f := range append(slices.Clone(set.unreadable), set.files...) {
		if len(set.errs[f]) > 0 || slices.Contains(set.unreadable, f) {
			for _, k := range l.prevMeta.ConfigurationFiles[f] {
				frozen[k] = true
			}
		}
	}
	for _, f := range set.files {
		for _, c := range set.parsed[f].configs {
			if c.Policy.After == "" {
				continue
			}
			target := c.Namespace + "/" + c.Policy.After
			field := "spec.after"
			if c.Spec.After == "" {
				field = "metadata.annotations." + api.AnnotationAfter
			}
			switch a, ok := known[target]; {
			case !ok && !frozen[target]:
				set.errs[f] = append(set.errs[f], c.Doc.Errorf(field, "no Configuration %s is defined (in namespace %s: %s); its broker Pods would wait for ever", c.Policy.After, c.Namespace, namesIn(known, c.Namespace)))
			case ok && len(set.definers[target]) == 1 && !a.IsJobBroker():
				set.errs[f] = append(set.errs[f], c.Doc.Errorf(field, "Configuration %s has no brokerJobSpec; after: waits for a Job of it to succeed on the device, so its broker Pods would wait for ever", c.Policy.After))
			case ok && p.r.cluster != nil && p.r.cluster.Selects(c.Policy.Clusters()) && !p.r.cluster.Selects(a.Policy.Clusters()):
				// A Job of the other runs only in the clusters it selects.
				set.errs[f] = append(set.errs[f], c.Doc.Errorf(field, "Configuration %s does not select cluster %s, which this one does; after: waits for a Job of it to succeed on the device, so its broker Pods would wait for ever there", c.Policy.After, p.r.cluster.Name))
			}
		}
	}
}

// namesIn lists the Configurations of a namespace, for an error that says what there is.
func namesIn(configs map[string]*api.ParsedConfiguration, ns string) string {
	var names []string
	for _, c := range configs {
		if c.Namespace == ns {
			names = append(names, c.Name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// planConfigurations says which Configurations were added, removed or moved to another file
// since the last render: that changes the metadata file even when no object changes (a new
// Configuration no device reports yet), and the plan must say why a file changes.
func (p *pass) planConfigurations() {
	if p.loaded.prevMeta.ConfigurationFiles == nil && len(p.prev) == 0 {
		// The first render: every object it starts is in the plan already.
		return
	}
	was, is := map[string]string{}, map[string]string{}
	for f, keys := range p.loaded.prevMeta.ConfigurationFiles {
		for _, k := range keys {
			was[k] = f
		}
	}
	for f, keys := range p.loaded.configFiles {
		for _, k := range keys {
			is[k] = f
		}
	}
	for _, k := range sortedKeys(is) {
		ns, name, _ := strings.Cut(k, "/")
		switch old, ok := was[k]; {
		case !ok:
			reason := "defined in " + is[k]
			if len(p.placement.instances[k]) == 0 {
				reason += "; no node reports a device for it yet"
			}
			p.plan.add(ns, name, "", Change{Action: Created, Kind: "Configuration", Name: name, Reason: reason})
		case old != is[k]:
			cp := p.plan.config(ns, name, "")
			cp.Notes = append(cp.Notes, fmt.Sprintf("now defined in %s (was %s)", is[k], old))
		}
		if was, ok := p.loaded.prevMeta.Discovery[k]; ok && was != p.loaded.discovery[k] {
			cp := p.plan.config(ns, name, "")
			cp.Notes = append(cp.Notes, "discoveryHandler changed: brokers will be replaced once agents rediscover (devices the new handler, details or properties no longer find lose theirs; new ones get brokers)")
		}
	}
	for _, k := range sortedKeys(was) {
		if _, ok := is[k]; !ok && !p.loaded.frozenConfigs[k] {
			ns, name, _ := strings.Cut(k, "/")
			p.plan.add(ns, name, "", Change{Action: Removed, Kind: "Configuration", Name: name, Reason: "no longer defined (was in " + was[k] + ")"})
		}
	}
}

func (p *pass) loadInventories(l *loaded) {
	l.frozenNodes = map[string]bool{}
	l.refused = make(map[*api.ParsedInventory]refusedCheck, len(p.r.refused))
	var paths []string
	for _, f := range p.inputPaths() {
		if isInventoryPath(f) {
			paths = append(paths, f)
		}
	}
	all := p.r.invs.getMany(l.settings.DefaultNamespace, paths, p.req.Files, func(f string, data []byte) parsedInventoryFile {
		inv, errs := api.ParseInventory(f, data, l.settings.DefaultNamespace)
		return parsedInventoryFile{inv: inv, errs: errs}
	})
	for _, f := range sortedKeys(p.req.Unreadable) {
		_, folder := api.InventoryFolder(f + "/")
		if isInventoryPath(f) || folder {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: p.req.Unreadable[f]})
		}
		if isInventoryPath(f) {
			// A node's file that cannot be read, or a folder named like one: the node keeps
			// what it rendered before.
			l.frozenNodes[api.NodeFromInventoryPath(f)] = true
		}
	}
	// Nodes the deletion budget holds keep their part as it was, whether their inventory
	// changed or is gone.
	for _, n := range sortedKeys(p.held) {
		l.frozenNodes[n] = true
		p.warn("%s", p.held[n])
	}
	for i, f := range paths {
		parsed := all[i]
		if p.held[api.NodeFromInventoryPath(f)] != "" {
			continue
		}
		errs := parsed.errs
		if len(errs) == 0 {
			errs = p.refusedPropertiesOf(l, parsed.inv)
		}
		if len(errs) > 0 {
			p.errs = append(p.errs, errs...)
			l.frozenNodes[api.NodeFromInventoryPath(f)] = true
			continue
		}
		l.invs = append(l.invs, parsed.inv)
		for j, ic := range parsed.inv.Spec.Configurations {
			k := ic.Namespace + "/" + ic.Name
			if _, ok := l.configs[k]; !ok && !l.frozenConfigs[k] && len(ic.Devices) > 0 {
				e := parsed.inv.Doc.Errorf(fmt.Sprintf("spec.configurations[%d].name", j),
					"%d devices reported for Configuration %s, which does not exist", len(ic.Devices), k)
				p.warn("%s", e.Error())
			}
		}
	}
	sort.Slice(l.invs, func(i, j int) bool { return l.invs[i].Name < l.invs[j].Name })
}

// refusedCheck is refusedProperties of one parsed inventory, and the Configurations it was
// checked against (nil where the inventory names one that does not exist).
type refusedCheck struct {
	configs []*api.ParsedConfiguration
	errs    api.ErrorList
}

// refusedPropertiesOf is refusedProperties, worked out again only for an inventory or a
// Configuration that changed since the last pass.
func (p *pass) refusedPropertiesOf(l *loaded, inv *api.ParsedInventory) api.ErrorList {
	if c, ok := p.r.refused[inv]; ok && len(c.configs) == len(inv.Spec.Configurations) {
		same := true
		for i, ic := range inv.Spec.Configurations {
			if l.configs[ic.Namespace+"/"+ic.Name] != c.configs[i] {
				same = false
				break
			}
		}
		if same {
			l.refused[inv] = c
			return c.errs
		}
	}
	c := refusedCheck{configs: make([]*api.ParsedConfiguration, len(inv.Spec.Configurations)), errs: p.refusedProperties(l, inv)}
	for i, ic := range inv.Spec.Configurations {
		c.configs[i] = l.configs[ic.Namespace+"/"+ic.Name]
	}
	l.refused[inv] = c
	return c.errs
}

// refusedProperties finds device properties that would change how a broker loads code or where
// it connects, which a device may set only when its Configuration allows them by name. Like any
// invalid inventory, the node's part is then kept as it was.
func (p *pass) refusedProperties(l *loaded, inv *api.ParsedInventory) api.ErrorList {
	var errs api.ErrorList
	for i, ic := range inv.Spec.Configurations {
		cfg, ok := l.configs[ic.Namespace+"/"+ic.Name]
		if !ok {
			continue
		}
		for j, d := range ic.Devices {
			for _, k := range sortedKeys(d.Properties) {
				if !cfg.DeviceMaySet(k) {
					why := "it changes how a broker loads code or where it connects"
					if !api.RefusedDeviceProperty(k) {
						p := api.HandlerPropertyPrefix(cfg.Spec.DiscoveryHandler.Name)
						why = fmt.Sprintf("devices of discovery handler %s set only names that start with %s or AKRI_%s", cfg.Spec.DiscoveryHandler.Name, p, p)
					}
					errs = append(errs, inv.Doc.Errorf(fmt.Sprintf("spec.configurations[%d].devices[%d].properties.%s", i, j, k),
						"a device may not set %s: %s; Configuration %s can allow it by name (spec.allowedDeviceProperties, or the annotation %s)",
						k, why, cfg.Key(), api.AnnotationAllowedDeviceProperties))
				}
			}
		}
	}
	return errs
}
