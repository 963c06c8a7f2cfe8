package render

import (
	"bytes"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/identity"
)

// A kept Renderer renders on top of its own last output (a daemon does, change after change).
// When a change reaches only some Configurations, a pass is scoped to them: their devices,
// records and previous files go through the Job lifecycle, the brokers and the layout as in a
// full pass, and every other Configuration's files, plan entries and warnings are carried over
// from the last render, which made them from the very same inputs. A device change on a
// fleet of 100,000 then costs its Configuration, not every file.
//
// A pass is scoped only when the whole of its previous tree is the last output (the same byte
// slices), the settings and the trust mode are the same, no Configuration file is invalid, no
// node is held and the nodes with an invalid inventory are those of the last pass; which
// Configurations it reaches is decided from the identity of what the memos hand back for the
// same bytes: the parsed Configuration, its instance set (its reporting inventories), and the
// records of its Jobs. When the scoped work would write outside its Configurations or change
// the folders (and so the Flux Kustomizations), it is dropped and the pass runs whole.

// configSlice is one Configuration's part of the last output.
type configSlice struct {
	// files are its rendered folder's files and its history/ entries, sorted.
	files []string
	// history are those of files under history/.
	history []string
	// dirs are the directories holding its objects.
	dirs map[string]bool
}

// standingChange is a plan entry every render repeats while its inputs stay the same: a Pod
// or Job held, a Job kept.
type standingChange struct {
	inst, deviceID string
	nodes          []string
	change         Change
}

// lastScope is what the next pass needs to be scoped: the last pass's inputs as parsed, and
// its output per Configuration.
type lastScope struct {
	settings         []byte
	renderedJobsOnly bool
	// status are the records of the kinds a scoped pass does not follow (node losses, which
	// move brokers in any Configuration): a change to them renders whole.
	status map[string][]byte
	// rollouts are the RolloutRecords: a change reaches the Configuration of its Deployment;
	// rolling the Configurations in a staged rollout, which the next pass renders again.
	rollouts map[string]*api.RolloutRecord
	rolling  map[string]bool
	configs  map[string]*api.ParsedConfiguration
	sets     map[string]*instanceSet
	records  map[string]*api.JobRecord
	slices   map[string]*configSlice
	// history are the history/ files of the output, sorted.
	history []string
	// standing are the plan's standing entries and brokers, by Configuration.
	standing map[string][]standingChange
	brokers  map[string]string
	// layoutWarns are the layout's warnings about each Configuration's folders.
	layoutWarns map[string][]string
	// rendered counts, per Job (namespace/name), the output's files that hold it or its history;
	// nil when no pass needed it yet.
	rendered map[string]int
	// frozen are the nodes whose part was kept as it was (an invalid inventory), and notes the
	// plan's notes about the instances kept for them, by Configuration.
	frozen map[string]bool
	notes  map[string][]string
}

// configKeyOf says which Configuration's part of the output a file is: rendered/<ns>/<cfg>/...
// and history/jobs/<ns>/<cfg>/...; "" for the files of the whole output (the root
// kustomization, rendered/flux/, the namespaces, the metadata).
func configKeyOf(f string) string {
	var rest string
	switch {
	case strings.HasPrefix(f, RenderedDir):
		rest = f[len(RenderedDir):]
		// rendered/.gitbroker-* are the renderer's own records (no namespace starts with a dot).
		if strings.HasPrefix(rest, "flux/") || strings.HasPrefix(rest, "_namespaces/") || strings.HasPrefix(rest, ".") {
			return ""
		}
	case strings.HasPrefix(f, historyJobsDir):
		rest = f[len(historyJobsDir):]
	default:
		return ""
	}
	ns, rest, _ := strings.Cut(rest, "/")
	cfg, rest, _ := strings.Cut(rest, "/")
	if ns == "" || cfg == "" || rest == "" {
		return ""
	}
	return ns + "/" + cfg
}

