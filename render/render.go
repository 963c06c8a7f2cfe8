package render

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	corev1 "k8s.io/api/core/v1"

	"github.com/gitbroker/gitbroker/api"
)

// Request is one render: the repository files at one commit.
type Request struct {
	// Files holds the repository: gitbroker.yaml, configurations/, inventory/, status/jobs/ and
	// the previous rendered/ and history/. Other paths are ignored. A Renderer keeps the
	// files' bytes to know them again: they must not be changed after the render.
	Files Tree
	// Previous, when not nil, is the previous rendered/ and history/, given apart from the
	// inputs: Files' own rendered/ and history/ are then ignored. A kept Renderer given back its
	// last Result.Files here (the same map, which must not have been changed) renders on top of
	// it without a pass over it. The Renderer never changes Previous, and like Files it must not
	// be changed after the render.
	Previous Tree
	// SourceCommit is recorded in the metadata file and on Jobs started by this render. It may
	// be empty (a work tree that is not a commit).
	SourceCommit string
	// AllowDeletions lifts the deletion budget and the empty-output guard.
	AllowDeletions bool
	// Unreadable are input files that exist but could not be read as regular files (a symbolic
	// link, a FIFO), with why. Each is an invalid input like a file that does not parse.
	Unreadable map[string]string
	// Writers are the writer refs whose tips this render's inputs were verified from (a node's
	// gitbroker/inventory/<node>, gitbroker/status), by ref. They are recorded in the metadata
	// file, so the next render can refuse a tip that does not descend from them.
	Writers map[string]string
	// RenderedJobsOnly counts a JobRecord in status/jobs/ only when it names a Job this renderer
	// rendered (in the previous rendered/ or history/), so a record cannot retire, pre-empt or
	// release anything else. It is set when the inputs were verified.
	RenderedJobsOnly bool
	// Trust says which guarantee the inputs were verified under, for the plan ("" for a work
	// tree, where there is no writer to verify).
	Trust string
	// Untrusted are the inputs the caller refused to render (a forged or replayed tip), each a
	// sentence naming the writer, the commit and why. They are listed in the plan.
	Untrusted []string
}

// Result is the outcome of a render.
type Result struct {
	// Files is the complete new content of rendered/ and history/. When the render is refused
	// it equals Previous. A Renderer keeps it to know it again in its next render's files: it
	// must not be changed (copy it to change it). A kept Renderer reuses the map for a later
	// render's Files once the render after this one is done: a caller that holds a Result's
	// files longer than its next render copies them.
	Files Tree
	// Previous is the content of rendered/ and history/ before the render.
	Previous Tree
	// Diff lists the paths whose content differs between Previous and Files, sorted.
	Diff []string
	// InputsDigest is InputsDigest of the request's files, worked out once for the metadata
	// and for whoever commits the render.
	InputsDigest string
	Plan         *Plan
	// Errors are invalid inputs. Their previous output is kept; everything else renders.
	Errors api.ErrorList
	// Refused is set when a safety rule refused the render.
	Refused *RefusedError
	// Held explains, per node, why the deletion budget kept that node's part as it was while
	// everything else rendered (one node's churn never holds up the fleet).
	Held []string
	// Untrusted lists every input refused for who wrote it: the Request's, and JobRecords
	// ignored under RenderedJobsOnly.
	Untrusted []string
}

// Changed reports whether the render changes any file.
func (r *Result) Changed() bool { return !Equal(r.Files, r.Previous) }

// RefusedError is a render refused by a safety rule.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "render refused: " + e.Reason }

// Renderer renders repositories. It is safe for concurrent use; renders are serialized.
type Renderer struct {
	mu      sync.Mutex
	configs memo[parsedConfigFile]
	invs    memo[parsedInventoryFile]
	recs    memo[parsedRecordFile]
	heads   memo[*objectHead]
	hist    memo[historyParse]
	objs    memo[[]byte]
	jobs    memo[builtJob]
	// instanceSets are the last pass's instances, by Configuration.
	instanceSets map[string]*instanceSet
	last         lastOutput
	// spare is the output before the last one, a map the Renderer made, and spareLag the paths
	// where it may differ from the last: a scoped pass brings it up to date with them and makes
	// it its output, instead of copying the last output's hundred thousand files. nil when the
	// last pass was not scoped.
	spare    Tree
	spareLag []string
	// lastMade says the last output is a map the Renderer made, not a caller's Previous handed
	// back as it was (a render that changed nothing, or a refused one): only such a map may
	// become the spare.
	lastMade bool
	// scope is what the next pass needs to be scoped to the Configurations a change reaches
	// (scope.go); nil when it must render whole.
	scope *lastScope
	// refused are the last pass's checks of device properties, by inventory.
	refused map[*api.ParsedInventory]refusedCheck
	// once says the Renderer renders once (Render): it keeps nothing for a next pass.
	once bool
	// scoped counts the passes that were scoped, for tests.
	scoped int
}

// lastOutput is the last render's output with the index of its objects.
type lastOutput struct {
	files   Tree
	objects map[objectKey]string
	dups    bool
}

type historyParse struct {
	entry *historyEntry
	err   error
}

// New returns a Renderer.
func New() *Renderer { return &Renderer{} }

// Render renders once with a fresh Renderer.
func Render(req Request) *Result {
	r := New()
	r.once = true
	return r.Render(req)
}

// Render expands the request's repository into rendered/ and history/.
func (r *Renderer) Render(req Request) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.split(req)
	res, p := r.pass(req, in, nil, true)
	if res == nil {
		// The scoped work reached further than its Configurations.
		res, p = r.pass(req, in, nil, false)
	}
	if res.Refused != nil && p.scope != nil {
		// The budget is judged on the whole tree.
		p.dropIndex()
		res, p = r.pass(req, in, nil, false)
	}
	if res.Refused != nil {
		// Over the fleet-wide budget: hold the nodes that caused it and render the rest, as
		// if their inventories were invalid; the memos make the second pass cost only what
		// differs. What is still over the budget then is refused.
		if held := p.overBudgetNodes(); len(held) > 0 {
			p.dropIndex()
			res, p = r.pass(req, in, held, false)
		}
	}
	r.keep(res, p)
	return res
}

