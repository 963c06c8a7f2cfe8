package render

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// renderJobs applies the Job lifecycle. A rendered Job is frozen: it is carried over byte for
// byte until its JobRecord appears, then it moves to history/. A new run is rendered when the
// inputs give a Job name that has not run yet, and, under concurrency Forbid, only when no
// earlier run of the instance is still unrecorded.
func (p *pass) renderJobs() {
	p.retired = map[objectKey]bool{}
	running := map[string][]string{} // namespace/configuration/instance -> unrecorded Job names
	runningNames := map[string]bool{}
	p.prefetchHeads(p.prevJobPaths())
	for _, f := range p.prevJobPaths() {
		ref, ok := parseObjectPath(f)
		if !ok || ref.kind != "job" || p.frozenConfigs[ref.namespace+"/"+ref.configuration] {
			continue
		}
		data := p.prev[f]
		h := p.head(f, data)
		name, ns := h.Metadata.Name, h.Metadata.Namespace
		if h.err != nil || name == "" {
			// Never drop what may be running, even when it cannot be read.
			p.errs = append(p.errs, &api.FieldError{File: f, Message: "rendered Job cannot be read; it is kept as it is until fixed by hand"})
			p.put(f, data, objMeta{ns: ref.namespace, cfg: ref.configuration})
			continue
		}
		if ns == "" {
			ns = ref.namespace
		}
		cfgName := h.Metadata.Labels[api.LabelConfiguration]
		if cfgName == "" {
			cfgName = ref.configuration
		}
		if p.scope != nil && !p.scope[ns+"/"+cfgName] {
			p.bailed = true
			return
		}
		inst := h.Metadata.Labels[api.LabelInstance]
		if inst == "" {
			// Hand-edited: still a Job that may be running, and its history needs a folder.
			inst = "unknown-instance"
		}
		ik := ns + "/" + cfgName + "/" + inst
		m := objMeta{ns: ns, cfg: cfgName, inst: inst, deviceID: h.Metadata.Annotations[api.AnnotationDeviceID]}
		in := p.instance(ik)
		if in != nil {
			m.nodes = in.nodes
		} else {
			m.nodes = h.nodes()
		}
		if rec, ok := p.records[ns+"/"+name]; ok {
			recBytes := p.recordBytes[ns+"/"+name]
			if recBytes == nil {
				recBytes = marshal(rec)
			}
			hp := historyPath(ns, cfgName, inst, name)
			p.out[hp] = historyFile(data, recBytes)
			p.retired[ref.key()] = true
			p.plan.instance(ns, cfgName, inst, m.deviceID, m.nodes)
			p.plan.add(ns, cfgName, inst, Change{Action: Retired, Kind: "Job", Name: name, History: hp,
				Reason: fmt.Sprintf("recorded %s%s; moved to %s", rec.Spec.Outcome, recordSummary(rec), hp)})
			continue
		}
		if h.refusedPin() {
			// Rendered before Jobs were pinned with one term per node: the API server refused
			// it, so it never ran and nothing can be lost. It is dropped here and, if still
			// wanted, rendered again below under the same name with a pinning it accepts.
			cp := p.plan.config(ns, cfgName, "")
			cp.Notes = append(cp.Notes, fmt.Sprintf("Job %s was pinned with one metadata.name requirement listing several nodes, which the API server refuses, so it never ran; it is rendered again with one node selector term per node", name))
			continue
		}
		target := f
		if in != nil {
			target = in.folder + "/" + path.Base(f)
		} else if cfg, ok := p.configs[ns+"/"+cfgName]; ok && inst != "" {
			target = p.instanceFolder(cfg, inst) + "/" + path.Base(f)
		}
		p.put(target, data, m)
		running[ik] = append(running[ik], name)
		runningNames[ns+"/"+name] = true
		cfg, cfgOK := p.configs[ns+"/"+cfgName]
		switch {
		case !cfgOK && !p.frozenConfigs[ns+"/"+cfgName]:
			p.plan.config(ns, cfgName, "deleted")
			p.plan.instance(ns, cfgName, inst, m.deviceID, m.nodes)
			p.plan.add(ns, cfgName, inst, Change{Action: Kept, Kind: "Job", Name: name,
				Reason: "its Configuration was deleted; the Job may still be running, so it stays until its JobRecord arrives"})
		case cfgOK && p.instance(ik) == nil && p.frozenInstances[ik] == nil:
			p.plan.instance(ns, cfgName, inst, m.deviceID, m.nodes)
			p.plan.add(ns, cfgName, inst, Change{Action: Kept, Kind: "Job", Name: name,
				Reason: "its device is gone; the Job may still be running, so it stays until its JobRecord arrives"})
		case cfgOK && !cfg.IsJobBroker():
			p.plan.instance(ns, cfgName, inst, m.deviceID, m.nodes)
			p.plan.add(ns, cfgName, inst, Change{Action: Kept, Kind: "Job", Name: name,
				Reason: "the Configuration no longer has a Job broker; the Job stays until its JobRecord arrives"})
		}
	}

	// Build every desired Job (in parallel where the memo does not have it) before deciding.
	type desired struct {
		cfg *api.ParsedConfiguration
		in  *instance
		key string
		ih  string
		bj  builtJob
		hit bool
	}
	var want []*desired
	for _, k := range sortedKeys(p.configs) {
		cfg := p.configs[k]
		if !cfg.IsJobBroker() || p.scope != nil && !p.scope[k] {
			continue
		}
		chash := jobHash(cfg)
		list := p.instances[k]
		var todo []*instance
		for _, in := range list {
			if in.jobHash == "" {
				todo = append(todo, in)
			}
		}
		parallel(len(todo), func(i int) {
			in := todo[i]
			in.jobHash = hashHex(16, chash, []byte(in.name), []byte(in.digest), []byte(in.deviceID), propsJSON(in.properties), []byte(strings.Join(in.nodes, ",")))
		})
		for _, in := range list {
			if p.frozenInstances[k+"/"+in.name] != nil {
				continue
			}
			ih := in.jobHash
			d := &desired{cfg: cfg, in: in, key: "job/" + ih, ih: ih}
			d.bj, d.hit = p.r.jobs.lookup(d.key)
			want = append(want, d)
		}
	}
	parallel(len(want), func(i int) {
		if d := want[i]; !d.hit {
			d.bj = buildJob(d.in, d.in.env(), d.ih)
		}
	})
	type started struct {
		path string
		bj   builtJob
		m    objMeta
		data []byte
		head *objectHead
	}
	var starts []*started
	for _, d := range want {
		p.r.jobs.store(d.key, d.bj)
		cfg, in, bj := d.cfg, d.in, d.bj
		ik := cfg.Key() + "/" + in.name
		id := cfg.Namespace + "/" + bj.name
		if runningNames[id] {
			continue
		}
		if _, done := p.records[id]; done {
			// This exact run already finished; an unchanged input never runs again.
			continue
		}
		p.plan.instance(cfg.Namespace, cfg.Name, in.name, in.deviceID, in.nodes)
		if others := running[ik]; len(others) > 0 && cfg.Policy.Concurrency != api.ConcurrencyAllow {
			sort.Strings(others)
			p.plan.add(cfg.Namespace, cfg.Name, in.name, Change{Action: Held, Kind: "Job", Name: bj.name,
				Reason: fmt.Sprintf("waiting for %s to be recorded finished (concurrency: Forbid)", strings.Join(others, ", "))})
			continue
		}
		starts = append(starts, &started{path: in.folder + "/job-" + bj.name + ".yaml", bj: bj,
			m: objMeta{ns: cfg.Namespace, cfg: cfg.Name, inst: in.name, deviceID: in.deviceID, nodes: in.nodes}})
		reason := "new run"
		if cfg.Policy.RunPolicy == api.RunPolicyOnce {
			reason = "the one run of this instance (runPolicy: Once)"
			if cfg.Policy.RunID != "" {
				reason = fmt.Sprintf("the run of runID %q (runPolicy: Once)", cfg.Policy.RunID)
			}
		} else if len(running[ik]) > 0 {
			reason = "new run alongside " + strings.Join(running[ik], ", ") + " (concurrency: Allow)"
		}
		p.plan.add(cfg.Namespace, cfg.Name, in.name, Change{Action: Started, Kind: "Job", Name: bj.name, Reason: reason})
	}
	parallel(len(starts), func(i int) { starts[i].data, starts[i].head = starts[i].bj.bytes(p.req.SourceCommit) })
	for _, s := range starts {
		p.put(s.path, s.data, s.m)
		p.r.heads.set(s.path, s.data, s.head)
	}
}