const historyJobsDir = HistoryDir + "jobs/"

// slicesOf groups files by Configuration.
func slicesOf(files []string) map[string]*configSlice {
	out := map[string]*configSlice{}
	for _, f := range files {
		k := configKeyOf(f)
		if k == "" {
			continue
		}
		s := out[k]
		if s == nil {
			s = &configSlice{dirs: map[string]bool{}}
			out[k] = s
		}
		s.files = append(s.files, f)
		if strings.HasPrefix(f, historyJobsDir) {
			s.history = append(s.history, f)
		}
		if _, ok := parseObjectPath(f); ok {
			s.dirs[path.Dir(f)] = true
		}
	}
	for _, s := range out {
		sort.Strings(s.files)
		sort.Strings(s.history)
	}
	return out
}

// scopeFor decides which Configurations this pass must render, or nil when it must render
// them all. It is asked once the inputs are parsed and grouped.
func (p *pass) scopeFor() map[string]bool {
	last := p.r.scope
	// Nodes frozen as in the last pass keep the same instances in the Configurations a change
	// does not reach; a node frozen or thawed since reaches them all.
	if !p.scoping.onLast || last == nil || len(p.prev) == 0 || len(p.held) > 0 || !maps.Equal(p.loaded.frozenNodes, last.frozen) ||
		len(p.loaded.frozenConfigs) > 0 || len(p.req.Unreadable) > 0 || p.req.RenderedJobsOnly != last.renderedJobsOnly ||
		!bytes.Equal(p.req.Files[api.SettingsPath], last.settings) ||
		!maps.EqualFunc(p.unfollowedStatus(), last.status, bytes.Equal) {
		return nil
	}
	scope := map[string]bool{}
	keys := map[string]bool{}
	for _, m := range []map[string]*api.ParsedConfiguration{p.loaded.configs, last.configs} {
		for k := range m {
			keys[k] = true
		}
	}
	for k := range keys {
		if p.loaded.configs[k] != last.configs[k] || p.placement.sets[k] != last.sets[k] {
			scope[k] = true
		}
	}
	// A record reaches the Configuration whose Job it names, the one it claims, and those that
	// wait on that one (after).
	idx := p.prevIndex()
	changed := func(id string, rec *api.JobRecord) bool {
		ns, job, _ := strings.Cut(id, "/")
		f, ok := idx[objectKey{kind: "job", namespace: ns, name: job}]
		if !ok {
			return false // not a rendered Job: its history, or no Job at all
		}
		scope[configKeyOf(f)] = true
		claimed := rec.Namespace + "/" + rec.Spec.Configuration
		scope[claimed] = true
		for k, c := range p.loaded.configs {
			if c.Namespace == rec.Namespace && c.Policy.After == rec.Spec.Configuration {
				scope[k] = true
			}
		}
		return true
	}
	p.rolloutsReach(scope, last.rollouts, idx)
	for id, rec := range p.loaded.records {
		if old := last.records[id]; old != rec && !changed(id, rec) {
			return nil
		}
	}
	for id, rec := range last.records {
		if _, ok := p.loaded.records[id]; !ok && !changed(id, rec) {
			return nil
		}
	}
	return scope
}