// keep remembers what the next render may reuse: the output and its index (a next render on top
// of it), and what the memos were used for.
func (r *Renderer) keep(res *Result, p *pass) {
	r.last = lastOutput{}
	if res.Refused != nil {
		p.dropIndex()
	}
	switch {
	case res.Refused == nil && p.outObjects != nil:
		r.last = lastOutput{files: res.Files, objects: p.outObjects, dups: p.outDups}
	case res.Refused != nil && p.prevObjects != nil:
		r.last = lastOutput{files: res.Files, objects: p.prevObjects, dups: p.prevDups}
	}
	if p.scope != nil {
		r.scoped++
	}
	// The output this pass was made on top of is the next scoped pass's to reuse, when this
	// one was scoped too (a whole pass made every file anew: nothing would be left to reuse).
	r.spare, r.spareLag = nil, nil
	if p.merged != nil && res.Refused == nil && p.onLast && r.lastMade {
		// The metadata file is written after the merge.
		r.spare, r.spareLag = p.prev, append(p.merged, MetadataPath)
	}
	r.lastMade = p.req.Previous == nil || !sameMap(res.Files, p.req.Previous)
	if p.refused != nil {
		r.refused = p.refused
	}
	if !r.once {
		p.keepScope(res)
	}
	// The memos keep what this pass used and drop the rest. A scoped pass used only its
	// Configurations' objects: the memos of objects and files keep everything until they hold
	// half as much again as the last whole pass left them, and the next pass is then whole.
	rotate := []interface{ rotate() }{&r.configs, &r.invs, &r.recs}
	if p.scope == nil {
		rotate = append(rotate, &r.heads, &r.hist, &r.objs, &r.jobs)
	} else if r.objs.grown() || r.heads.grown() || r.jobs.grown() {
		r.scope = nil
	}
	for _, m := range rotate {
		m.rotate()
	}
}

// split is a request's files parted into the previous output and the inputs.
type split struct {
	prev Tree
	// onLast says prev is the Renderer's last output, the very byte slices.
	onLast bool
	// inputs are the input paths, sorted.
	inputs []string
}

// split parts a request's files in one pass. A kept Renderer's previous output is, render after
// render, its own last output: it is then taken as it is, not copied out of a fleet's files. Given
// apart (Request.Previous), it is known by the map's identity, and only the inputs are looked at.
func (r *Renderer) split(req Request) split {
	last := r.last.files
	inputs := []string{}
	if req.Previous != nil {
		for f := range req.Files {
			if IsInput(f) {
				inputs = append(inputs, f)
			}
		}
		sort.Strings(inputs)
		same := last != nil && len(last) == len(req.Previous) && sameMap(last, req.Previous)
		return split{prev: req.Previous, onLast: same, inputs: inputs}
	}
	same, owned := last != nil, 0
	for f, b := range req.Files {
		if IsOwned(f) {
			owned++
			if same {
				y, ok := last[f]
				same = ok && len(b) == len(y) && (len(b) == 0 || unsafe.SliceData(b) == unsafe.SliceData(y))
			}
			continue
		}
		if IsInput(f) {
			inputs = append(inputs, f)
		}
	}
	sort.Strings(inputs)
	if same && owned == len(last) {
		return split{prev: last, onLast: true, inputs: inputs}
	}
	return split{prev: req.Files.Owned(), inputs: inputs}
}

// sameMap reports whether a and b are the same map (not maps with the same entries).
func sameMap(a, b Tree) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func (r *Renderer) pass(req Request, in split, held map[string]string, scoped bool) (*Result, *pass) {
	prev := in.prev
	p := &pass{r: r, req: req, prev: prev, plan: newPlanBuilder(), held: held,
		onLast: in.onLast, filesSorted: in.inputs, layoutWarns: map[string][]string{}, frozenNotes: map[string][]string{}}
	p.scoped = scoped && p.onLast && r.scope != nil
	size := len(prev)
	if p.scoped {
		size = 0
	}
	// The output of a whole pass is about as large as the previous one: maps made to size are
	// not grown and rehashed a hundred thousand entries at a time.
	p.out, p.meta = make(Tree, size), make(map[string]objMeta, size)
	return p.run(), p
}

// pass is the state of one render.
type pass struct {
	r        *Renderer
	req      Request
	settings api.ResolvedSettings
	prev     Tree
	out      Tree
	plan     *planBuilder
	errs     api.ErrorList
	prevMeta Metadata

	configs       map[string]*api.ParsedConfiguration // valid, by namespace/name
	configFiles   map[string][]string
	frozenConfigs map[string]bool
	frozenNodes   map[string]bool
	held          map[string]string // node -> why the deletion budget holds its part
	invs          []*api.ParsedInventory

	records     map[string]*api.JobRecord // by namespace/job, from status/ and history/
	recordBytes map[string][]byte         // by namespace/job, status/ files only
	byDevice    map[string][]*api.JobRecord
	// ignoredRecords are JobRecords refused under RenderedJobsOnly, for the plan.
	ignoredRecords []string

	instances       map[string][]*instance  // by configuration key
	sets            map[string]*instanceSet // by configuration key
	frozenInstances map[string][]string     // namespace/configuration/instance -> previous files
	frozenWhy       map[string]string       // why an instance is frozen, when not for an invalid inventory
	disputed        []*instance             // shared instances whose reporting nodes disagree

	retired map[objectKey]bool // Jobs retired in this render
	meta    map[string]objMeta
	pending []*pendingBuild

	// The sorted paths of prev and of the request's inputs, each sorted once per pass: a
	// fleet's tree holds over a hundred thousand paths.
	prevSorted, filesSorted []string
	prevJobs                []string
	// diff is Diff(prev, out), worked out once out is final (diffed).
	diff   []string
	diffed bool
	// digest is InputsDigest(req.Files).
	digest string
	// The objects of prev and of the finished out, each indexed once per pass when asked for,
	// and whether two files held one object.
	prevObjects, outObjects map[objectKey]string
	prevDups, outDups       bool
	// outFromDiff says outObjects is prevObjects brought up to date with the diff, in place:
	// undo holds what it held for the objects it changed, and prevCount its size.
	outFromDiff bool
	undo        map[objectKey]prevEntry
	prevCount   int

	// onLast says prev is exactly the Renderer's last output; scoped that this pass may be
	// scoped (scope.go), and scope, once decided, the Configurations it renders (nil: all).
	onLast, scoped bool
	scope          map[string]bool
	// bailed says the scoped work reached a Configuration out of its scope.
	bailed bool
	// fresh are the scoped output's files by Configuration.
	fresh map[string]*configSlice
	// merged are the paths a scoped pass wrote over prev or deleted from it (mergeScope).
	merged []string
	// layoutWarns are the layout's warnings, by the Configuration whose folder they are about.
	layoutWarns map[string][]string
	// refused are this pass's checks of device properties, by inventory (kept for the next).
	refused map[*api.ParsedInventory]refusedCheck
	// rendered counts the Jobs of prev when RenderedJobsOnly needed them (renderedJobs).
	rendered map[string]int
	// frozenNotes are the plan's notes about instances kept for nodes with an invalid
	// inventory, by Configuration: a scoped pass carries the others' over.
	frozenNotes map[string][]string
}

