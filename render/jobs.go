package render

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// renderJobs applies the Job lifecycle. A rendered Job is frozen: it is carried over byte for
// byte until its JobRecord appears, then it moves to history/. A new run is rendered when the
// inputs give a Job name that has not run yet, and, under concurrency Forbid, only when no
// earlier run of the instance is still unrecorded. A scoped pass that finds a Job out of its
// scope returns an *outOfScopeError, having rendered nothing whole: the pass then runs whole.
func (p *pass) renderJobs() error {
	p.output.retired = map[objectKey]bool{}
	runs := unrecordedJobs{byInstance: map[string][]string{}, names: map[string]bool{}}
	p.prefetchHeads(p.prevJobPaths())
	for _, f := range p.prevJobPaths() {
		if err := p.carryJob(f, runs); err != nil {
			return err
		}
	}
	for _, id := range sortedKeys(p.req.elsewhere) {
		if e := p.req.elsewhere[id]; !e.finished {
			// A run its node left behind in another cluster holds the instance here as one
			// of its own would.
			_, name, _ := strings.Cut(id, "/")
			runs.byInstance[e.instance] = append(runs.byInstance[e.instance], name+" (cluster "+e.cluster+")")
		}
	}
	p.startJobs(p.desiredJobs(), runs)
	return nil
}

// unrecordedJobs are the rendered Jobs still waiting for their JobRecord.
type unrecordedJobs struct {
	byInstance map[string][]string // namespace/configuration/instance -> Job names
	names      map[string]bool     // namespace/Job name
}