// prevJobPathsIn are the paths of prev's Jobs and history entries of the Configurations in
// scope, sorted.
func (p *pass) prevJobPathsIn(scope map[string]bool) []string {
	out := []string{}
	for k := range scope {
		if s := p.r.scope.slices[k]; s != nil {
			for _, f := range s.files {
				if strings.HasPrefix(f, HistoryDir) || strings.HasPrefix(path.Base(f), "job-") && strings.HasPrefix(f, RenderedDir) {
					out = append(out, f)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// prevPathsIn are the paths of prev of the Configurations in scope, sorted.
func (p *pass) prevPathsIn(scope map[string]bool) []string {
	var out []string
	for k := range scope {
		if s := p.r.scope.slices[k]; s != nil {
			out = append(out, s.files...)
		}
	}
	sort.Strings(out)
	return out
}

// prevHistoryPaths are prev's history/ files, sorted.
func (p *pass) prevHistoryPaths() []string {
	if p.scoping.onLast && p.r.scope != nil {
		return p.r.scope.history
	}
	var out []string
	for _, f := range p.prevJobPaths() {
		if strings.HasPrefix(f, historyJobsDir) {
			out = append(out, f)
		}
	}
	return out
}

// merged is what the merge stage of a scoped pass hands on: the whole output, the diff, and
// the scoped files by Configuration with every path written or deleted.
type merged struct {
	files  Tree
	diff   []string
	fresh  map[string]*configSlice
	merged []string
}

// mergeScope puts the scoped output together with the rest of the last output, and the diff
// with it. It returns an *outOfScopeError when the scoped work wrote outside its
// Configurations or changed their folders: the pass must then run whole.
func (p *pass) mergeScope() (merged, error) {
	last := p.r.scope
	written := map[string][]string{}
	for f := range p.output.files {
		k := configKeyOf(f)
		if !p.scoping.scope[k] {
			return merged{}, &outOfScopeError{"it wrote " + f + ", of another Configuration"}
		}
		written[k] = append(written[k], f)
	}
	fresh := slicesOf(slices.Concat(slices.Collect(maps.Values(written))...))
	before := Tree{}
	for k := range p.scoping.scope {
		old, now := last.slices[k], fresh[k]
		var oldDirs, newDirs map[string]bool
		if old != nil {
			oldDirs = old.dirs
			for _, f := range old.files {
				before[f] = p.prev[f]
			}
		}
		if now != nil {
			newDirs = now.dirs
		}
		// Folders that appear or go change the Flux Kustomizations, the root and the namespaces.
		if len(oldDirs) != len(newDirs) {
			return merged{}, &outOfScopeError{"the folders of " + k + " changed"}
		}
		for d := range oldDirs {
			if !newDirs[d] {
				return merged{}, &outOfScopeError{"the folders of " + k + " changed"}
			}
		}
	}
	// The metadata file is in out already; a whole pass's diff, made before it is written, names it and
	// then takes it out again: an empty diff is empty, not nil.
	diff := append([]string{}, Diff(before, p.output.files)...)
	// Most of the scope's files are rewritten with the same paths: they are set over the old
	// entries, and only the paths that are gone are deleted (deleting them all and putting them
	// back would grow the tables, rehashing a fleet's entries).
	out := p.r.takeSpare(p.prev)
	paths := make([]string, 0, len(before)+len(p.output.files))
	for f := range before {
		if _, ok := p.output.files[f]; !ok {
			delete(out, f)
			paths = append(paths, f)
		}
	}
	for f, b := range p.output.files {
		out[f] = b
		paths = append(paths, f)
	}
	return merged{files: out, diff: diff, fresh: fresh, merged: paths}, nil
}

// carryPlans adds the plan entries, notes and warnings of the Configurations out of the scope,
// as the last render made them: the merge stage's part of the plan and of the output's notes.
func (p *pass) carryPlans(last *lastScope) {
	for k, changes := range last.standing {
		if p.scoping.scope[k] {
			continue
		}
		ns, name, _ := strings.Cut(k, "/")
		p.plan.config(ns, name, last.brokers[k])
		for _, s := range changes {
			if s.inst != "" {
				p.plan.instance(ns, name, s.inst, s.deviceID, s.nodes)
			}
			p.plan.add(ns, name, s.inst, s.change)
		}
	}
	for k, notes := range last.notes {
		if !p.scoping.scope[k] {
			ns, name, _ := strings.Cut(k, "/")
			cp := p.plan.config(ns, name, "")
			cp.Notes = append(cp.Notes, notes...)
			p.output.configNotes[k] = notes
		}
	}
	for k, warns := range last.layoutWarns {
		if !p.scoping.scope[k] {
			p.output.layoutWarns[k] = warns
			for _, w := range warns {
				p.warn("%s", w)
			}
		}
	}
}

// takeSpare returns a map holding exactly last, the Renderer's last output, for a scoped pass to
// make its output in: the spare brought up to date with the paths the last pass changed, or a
// copy of last. The spare is the Renderer's from then on.
func (r *Renderer) takeSpare(last Tree) Tree {
	spare := r.spare
	r.spare = nil
	if spare == nil || identity.Map(spare, last) {
		return maps.Clone(last)
	}
	for _, f := range r.spareLag {
		if b, ok := last[f]; ok {
			spare[f] = b
		} else {
			delete(spare, f)
		}
	}
	return spare
}

// lastScope is what this pass's inputs were, for the next pass to compare with.
func (p *pass) lastScope() *lastScope {
	return &lastScope{
		settings:         p.req.Files[api.SettingsPath],
		renderedJobsOnly: p.req.RenderedJobsOnly,
		status:           p.unfollowedStatus(),
		rollouts:         p.loaded.rollouts,
		rolling:          p.output.rolling,
		configs:          p.loaded.configs,
		sets:             p.placement.sets,
		records:          p.loaded.records,
		standing:         map[string][]standingChange{},
		brokers:          map[string]string{},
		layoutWarns:      p.output.layoutWarns,
		frozen:           p.loaded.frozenNodes,
		notes:            p.output.configNotes,
	}
}

// keepScope remembers what the next pass needs to be scoped, or nothing when this pass's output
// cannot be its base.
func (p *pass) keepScope(res *Result) {
	r := p.r
	if res.Refused != nil || len(p.held) > 0 || len(p.loaded.frozenConfigs) > 0 || len(p.req.Unreadable) > 0 {
		r.scope = nil
		return
	}
	s := p.lastScope()
	if p.scoping.scope == nil {
		s.slices = slicesOf(slices.Collect(maps.Keys(res.Files)))
	} else {
		s.slices = maps.Clone(r.scope.slices)
		for k := range p.scoping.scope {
			delete(s.slices, k)
			if f := p.scoping.fresh[k]; f != nil {
				s.slices[k] = f
			}
		}
	}
	for _, sl := range s.slices {
		s.history = append(s.history, sl.history...)
	}
	// The Jobs this pass counted in prev, brought up to date with the diff: the next pass,
	// whose prev is this output, need not read every Job again.
	if s.rendered = p.loaded.rendered; s.rendered != nil {
		for _, f := range res.Diff {
			if data, ok := res.Previous[f]; ok {
				if job, ok := p.jobOf(f, data); ok {
					if s.rendered[job]--; s.rendered[job] <= 0 {
						delete(s.rendered, job)
					}
				}
			}
			if data, ok := res.Files[f]; ok {
				if job, ok := p.jobOf(f, data); ok {
					s.rendered[job]++
				}
			}
		}
	}
	sort.Strings(s.history)
	for _, c := range res.Plan.Configurations {
		k := c.Namespace + "/" + c.Name
		if p.scoping.scope != nil && !p.scoping.scope[k] {
			continue
		}
		s.brokers[k] = c.Broker
		for _, ch := range c.Changes {
			if ch.Action == Held || ch.Action == Kept {
				s.standing[k] = append(s.standing[k], standingChange{change: ch})
			}
		}
		for _, ip := range c.Instances {
			for _, ch := range ip.Changes {
				if ch.Action == Held || ch.Action == Kept {
					s.standing[k] = append(s.standing[k], standingChange{inst: ip.Name, deviceID: ip.DeviceID,
						nodes: slices.Clone(ip.Nodes), change: ch})
				}
			}
		}
	}
	if p.scoping.scope != nil {
		for k, v := range r.scope.standing {
			if !p.scoping.scope[k] {
				s.standing[k], s.brokers[k] = v, r.scope.brokers[k]
			}
		}
	}
	r.scope = s
}