// prevIndex is the index of prev: the last render's index of its output when prev is exactly
// that output (a daemon renders on top of its own last render), else indexed anew.
func (p *pass) prevIndex() map[objectKey]string {
	if p.prevObjects == nil {
		if last := p.r.last; last.objects != nil && p.onLast {
			p.prevObjects, p.prevDups = last.objects, last.dups
		} else {
			p.prevObjects, p.prevDups = objectIndex(p.prev)
		}
	}
	return p.prevObjects
}

// outIndex may only be asked for once out is final: after the layout and the metadata. It is
// the index of prev brought up to date with the files of the diff, when no object of prev was
// held by two files (then which of them the index names cannot be known from the diff alone).
func (p *pass) outIndex() map[objectKey]string {
	if p.outObjects != nil {
		return p.outObjects
	}
	prev := p.prevIndex()
	if p.prevDups || !p.diffed {
		p.outObjects, p.outDups = objectIndex(p.out)
		return p.outObjects
	}
	// The index of prev becomes that of out in place, and undo keeps what it held for prevID
	// and for dropIndex: a copy would cost a pass over every object of the fleet.
	if prev == nil {
		prev = map[objectKey]string{}
		p.prevObjects = prev
	}
	idx := prev
	p.prevCount, p.undo = len(prev), map[objectKey]prevEntry{}
	set := func(k objectKey, f string, present bool) {
		if _, saved := p.undo[k]; !saved {
			old, had := idx[k]
			p.undo[k] = prevEntry{file: old, had: had}
		}
		if present {
			idx[k] = f
		} else {
			delete(idx, k)
		}
	}
	// Without duplicates each object of prev has one file, the one the index names: a file
	// gone from out takes its object with it, unless a file of the diff holds it again.
	for _, f := range p.diff {
		if _, ok := p.out[f]; ok {
			continue
		}
		if ref, ok := parseObjectPath(f); ok && idx[ref.key()] == f {
			set(ref.key(), "", false)
		}
	}
	for _, f := range p.diff {
		if _, ok := p.out[f]; !ok {
			continue
		}
		if ref, ok := parseObjectPath(f); ok {
			old, dup := idx[ref.key()]
			if dup && old != f {
				p.outDups = true
			}
			if !dup || f < old {
				set(ref.key(), f, true)
			}
		}
	}
	p.outObjects, p.outFromDiff = idx, true
	return idx
}

// prevEntry is what the index of prev held for an object before outIndex changed it.
type prevEntry struct {
	file string
	had  bool
}

// prevID is the file of prev that holds an object, whether or not outIndex has made prev's
// index into out's since.
func (p *pass) prevID(k objectKey) (string, bool) {
	if e, ok := p.undo[k]; ok {
		return e.file, e.had
	}
	f, ok := p.prevIndex()[k]
	return f, ok
}

// prevLen is the number of objects in prev.
func (p *pass) prevLen() int {
	if p.undo != nil {
		return p.prevCount
	}
	return len(p.prevIndex())
}

// dropIndex gives the index of prev back what outIndex changed in it: a pass that is not kept
// leaves the Renderer's index of its last output as it found it.
func (p *pass) dropIndex() {
	for k, e := range p.undo {
		if e.had {
			p.prevObjects[k] = e.file
		} else {
			delete(p.prevObjects, k)
		}
	}
	p.undo, p.outObjects, p.outFromDiff = nil, nil, false
}

func (p *pass) prevPaths() []string {
	if p.prevSorted == nil {
		p.prevSorted = p.prev.Paths()
	}
	return p.prevSorted
}

// prevJobPaths are the paths of prev that may hold a Job or its history, sorted: every file under
// history/, and each file under rendered/ named job-*. The Job lifecycle passes over these,
// not over the Pods and Services beside them.
func (p *pass) prevJobPaths() []string {
	if p.prevJobs == nil && p.scope != nil {
		p.prevJobs = p.prevJobPathsIn(p.scope)
	}
	if p.prevJobs == nil {
		p.prevJobs = []string{}
		for f := range p.prev {
			if strings.HasPrefix(f, HistoryDir) || strings.HasPrefix(f, RenderedDir) && strings.HasPrefix(path.Base(f), "job-") {
				p.prevJobs = append(p.prevJobs, f)
			}
		}
		sort.Strings(p.prevJobs)
	}
	return p.prevJobs
}

// inputPaths are the request's inputs, sorted: gitbroker.yaml, the Configurations, the
// inventories and the records, not the ten times as many rendered files beside them.
func (p *pass) inputPaths() []string {
	if p.filesSorted == nil {
		p.filesSorted = []string{}
		for f := range p.req.Files {
			if IsInput(f) {
				p.filesSorted = append(p.filesSorted, f)
			}
		}
		sort.Strings(p.filesSorted)
	}
	return p.filesSorted
}

// objMeta says which configuration and instance an output file belongs to, for the plan.
type objMeta struct {
	ns, cfg, inst, deviceID string
	nodes                   []string
}

func (p *pass) run() *Result {
	p.digest = digestOf(p.req.Files, p.inputPaths())
	res := &Result{Previous: p.prev, InputsDigest: p.digest}
	settings, errs := api.ParseSettings("gitbroker.yaml", p.req.Files["gitbroker.yaml"])
	if why, ok := p.req.Unreadable[api.SettingsPath]; ok {
		errs = append(errs, &api.FieldError{File: api.SettingsPath, Message: why})
	}
	if len(errs) > 0 {
		// Settings shape everything; without them nothing is rendered and nothing is lost.
		res.Files, res.Errors = p.prev, errs
		res.Untrusted = append([]string(nil), p.req.Untrusted...)
		res.Plan = &Plan{Configurations: []*ConfigurationPlan{}, Errors: errStrings(errs), Trust: p.req.Trust, Untrusted: res.Untrusted}
		return res
	}
	p.settings = settings
	p.prevMeta = ParseMetadata(p.prev[MetadataPath])

	p.loadConfigurations()
	p.loadInventories()
	p.loadRecords()
	p.buildInstances()
	if p.scoped {
		p.scope = p.scopeFor()
	}
	p.planConfigurations()
	p.findFrozenInstances()
	p.renderBrokers()
	p.renderJobs()
	if p.bailed {
		return nil
	}
	p.renderHistory()
	p.copyFrozenConfigurations()
	p.layout()
	if p.scope != nil && !p.mergeScope() {
		return nil
	}
	p.writeMetadata()

	p.errs.Sort()
	res.Errors = p.errs
	for _, n := range sortedKeys(p.held) {
		res.Held = append(res.Held, p.held[n])
	}
	p.planFromDiff()
	plan := p.plan.finish()
	plan.Errors = errStrings(p.errs)
	res.Untrusted = append(append([]string(nil), p.req.Untrusted...), p.ignoredRecords...)
	plan.Trust, plan.Untrusted = p.req.Trust, res.Untrusted
	res.Plan = plan
	res.Files, res.Diff = p.out, p.diff
	if reason := p.checkSafety(); reason != "" && !p.req.AllowDeletions {
		res.Refused = &RefusedError{Reason: reason}
		plan.Refused = reason
		res.Files, res.Diff = p.prev, nil
	}
	return res
}