// carryJob carries a rendered Job over, or retires it to history/ when its JobRecord has
// arrived. A scoped pass that finds a Job out of its scope returns an *outOfScopeError.
func (p *pass) carryJob(f string, runs unrecordedJobs) error {
	ref, ok := parseObjectPath(f)
	if !ok || ref.kind != "job" || p.loaded.frozenConfigs[ref.namespace+"/"+ref.configuration] {
		return nil
	}
	data := p.prev[f]
	h := p.head(f, data)
	name, ns := h.Metadata.Name, h.Metadata.Namespace
	if h.err != nil || name == "" {
		// Never drop what may be running, even when it cannot be read.
		p.errs = append(p.errs, &api.FieldError{File: f, Message: "rendered Job cannot be read; it is kept as it is until fixed by hand"})
		p.put(f, data, objMeta{ns: ref.namespace, cfg: ref.configuration})
		return nil
	}
	if ns == "" {
		ns = ref.namespace
	}
	cfgName := h.Metadata.Labels[api.LabelConfiguration]
	if cfgName == "" {
		cfgName = ref.configuration
	}
	if p.scoping.scope != nil && !p.scoping.scope[ns+"/"+cfgName] {
		return &outOfScopeError{"Job " + ns + "/" + name + " of " + cfgName}
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
	if rec, ok := p.loaded.records[ns+"/"+name]; ok {
		recBytes := p.loaded.recordBytes[ns+"/"+name]
		if recBytes == nil {
			recBytes = yamlcodec.Marshal(rec)
		}
		hp := historyPath(ns, cfgName, inst, name)
		p.output.files[hp] = historyFile(data, recBytes)
		p.output.retired[ref.key()] = true
		p.plan.instance(ns, cfgName, inst, m.deviceID, m.nodes)
		p.plan.add(ns, cfgName, inst, Change{Action: Retired, Kind: "Job", Name: name, History: hp,
			Reason: fmt.Sprintf("recorded %s%s; moved to %s", rec.Spec.Outcome, recordSummary(rec), hp)})
		return nil
	}
	if h.refusedPin() {
		// Rendered before Jobs were pinned with one term per node: the API server refused
		// it, so it never ran and nothing can be lost. It is dropped here and, if still
		// wanted, rendered again below under the same name with a pinning it accepts.
		cp := p.plan.config(ns, cfgName, "")
		cp.Notes = append(cp.Notes, fmt.Sprintf("Job %s was pinned with one metadata.name requirement listing several nodes, which the API server refuses, so it never ran; it is rendered again with one node selector term per node", name))
		return nil
	}
	target := f
	if in != nil {
		target = in.folder + "/" + path.Base(f)
	} else if cfg, ok := p.loaded.configs[ns+"/"+cfgName]; ok && inst != "" {
		target = p.instanceFolder(cfg, inst) + "/" + path.Base(f)
	}
	p.put(target, data, m)
	runs.byInstance[ik] = append(runs.byInstance[ik], name)
	runs.names[ns+"/"+name] = true
	p.planKeptJob(ik, name, m)
	return nil
}

// planKeptJob says why an unrecorded Job stays when nothing would render it now.
func (p *pass) planKeptJob(ik, name string, m objMeta) {
	ns, cfgName, inst := m.ns, m.cfg, m.inst
	cfg, cfgOK := p.loaded.configs[ns+"/"+cfgName]
	switch {
	case !cfgOK && !p.loaded.frozenConfigs[ns+"/"+cfgName]:
		p.plan.config(ns, cfgName, "deleted")
		p.plan.instance(ns, cfgName, inst, m.deviceID, m.nodes)
		p.plan.add(ns, cfgName, inst, Change{Action: Kept, Kind: "Job", Name: name,
			Reason: "its Configuration was deleted; the Job may still be running, so it stays until its JobRecord arrives"})
	case cfgOK && p.instance(ik) == nil && p.frozen.files[ik] == nil:
		p.plan.instance(ns, cfgName, inst, m.deviceID, m.nodes)
		p.plan.add(ns, cfgName, inst, Change{Action: Kept, Kind: "Job", Name: name,
			Reason: "its device is gone; the Job may still be running, so it stays until its JobRecord arrives"})
	case cfgOK && !cfg.IsJobBroker():
		p.plan.instance(ns, cfgName, inst, m.deviceID, m.nodes)
		p.plan.add(ns, cfgName, inst, Change{Action: Kept, Kind: "Job", Name: name,
			Reason: "the Configuration no longer has a Job broker; the Job stays until its JobRecord arrives"})
	}
}

// desiredJob is the Job the inputs give an instance of a Job broker Configuration.
type desiredJob struct {
	cfg *api.ParsedConfiguration
	in  *instance
	key string
	ih  string
	bj  builtJob
	hit bool
}

// desiredJobs builds every desired Job (in parallel where the memo does not have it) before
// anything is decided.
func (p *pass) desiredJobs() []*desiredJob {
	var want []*desiredJob
	for _, k := range sortedKeys(p.loaded.configs) {
		cfg := p.loaded.configs[k]
		if !cfg.IsJobBroker() || p.scoping.scope != nil && !p.scoping.scope[k] {
			continue
		}
		chash := jobHash(cfg, p.clusterEnv())
		list := p.placement.instances[k]
		var todo []*instance
		for _, in := range list {
			if in.jobHash == "" {
				todo = append(todo, in)
			}
		}
		parallel(len(todo), func(i int) { todo[i].jobHash = instanceJobHash(chash, todo[i]) })
		for _, in := range list {
			if p.frozen.files[k+"/"+in.name] != nil {
				continue
			}
			ih, key := in.jobHash, ""
			if p.dra() {
				ih, key = draJobHash(in, ih), "/dra"
			}
			d := &desiredJob{cfg: cfg, in: in, key: jobKey(cfg, ih) + key, ih: ih}
			d.bj, d.hit = p.r.jobs.lookup(d.key)
			want = append(want, d)
		}
	}
	dra := p.dra()
	parallel(len(want), func(i int) {
		if d := want[i]; !d.hit {
			d.bj = buildJob(d.in, p.clusterEnv(), d.ih, dra)
		}
	})
	return want
}

// instanceJobHash is the inputs hash of an instance's Job, given its Configuration's jobHash.
func instanceJobHash(chash []byte, in *instance) string {
	return hashHex(16, chash, []byte(in.name), []byte(in.digest), []byte(in.deviceID), propsJSON(in.properties), []byte(strings.Join(in.nodes, ",")))
}

// draJobHash is the inputs hash of an instance's Job in DRA mode, given its instanceJobHash: the
// same run claims its device otherwise, and is pinned only when the device is not shared.
func draJobHash(in *instance, ih string) string {
	return hashHex(16, []byte(ih), []byte("dra"), []byte(strconv.FormatBool(in.shared)))
}

// jobKey is a Job's key in the memo of built objects: its inputs hash and the log capture, which
// the Job carries as annotations but which is not part of the hash (nor of the run's name), so
// turning it on does not start a new run.
func jobKey(cfg *api.ParsedConfiguration, inputsHash string) string {
	if cfg.Policy.Logs == nil {
		return "job/" + inputsHash
	}
	return "job/" + inputsHash + "/" + hashHex(8, propsJSON(cfg.Policy.Logs.Annotations()))
}

// startJobs writes the desired Jobs that have not run yet and may start now.
func (p *pass) startJobs(want []*desiredJob, runs unrecordedJobs) {
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
		if runs.names[id] {
			continue
		}
		if _, done := p.loaded.records[id]; done {
			// This exact run already finished; an unchanged input never runs again.
			continue
		}
		if e, ok := p.req.elsewhere[id]; ok {
			if e.finished {
				continue // it ran in the cluster its node left, whose history keeps it
			}
			p.plan.instance(cfg.Namespace, cfg.Name, in.name, in.deviceID, in.nodes)
			p.plan.add(cfg.Namespace, cfg.Name, in.name, Change{Action: Held, Kind: "Job", Name: bj.name,
				Reason: fmt.Sprintf("its node moved here from cluster %s, where this run is rendered until that cluster's recorder records it; it does not start again here", e.cluster)})
			continue
		}
		p.plan.instance(cfg.Namespace, cfg.Name, in.name, in.deviceID, in.nodes)
		running := runs.byInstance[ik]
		if len(running) > 0 && cfg.Policy.Concurrency != api.ConcurrencyAllow {
			sort.Strings(running)
			p.plan.add(cfg.Namespace, cfg.Name, in.name, Change{Action: Held, Kind: "Job", Name: bj.name,
				Reason: fmt.Sprintf("waiting for %s to be recorded finished (concurrency: Forbid)", strings.Join(running, ", "))})
			continue
		}
		starts = append(starts, &started{path: in.folder + "/job-" + bj.name + ".yaml", bj: bj,
			m: objMeta{ns: cfg.Namespace, cfg: cfg.Name, inst: in.name, deviceID: in.deviceID, nodes: in.nodes}})
		p.plan.add(cfg.Namespace, cfg.Name, in.name, Change{Action: Started, Kind: "Job", Name: bj.name, Reason: startReason(cfg, running)})
	}
	parallel(len(starts), func(i int) { starts[i].data, starts[i].head = starts[i].bj.bytes(p.req.SourceCommit) })
	for _, s := range starts {
		p.put(s.path, s.data, s.m)
		p.r.heads.set(s.path, s.data, s.head)
	}
}