// renderHistory carries history/ over, adds the Jobs retired in this render and keeps the newest
// historyLimit runs of each instance; git history keeps the rest.
func (p *pass) renderHistory() {
	groups := map[string][]*historyEntry{}
	for _, f := range p.prevJobPaths() {
		if !strings.HasPrefix(f, HistoryDir) {
			continue
		}
		if _, retiredNow := p.out[f]; retiredNow {
			continue
		}
		h := p.history(f)
		p.out[f] = p.prev[f]
		if h.err != nil {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: fmt.Sprintf("history file cannot be read (%v); it is kept as it is", h.err)})
			continue
		}
		e := h.entry
		groups[e.namespace+"/"+e.config+"/"+e.instance] = append(groups[e.namespace+"/"+e.config+"/"+e.instance], e)
	}
	// The Jobs retired by this render, in order (not the whole output, sorted).
	var retired []string
	for f := range p.out {
		if strings.HasPrefix(f, "history/jobs/") && p.prev[f] == nil {
			retired = append(retired, f)
		}
	}
	sort.Strings(retired)
	for _, f := range retired {
		e, err := parseHistory(f, p.out[f])
		if err != nil {
			continue
		}
		groups[e.namespace+"/"+e.config+"/"+e.instance] = append(groups[e.namespace+"/"+e.config+"/"+e.instance], e)
	}
	for _, g := range sortedKeys(groups) {
		entries := groups[g]
		parts := strings.SplitN(g, "/", 3)
		ck := parts[0] + "/" + parts[1]
		if p.frozenConfigs[ck] {
			continue
		}
		limit := api.DefaultHistoryLimit
		if cfg, ok := p.configs[ck]; ok {
			limit = cfg.Policy.HistoryLimit
		}
		if len(entries) <= limit {
			continue
		}
		sort.Slice(entries, func(i, j int) bool {
			a, b := entries[i], entries[j]
			if !a.completion.Equal(b.completion) {
				return a.completion.After(b.completion)
			}
			return a.job > b.job
		})
		for _, e := range entries[limit:] {
			delete(p.out, e.path)
		}
		cp := p.plan.config(parts[0], parts[1], "")
		cp.Notes = append(cp.Notes, fmt.Sprintf("instance %s: %d older finished runs pruned from history/ (historyLimit %d; git history keeps them)", parts[2], len(entries)-limit, limit))
	}
}