func errStrings(errs api.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

func (p *pass) warn(format string, args ...any) {
	p.plan.plan.Warnings = append(p.plan.plan.Warnings, fmt.Sprintf(format, args...))
}

func (p *pass) loadConfigurations() {
	p.configs = map[string]*api.ParsedConfiguration{}
	p.configFiles = map[string][]string{}
	p.frozenConfigs = map[string]bool{}
	var invalid []string
	for _, f := range sortedKeys(p.req.Unreadable) {
		if isConfigurationPath(f) {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: p.req.Unreadable[f]})
			invalid = append(invalid, f)
		}
	}
	var files []string
	parsedFiles := map[string]parsedConfigFile{}
	definers := map[string][]string{} // Configuration key -> the files that define it
	for _, f := range p.inputPaths() {
		if !isConfigurationPath(f) {
			continue
		}
		data := p.req.Files[f]
		// Parsing fills in the default namespace, so it is part of the memo key.
		parsed := p.r.configs.get(p.settings.DefaultNamespace+"\x00"+f, data, func() parsedConfigFile {
			cs, errs := api.ParseConfigurations(f, data, p.settings.DefaultNamespace)
			return parsedConfigFile{configs: cs, errs: errs}
		})
		files = append(files, f)
		parsedFiles[f] = parsed
		seen := map[string]bool{}
		for _, c := range parsed.configs {
			if !seen[c.Key()] {
				definers[c.Key()] = append(definers[c.Key()], f)
				seen[c.Key()] = true
			}
		}
	}
	for _, f := range files {
		parsed := parsedFiles[f]
		errs := parsed.errs
		inFile := map[string]bool{}
		for _, c := range parsed.configs {
			// Defined in two files, neither definition wins: which one sorts first must never
			// decide what runs. Both files are invalid, and the Configuration keeps its output.
			if others := slices.DeleteFunc(slices.Clone(definers[c.Key()]), func(o string) bool { return o == f }); len(others) > 0 {
				errs = append(errs, c.Doc.Errorf("metadata.name", "Configuration %s is also defined in %s; define it in one file only (both definitions are ignored and its previous output is kept)", c.Key(), strings.Join(others, ", ")))
			} else if inFile[c.Key()] {
				errs = append(errs, c.Doc.Errorf("metadata.name", "Configuration %s is defined twice in this file", c.Key()))
			}
			inFile[c.Key()] = true
		}
		if len(errs) > 0 {
			p.errs = append(p.errs, errs...)
			invalid = append(invalid, f)
			continue
		}
		var keys []string
		for _, c := range parsed.configs {
			p.configs[c.Key()] = c
			keys = append(keys, c.Key())
		}
		sort.Strings(keys)
		p.configFiles[f] = keys
	}
	// An invalid file keeps what it rendered before: its Configurations are frozen, and its
	// entry in the metadata is carried so the next render still knows them.
	for _, f := range invalid {
		keys := p.prevMeta.ConfigurationFiles[f]
		var kept []string
		for _, k := range keys {
			if _, ok := p.configs[k]; !ok {
				p.frozenConfigs[k] = true
				kept = append(kept, k)
			}
		}
		if len(kept) > 0 {
			p.configFiles[f] = kept
		}
	}
}

// planConfigurations says which Configurations were added, removed or moved to another file
// since the last render: that changes the metadata file even when no object changes (a new
// Configuration no device reports yet), and the plan must say why a file changes.
func (p *pass) planConfigurations() {
	if p.prevMeta.ConfigurationFiles == nil && len(p.prev) == 0 {
		// The first render: every object it starts is in the plan already.
		return
	}
	was, is := map[string]string{}, map[string]string{}
	for f, keys := range p.prevMeta.ConfigurationFiles {
		for _, k := range keys {
			was[k] = f
		}
	}
	for f, keys := range p.configFiles {
		for _, k := range keys {
			is[k] = f
		}
	}
	for _, k := range sortedKeys(is) {
		ns, name, _ := strings.Cut(k, "/")
		switch old, ok := was[k]; {
		case !ok:
			reason := "defined in " + is[k]
			if len(p.instances[k]) == 0 {
				reason += "; no node reports a device for it yet"
			}
			p.plan.add(ns, name, "", Change{Action: Created, Kind: "Configuration", Name: name, Reason: reason})
		case old != is[k]:
			cp := p.plan.config(ns, name, "")
			cp.Notes = append(cp.Notes, fmt.Sprintf("now defined in %s (was %s)", is[k], old))
		}
	}
	for _, k := range sortedKeys(was) {
		if _, ok := is[k]; !ok && !p.frozenConfigs[k] {
			ns, name, _ := strings.Cut(k, "/")
			p.plan.add(ns, name, "", Change{Action: Removed, Kind: "Configuration", Name: name, Reason: "no longer defined (was in " + was[k] + ")"})
		}
	}
}

func (p *pass) loadInventories() {
	p.frozenNodes = map[string]bool{}
	p.refused = make(map[*api.ParsedInventory]refusedCheck, len(p.r.refused))
	var paths []string
	for _, f := range p.inputPaths() {
		if isInventoryPath(f) {
			paths = append(paths, f)
		}
	}
	all := p.r.invs.getMany(p.settings.DefaultNamespace, paths, p.req.Files, func(f string, data []byte) parsedInventoryFile {
		inv, errs := api.ParseInventory(f, data, p.settings.DefaultNamespace)
		return parsedInventoryFile{inv: inv, errs: errs}
	})
	for _, f := range sortedKeys(p.req.Unreadable) {
		if isInventoryPath(f) {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: p.req.Unreadable[f]})
			p.frozenNodes[api.NodeFromInventoryPath(f)] = true
		}
	}
	// Nodes the deletion budget holds keep their part as it was, whether their inventory
	// changed or is gone.
	for _, n := range sortedKeys(p.held) {
		p.frozenNodes[n] = true
		p.warn("%s", p.held[n])
	}
	for i, f := range paths {
		parsed := all[i]
		if p.held[api.NodeFromInventoryPath(f)] != "" {
			continue
		}
		errs := parsed.errs
		if len(errs) == 0 {
			errs = p.refusedPropertiesOf(parsed.inv)
		}
		if len(errs) > 0 {
			p.errs = append(p.errs, errs...)
			p.frozenNodes[api.NodeFromInventoryPath(f)] = true
			continue
		}
		p.invs = append(p.invs, parsed.inv)
		for j, ic := range parsed.inv.Spec.Configurations {
			k := ic.Namespace + "/" + ic.Name
			if _, ok := p.configs[k]; !ok && !p.frozenConfigs[k] && len(ic.Devices) > 0 {
				e := parsed.inv.Doc.Errorf(fmt.Sprintf("spec.configurations[%d].name", j),
					"%d devices reported for Configuration %s, which does not exist", len(ic.Devices), k)
				p.warn("%s", e.Error())
			}
		}
	}
}