// startReason says why a Job starts, for the plan.
func startReason(cfg *api.ParsedConfiguration, running []string) string {
	switch {
	case cfg.Policy.RunPolicy == api.RunPolicyOnce && cfg.Policy.RunID != "":
		return fmt.Sprintf("the run of runID %q (runPolicy: Once)", cfg.Policy.RunID)
	case cfg.Policy.RunPolicy == api.RunPolicyOnce:
		return "the one run of this instance (runPolicy: Once)"
	case len(running) > 0:
		return "new run alongside " + strings.Join(running, ", ") + " (concurrency: Allow)"
	}
	return "new run"
}

// renderHistory carries history/ over, adds the Jobs retired in this render and keeps the newest
// historyLimit runs of each instance; git history keeps the rest.
func (p *pass) renderHistory() {
	groups := map[string][]*historyEntry{}
	for _, f := range p.prevJobPaths() {
		if !strings.HasPrefix(f, HistoryDir) {
			continue
		}
		if _, retiredNow := p.output.files[f]; retiredNow {
			continue
		}
		h := p.history(f)
		p.output.files[f] = p.prev[f]
		if h.err != nil {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: fmt.Sprintf("history file cannot be read (%v); it is kept as it is", h.err)})
			continue
		}
		e := h.entry
		groups[e.namespace+"/"+e.config+"/"+e.instance] = append(groups[e.namespace+"/"+e.config+"/"+e.instance], e)
	}
	// The Jobs retired by this render, in order (not the whole output, sorted).
	var retired []string
	for f := range p.output.files {
		if strings.HasPrefix(f, "history/jobs/") && p.prev[f] == nil {
			retired = append(retired, f)
		}
	}
	sort.Strings(retired)
	for _, f := range retired {
		e, err := parseHistory(f, p.output.files[f])
		if err != nil {
			continue
		}
		groups[e.namespace+"/"+e.config+"/"+e.instance] = append(groups[e.namespace+"/"+e.config+"/"+e.instance], e)
	}
	for _, g := range sortedKeys(groups) {
		entries := groups[g]
		parts := strings.SplitN(g, "/", 3)
		ck := parts[0] + "/" + parts[1]
		if p.loaded.frozenConfigs[ck] {
			continue
		}
		limit := api.DefaultHistoryLimit
		if cfg, ok := p.loaded.configs[ck]; ok {
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
			delete(p.output.files, e.path)
		}
		cp := p.plan.config(parts[0], parts[1], "")
		cp.Notes = append(cp.Notes, fmt.Sprintf("instance %s: %d older finished runs pruned from history/ (historyLimit %d; git history keeps them)", parts[2], len(entries)-limit, limit))
	}
}