// refusedCheck is refusedProperties of one parsed inventory, and the Configurations it was
// checked against (nil where the inventory names one that does not exist).
type refusedCheck struct {
	configs []*api.ParsedConfiguration
	errs    api.ErrorList
}

// refusedPropertiesOf is refusedProperties, worked out again only for an inventory or a
// Configuration that changed since the last pass.
func (p *pass) refusedPropertiesOf(inv *api.ParsedInventory) api.ErrorList {
	if c, ok := p.r.refused[inv]; ok && len(c.configs) == len(inv.Spec.Configurations) {
		same := true
		for i, ic := range inv.Spec.Configurations {
			if p.configs[ic.Namespace+"/"+ic.Name] != c.configs[i] {
				same = false
				break
			}
		}
		if same {
			p.refused[inv] = c
			return c.errs
		}
	}
	c := refusedCheck{configs: make([]*api.ParsedConfiguration, len(inv.Spec.Configurations)), errs: p.refusedProperties(inv)}
	for i, ic := range inv.Spec.Configurations {
		c.configs[i] = p.configs[ic.Namespace+"/"+ic.Name]
	}
	p.refused[inv] = c
	return c.errs
}

// refusedProperties finds device properties that would change how a broker loads code or where
// it connects, which a device may set only when its Configuration allows them by name. Like any
// invalid inventory, the node's part is then kept as it was.
func (p *pass) refusedProperties(inv *api.ParsedInventory) api.ErrorList {
	var errs api.ErrorList
	for i, ic := range inv.Spec.Configurations {
		cfg, ok := p.configs[ic.Namespace+"/"+ic.Name]
		if !ok {
			continue
		}
		for j, d := range ic.Devices {
			for _, k := range sortedKeys(d.Properties) {
				if api.RefusedDeviceProperty(k) && !cfg.AllowsDeviceProperty(k) {
					errs = append(errs, inv.Doc.Errorf(fmt.Sprintf("spec.configurations[%d].devices[%d].properties.%s", i, j, k),
						"a device may not set %s: it changes how a broker loads code or where it connects; Configuration %s can allow it by name (spec.allowedDeviceProperties, or the annotation %s)",
						k, cfg.Key(), api.AnnotationAllowedDeviceProperties))
				}
			}
		}
	}
	return errs
}

func (p *pass) loadRecords() {
	p.records = map[string]*api.JobRecord{}
	p.recordBytes = map[string][]byte{}
	p.byDevice = map[string][]*api.JobRecord{}
	for _, f := range sortedKeys(p.req.Unreadable) {
		if isRecordPath(f) {
			p.errs = append(p.errs, &api.FieldError{File: f, Message: p.req.Unreadable[f]})
		}
	}
	// Every Job of prev is looked for only when there is a record to check.
	var rendered map[string]int
	for _, f := range p.inputPaths() {
		if !isRecordPath(f) {
			continue
		}
		data := p.req.Files[f]
		parsed := p.r.recs.get(f, data, func() parsedRecordFile {
			rec, errs := api.ParseJobRecordFile(f, data)
			return parsedRecordFile{rec: rec, errs: errs}
		})
		if len(parsed.errs) > 0 {
			p.errs = append(p.errs, parsed.errs...)
			continue
		}
		k := parsed.rec.Namespace + "/" + parsed.rec.Name
		if p.req.RenderedJobsOnly && rendered == nil {
			rendered = p.renderedJobs()
		}
		if p.req.RenderedJobsOnly && rendered[k] == 0 {
			p.ignoredRecords = append(p.ignoredRecords, fmt.Sprintf("%s: the Job %s was never rendered here; the record is ignored", f, k))
			continue
		}
		if p.req.RenderedJobsOnly {
			if why := p.recordMismatch(parsed.rec.JobRecord); why != "" {
				p.ignoredRecords = append(p.ignoredRecords, fmt.Sprintf("%s: %s; the record is ignored", f, why))
				continue
			}
		}
		p.records[k] = parsed.rec.JobRecord
		p.recordBytes[k] = data
	}
	for _, f := range p.prevHistoryPaths() {
		h := p.history(f)
		if h.err != nil || h.entry == nil || h.entry.record == nil {
			continue
		}
		k := h.entry.namespace + "/" + h.entry.job
		if _, ok := p.records[k]; !ok {
			p.records[k] = h.entry.record
		}
	}
	for _, k := range sortedKeys(p.records) {
		rec := p.records[k]
		dk := rec.Namespace + "/" + rec.Spec.Configuration + "/" + rec.Spec.DeviceID
		p.byDevice[dk] = append(p.byDevice[dk], rec)
	}
}

// recordMismatch says how a record disagrees with the Job it names, as the renderer rendered
// it (its Configuration, instance and device), or "" when it agrees: a record may retire, and
// release the Pods waiting on, only the very Job it is the outcome of. The Job is looked for
// where the record's own claims put it (history/ by its path, rendered/ in the claimed
// Configuration's folder), so a record that claims another Configuration finds nothing.
func (p *pass) recordMismatch(rec *api.JobRecord) string {
	ns, name, cfgName, inst := rec.Namespace, rec.Name, rec.Spec.Configuration, rec.Spec.Instance
	if _, ok := p.prev[historyPath(ns, cfgName, inst, name)]; ok {
		h := p.history(historyPath(ns, cfgName, inst, name))
		if h.err == nil && h.entry != nil && h.entry.record != nil && h.entry.record.Spec.DeviceID != rec.Spec.DeviceID {
			return fmt.Sprintf("it names device %q, but the Job %s/%s ran for device %q", rec.Spec.DeviceID, ns, name, h.entry.record.Spec.DeviceID)
		}
		return ""
	}
	var candidates []string
	if cfg, ok := p.configs[ns+"/"+cfgName]; ok {
		candidates = append(candidates, p.instanceFolder(cfg, inst)+"/job-"+name+".yaml")
	}
	candidates = append(candidates, configFolder(ns, cfgName)+"/job-"+name+".yaml")
	file := ""
	for _, c := range candidates {
		if _, ok := p.prev[c]; ok {
			file = c
			break
		}
	}
	if file == "" {
		// Shards that changed since: look through the claimed Configuration's folder.
		prefix, suffix := configFolder(ns, cfgName)+"/", "/job-"+name+".yaml"
		for f := range p.prev {
			if strings.HasPrefix(f, prefix) && strings.HasSuffix(f, suffix) && strings.Count(f[len(prefix):], "/") == 1 {
				file = f
				break
			}
		}
	}
	if file == "" {
		return fmt.Sprintf("it names Configuration %s and instance %s, but the Job %s/%s was not rendered for them", cfgName, inst, ns, name)
	}
	h := p.head(file, p.prev[file])
	if h.err != nil {
		return fmt.Sprintf("the Job %s/%s it names cannot be read", ns, name)
	}
	jns := h.Metadata.Namespace
	if jns == "" {
		jns = ns
	}
	switch {
	case jns != ns || h.Metadata.Name != name:
		return fmt.Sprintf("it names the Job %s/%s, but %s holds %s/%s", ns, name, file, jns, h.Metadata.Name)
	case h.Metadata.Labels[api.LabelConfiguration] != cfgName:
		return fmt.Sprintf("it names Configuration %s, but the Job %s/%s belongs to %q", cfgName, ns, name, h.Metadata.Labels[api.LabelConfiguration])
	case h.Metadata.Labels[api.LabelInstance] != inst:
		return fmt.Sprintf("it names instance %s, but the Job %s/%s ran for instance %q", inst, ns, name, h.Metadata.Labels[api.LabelInstance])
	case h.Metadata.Annotations[api.AnnotationDeviceID] != rec.Spec.DeviceID:
		return fmt.Sprintf("it names device %q, but the Job %s/%s ran for device %q", rec.Spec.DeviceID, ns, name, h.Metadata.Annotations[api.AnnotationDeviceID])
	}
	return ""
}

// renderedJobs is every Job (namespace/name) in the previous rendered/ and history/.
// Each counts the files that name the Job (a kept Renderer brings the count up to date with
// each render's diff: keepScope).
func (p *pass) renderedJobs() map[string]int {
	if p.onLast && p.r.scope != nil && p.r.scope.rendered != nil {
		p.rendered = p.r.scope.rendered
		return p.rendered
	}
	out := map[string]int{}
	for f, data := range p.prev {
		if job, ok := p.jobOf(f, data); ok {
			out[job]++
		}
	}
	p.rendered = out
	return out
}

// jobOf is the Job (namespace/name) a file of rendered/ or history/ holds, if it holds one.
func (p *pass) jobOf(f string, data []byte) (string, bool) {
	if ref, ok := parseObjectPath(f); ok && ref.kind == "job" {
		h := p.head(f, data)
		if h.err != nil || h.Metadata.Name == "" {
			return "", false
		}
		ns := h.Metadata.Namespace
		if ns == "" {
			ns = ref.namespace
		}
		return ns + "/" + h.Metadata.Name, true
	}
	if strings.HasPrefix(f, historyJobsDir) {
		if h := p.historyOf(f, data); h.err == nil && h.entry != nil {
			return h.entry.namespace + "/" + h.entry.job, true
		}
	}
	return "", false
}

func (p *pass) history(f string) historyParse { return p.historyOf(f, p.prev[f]) }

func (p *pass) historyOf(f string, data []byte) historyParse {
	return p.r.hist.get(f, data, func() historyParse {
		e, err := parseHistory(f, data)
		return historyParse{entry: e, err: err}
	})
}

func (p *pass) head(f string, data []byte) *objectHead {
	return p.r.heads.get(f, data, func() *objectHead { return parseHead(data) })
}

// buildInstances groups every valid inventory's devices into Akri instances.
func (p *pass) buildInstances() {
	p.instances = map[string][]*instance{}
	sort.Slice(p.invs, func(i, j int) bool { return p.invs[i].Name < p.invs[j].Name })
	// Which inventories report devices for each Configuration, in node order: with the
	// Configuration itself, all its instances are made of.
	reports := map[string][]report{}
	for _, inv := range p.invs {
		for j := range inv.Spec.Configurations {
			ic := &inv.Spec.Configurations[j]
			k := ic.Namespace + "/" + ic.Name
			if _, ok := p.configs[k]; ok {
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
		if s := p.r.instanceSets[k]; s != nil && s.reusable(p.configs[k], reports[k]) {
			sets[i] = s
			continue
		}
		todo = append(todo, i)
	}
	parallel(len(todo), func(j int) {
		k := keys[todo[j]]
		sets[todo[j]] = p.groupInstances(k, reports[k])
	})
	kept := make(map[string]*instanceSet, len(keys))
	for i, k := range keys {
		s := sets[i]
		kept[k] = s
		for _, w := range s.warns {
			p.warn("%s", w)
		}
		p.instances[k] = s.list
		for _, in := range s.list {
			if in.disputed != "" {
				p.disputed = append(p.disputed, in)
			}
		}
	}
	p.r.instanceSets, p.sets = kept, kept
}

// instance finds an instance by namespace/configuration/instance.
func (p *pass) instance(ik string) *instance {
	ns, rest, _ := strings.Cut(ik, "/")
	cfg, name, _ := strings.Cut(rest, "/")
	s := p.sets[ns+"/"+cfg]
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
	cfg := p.configs[k]
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
	digests := make(map[string]string, len(idents))
	collided := map[string]bool{}
	pending := idents
	// Akri's 3-byte digest; members of a collision group move to 6 bytes, then 16.
	for _, size := range []int{3, 6, 16} {
		groups := map[string][]string{}
		for _, id := range pending {
			a := devs[id]
			d := akriDigest(a.id, a.node, a.shared, size)
			digests[id] = d
			groups[d] = append(groups[d], id)
		}
		pending = nil
		for _, d := range sortedKeys(groups) {
			if g := groups[d]; len(g) > 1 {
				var ids []string
				for _, id := range g {
					collided[id] = true
					ids = append(ids, fmt.Sprintf("%q", devs[id].id))
				}
				if size == 3 {
					set.warns = append(set.warns, fmt.Sprintf("Configuration %s: devices %s share the Akri digest %s; their instances use %d-character digests", k, strings.Join(ids, ", "), d, 12))
				}
				pending = append(pending, g...)
			}
		}
		if len(pending) == 0 {
			break
		}
	}
	list := make([]*instance, 0, len(idents))
	for _, id := range idents {
		a := devs[id]
		in := &instance{cfg: cfg, digest: digests[id], deviceID: a.id, shared: a.shared,
			nodes: a.nodes, properties: a.props, collided: collided[id]}
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

// findFrozenInstances keeps, for each node whose inventory is invalid, every instance that node
// took part in exactly as it was rendered before.
//
// A shared instance that valid inventories still report is frozen by such a node only when that
// node holds one of its Pods: a node cannot freeze another node's broker (or its runs) by
// making its own inventory invalid. An instance whose reporting nodes disagree about its
// properties is held as it was too (instance.disputed).
func (p *pass) findFrozenInstances() {
	p.frozenInstances = map[string][]string{}
	p.frozenWhy = map[string]string{}
	disputed := map[string]*instance{}
	for _, in := range p.disputed {
		disputed[in.cfg.Namespace+"/"+in.cfg.Name+"/"+in.name] = in
	}
	if len(p.frozenNodes) == 0 && len(disputed) == 0 {
		return
	}
	files := map[string][]string{}
	involved := map[string]bool{}
	paths := p.prevPaths
	if p.scope != nil {
		// The Configurations out of scope keep their frozen instances with their files.
		paths = func() []string { return p.prevPathsIn(p.scope) }
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
		if len(p.frozenNodes) == 0 {
			continue
		}
		if cur := p.instance(k); cur != nil && cur.shared && ref.kind != "pod" {
			continue // reported by valid nodes: only a Pod on the frozen node freezes it
		}
		for _, n := range h.nodes() {
			if p.frozenNodes[n] {
				involved[k] = true
			}
		}
	}
	for k := range involved {
		p.frozenInstances[k] = files[k]
	}
	for k, in := range disputed {
		if p.scope != nil && !p.scope[in.cfg.Namespace+"/"+in.cfg.Name] {
			continue
		}
		p.frozenInstances[k] = append([]string{}, files[k]...)
		p.frozenWhy[k] = in.disputed
	}
}

func (p *pass) put(f string, data []byte, m objMeta) {
	p.out[f] = data
	p.meta[f] = m
}

func propsJSON(m map[string]string) []byte {
	b, _ := json.Marshal(m)
	return b
}

// The hashes of what each kind of object reads from its Configuration. They go into every
// object's gitbroker.dev/inputs-hash and key the memo of built objects, so each covers exactly
// what its builder reads: a change elsewhere in the Configuration (discoveryDetails, capacity,
// another kind's spec) leaves the object, and its file, as they were.

// podHash covers buildPod: the PodSpec and the broker properties (the environment).
func podHash(c *api.ParsedConfiguration) []byte {
	return specHash("pod", c, c.Spec.BrokerSpec.BrokerPodSpec, c.Spec.BrokerProperties)
}

// jobHash covers buildJob: the JobSpec, the broker properties and the run policy and runID
// (the Job's name).
func jobHash(c *api.ParsedConfiguration) []byte {
	return specHash("job", c, c.Spec.BrokerSpec.BrokerJobSpec, c.Spec.BrokerProperties, c.Policy.RunPolicy, c.Policy.RunID)
}

// serviceHash covers buildService for one of the Configuration's service specs.
func serviceHash(c *api.ParsedConfiguration, kind string, spec *corev1.ServiceSpec) []byte {
	return specHash(kind, c, spec)
}

func specHash(kind string, c *api.ParsedConfiguration, parts ...any) []byte {
	b, _ := json.Marshal(append([]any{kind, c.Namespace, c.Name}, parts...))
	return []byte(hashHex(32, b))
}

// renderBrokers writes the Pods and Services of every valid Configuration.
func (p *pass) renderBrokers() {
	for _, k := range sortedKeys(p.configs) {
		cfg := p.configs[k]
		broker := "none"
		switch {
		case cfg.IsPodBroker():
			broker = "Pod"
		case cfg.IsJobBroker():
			broker = "Job"
		}
		p.plan.config(cfg.Namespace, cfg.Name, broker)
		if cfg.IsJobBroker() && (cfg.Spec.InstanceServiceSpec != nil || cfg.Spec.ConfigurationServiceSpec != nil) {
			p.warn("Configuration %s: Services are rendered for Pod brokers only; the service specs of this Job broker are ignored", k)
		}
		if cfg.Policy.After != "" {
			if a, ok := p.configs[cfg.Namespace+"/"+cfg.Policy.After]; !ok && !p.frozenConfigs[cfg.Namespace+"/"+cfg.Policy.After] {
				p.warn("Configuration %s: after: Configuration %s/%s does not exist; its broker Pods are held", k, cfg.Namespace, cfg.Policy.After)
			} else if ok && !a.IsJobBroker() {
				p.warn("Configuration %s: after: Configuration %s/%s has no Job broker; its broker Pods are held", k, cfg.Namespace, cfg.Policy.After)
			}
		}
		if p.scope != nil && !p.scope[k] {
			// Carried over with its plan entries (mergeScope).
			continue
		}
		var phash, ishash, cshash []byte
		if cfg.IsPodBroker() {
			phash = podHash(cfg)
			ishash = serviceHash(cfg, "instance-service", cfg.Spec.InstanceServiceSpec)
			cshash = serviceHash(cfg, "configuration-service", cfg.Spec.ConfigurationServiceSpec)
		}
		withBrokers := 0
		// What each instance's objects are keyed and named by, worked out on every CPU: the
		// loop after it only looks them up.
		list := p.instances[k]
		if cfg.IsPodBroker() {
			var todo []*instance
			for _, in := range list {
				if in.pod == nil {
					todo = append(todo, in)
				}
			}
			parallel(len(todo), func(i int) {
				pi := podInputs(cfg, todo[i], phash, ishash, p.prev)
				todo[i].pod = &pi
			})
		}
		for _, in := range list {
			ik := k + "/" + in.name
			if _, frozen := p.frozenInstances[ik]; frozen {
				continue
			}
			if !cfg.IsPodBroker() {
				continue
			}
			p.plan.instance(cfg.Namespace, cfg.Name, in.name, in.deviceID, in.nodes)
			pre := in.pod
			nodes := pre.nodes
			if reason := p.afterHeld(cfg, in); reason != "" {
				for _, n := range nodes {
					p.plan.add(cfg.Namespace, cfg.Name, in.name, Change{Action: Held, Kind: "Pod", Name: podName(in.name, n, in.shared), Reason: reason})
				}
				continue
			}
			env := pre.env
			m := objMeta{ns: cfg.Namespace, cfg: cfg.Name, inst: in.name, deviceID: in.deviceID, nodes: in.nodes}
			for j, n := range nodes {
				ih := pre.podHashes[j]
				p.build("pod/"+ih, pre.podPaths[j], m, func() []byte { return buildPod(in, n, env, ih) })
			}
			withBrokers++
			if spec := cfg.Spec.InstanceServiceSpec; spec != nil {
				ih := pre.serviceHash
				name := instanceServiceName(in.name)
				p.build("svc/"+ih, in.folder+"/service-"+name+".yaml", m, func() []byte {
					labels := in.labels()
					labels[api.LabelManagedBy] = api.ManagedByGitbroker
					sel := map[string]string{api.LabelInstance: in.name, api.LabelController: api.ControllerAkri}
					return buildService(cfg, spec, name, labels, sel, ih)
				})
			}
		}
		// Instances a node with an invalid inventory took part in stay as they were (their Jobs
		// follow the Job lifecycle like every other Job).
		for _, ik := range sortedKeys(p.frozenInstances) {
			if !strings.HasPrefix(ik, k+"/") {
				continue
			}
			inst := strings.TrimPrefix(ik, k+"/")
			folder := p.instanceFolder(cfg, inst)
			kept := false
			for _, f := range p.frozenInstances[ik] {
				if ref, _ := parseObjectPath(f); ref.kind == "job" {
					continue
				}
				p.put(folder+"/"+path.Base(f), p.prev[f], objMeta{ns: cfg.Namespace, cfg: cfg.Name, inst: inst})
				kept = true
			}
			if why := p.frozenWhy[ik]; why != "" {
				if kept {
					withBrokers++
				}
				cp := p.plan.config(cfg.Namespace, cfg.Name, "")
				cp.Notes = append(cp.Notes, why)
				p.frozenNotes[k] = append(p.frozenNotes[k], why)
			} else if kept {
				withBrokers++
				note := fmt.Sprintf("instance %s kept as it was: a node that sees it has an invalid inventory", inst)
				cp := p.plan.config(cfg.Namespace, cfg.Name, "")
				cp.Notes = append(cp.Notes, note)
				p.frozenNotes[k] = append(p.frozenNotes[k], note)
			}
		}
		if spec := cfg.Spec.ConfigurationServiceSpec; spec != nil && cfg.IsPodBroker() && withBrokers > 0 {
			ih := hashHex(16, cshash, []byte("configuration-service"))
			name := configurationServiceName(cfg.Name)
			p.build("svc/"+ih, p.commonFolder(cfg)+"/service-"+name+".yaml", objMeta{ns: cfg.Namespace, cfg: cfg.Name}, func() []byte {
				labels := map[string]string{api.LabelConfiguration: cfg.Name, api.LabelController: api.ControllerAkri, api.LabelManagedBy: api.ManagedByGitbroker}
				sel := map[string]string{api.LabelConfiguration: cfg.Name, api.LabelController: api.ControllerAkri}
				return buildService(cfg, spec, name, labels, sel, ih)
			})
		}
	}
	p.flushBuilds()
}

// podBrokerInputs is what a Pod broker instance's objects are keyed and named by.
type podBrokerInputs struct {
	nodes               []string // the nodes that get a Pod, at most the capacity
	env                 []corev1.EnvVar
	podHashes, podPaths []string
	serviceHash         string
}

// Placement is sticky: of the nodes that report a shared instance, those that held its broker in
// the previous render keep it, and free places go to the others in name order, so a node that
// newly reports a device (or claims another node's) never displaces a broker.
func podInputs(cfg *api.ParsedConfiguration, in *instance, phash, ishash []byte, prev Tree) podBrokerInputs {
	nodes := in.nodes
	if len(nodes) > cfg.Policy.Capacity {
		var holders, others []string
		for _, n := range nodes {
			if _, held := prev[in.folder+"/pod-"+podName(in.name, n, in.shared)+".yaml"]; held {
				holders = append(holders, n)
			} else {
				others = append(others, n)
			}
		}
		nodes = append(holders, others...)[:cfg.Policy.Capacity]
		sort.Strings(nodes)
	}
	pi := podBrokerInputs{nodes: nodes, env: in.env()}
	props := propsJSON(in.properties)
	for _, n := range nodes {
		pi.podHashes = append(pi.podHashes, hashHex(16, phash, []byte(in.name), []byte(in.digest), []byte(n), []byte(in.deviceID), props))
		pi.podPaths = append(pi.podPaths, in.folder+"/pod-"+podName(in.name, n, in.shared)+".yaml")
	}
	if cfg.Spec.InstanceServiceSpec != nil {
		pi.serviceHash = hashHex(16, ishash, []byte(in.name), []byte("instance-service"))
	}
	return pi
}

// pendingBuild is an object whose inputs are new to the Renderer's memo.
type pendingBuild struct {
	key, path string
	m         objMeta
	build     func() []byte
	data      []byte
}

// build writes an object, from the memo when its inputs were seen before, else later in parallel.
func (p *pass) build(key, path string, m objMeta, f func() []byte) {
	if data, ok := p.r.objs.lookup(key); ok {
		p.put(path, data, m)
		return
	}
	p.pending = append(p.pending, &pendingBuild{key: key, path: path, m: m, build: f})
}

func (p *pass) flushBuilds() {
	parallel(len(p.pending), func(i int) { p.pending[i].data = p.pending[i].build() })
	for _, b := range p.pending {
		p.r.objs.store(b.key, b.data)
		p.put(b.path, b.data, b.m)
	}
	p.pending = nil
}

// afterHeld says why an instance's broker Pods must wait for a Job, or "" when they may start.
func (p *pass) afterHeld(cfg *api.ParsedConfiguration, in *instance) string {
	after := cfg.Policy.After
	if after == "" {
		return ""
	}
	candidates := map[string]bool{}
	for _, size := range []int{3, 6, 16} {
		candidates[instanceName(after, akriDigest(in.deviceID, "", true, size))] = true
		for _, n := range in.nodes {
			candidates[instanceName(after, akriDigest(in.deviceID, n, false, size))] = true
		}
	}
	var failed *api.JobRecord
	for _, rec := range p.byDevice[cfg.Namespace+"/"+after+"/"+in.deviceID] {
		if !candidates[rec.Spec.Instance] {
			continue
		}
		if rec.Spec.Outcome == api.OutcomeSucceeded {
			return ""
		}
		failed = rec
	}
	if failed != nil {
		why := "failed"
		if failed.Spec.Reason != "" {
			why += " (" + failed.Spec.Reason + ")"
		}
		if failed.Spec.Message != "" {
			why += ": " + failed.Spec.Message
		}
		return fmt.Sprintf("after: Job %s of Configuration %s %s; the Pod starts only after a Job of %s on this device succeeds (change its runID to run it again)", failed.Name, after, why, after)
	}
	return fmt.Sprintf("after: waiting for a Job of Configuration %s on device %q to be recorded Succeeded", after, in.deviceID)
}
