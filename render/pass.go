package render

import (
	"fmt"
	"slices"

	"github.com/gitbroker/gitbroker/api"
)

// outOfScopeError says a scoped pass reached further than the Configurations it renders (a Job
// of another, a file of another, a folder that appears or goes): the render runs the pass
// again, whole. Only a scoped pass returns it.
type outOfScopeError struct{ why string }

func (e *outOfScopeError) Error() string {
	return "the scoped pass reached further than its Configurations: " + e.why
}

// scopedPass runs a pass scoped to the Configurations a change reaches, when the Renderer kept
// what it needs; an *outOfScopeError says it must run whole instead.
func (r *Renderer) scopedPass(req Request, in split) (*Result, *pass, error) {
	return r.pass(req, in, nil, true)
}

// wholePass runs a pass over every Configuration, the nodes in held held as they were.
func (r *Renderer) wholePass(req Request, in split, held map[string]string) (*Result, *pass) {
	res, p, err := r.pass(req, in, held, false)
	if err != nil {
		panic("render: a whole pass met its scope: " + err.Error()) // only a scoped pass has one
	}
	return res, p
}

func (r *Renderer) pass(req Request, in split, held map[string]string, scoped bool) (*Result, *pass, error) {
	prev := in.prev
	p := &pass{r: r, req: req, prev: prev, plan: newPlanBuilder(), held: held,
		scoping: scoping{onLast: in.onLast},
		index:   objectIndexes{filesSorted: in.inputs},
		output:  &output{layoutWarns: map[string][]string{}, configNotes: map[string][]string{}, rolling: map[string]bool{}, sliceReasons: map[string]sliceNodes{}}}
	p.scoping.scoped = scoped && p.scoping.onLast && r.scope != nil
	size := len(prev)
	if p.scoping.scoped {
		size = 0
	}
	// The output of a whole pass is about as large as the previous one: maps made to size are
	// not grown and rehashed a hundred thousand entries at a time.
	p.output.files, p.output.meta = make(Tree, size), make(map[string]objMeta, size)
	res, err := p.run()
	return res, p, err
}

// pass is the state of one render. Its stages run in order (run), and each hands on what it
// made; docs/ARCHITECTURE.md ("The render's stages") has the table.
//
//   - load (load.go, records.go, lost.go, rollout.go, status.go) returns loaded: the settings
//     and the valid Configurations, inventories and records, and what it froze;
//   - place (instances.go, sticky.go) returns placement: the devices grouped into instances;
//   - scope (scope.go), in a kept Renderer, returns the Configurations a change reaches, and
//     findFrozenInstances, once the scope is known, the instances kept as they were;
//   - brokers (brokers.go), jobs (jobs.go) and history, the frozen Configurations and layout
//     (layout.go, flux.go) add to output, one accumulator passed on from stage to stage;
//   - merge (scope.go), in a scoped pass, returns the whole output made of the scoped one and
//     the last; metadata (metadata.go) adds the render's own record to it;
//   - changes (changes.go) plans the diff and safety (safety.go) judges it.
//
// Every stage appends its problems to errs and its plan entries to plan. The stages' data are
// fields spelled out, so a method says whose data it reads. index (index.go) holds the
// indexes of prev and of the output, made when first asked for.
type pass struct {
	r    *Renderer
	req  Request
	prev Tree
	// held is the input of a second pass over the deletion budget: node -> why its part is held.
	held map[string]string
	plan *planBuilder
	errs api.ErrorList

	loaded    *loaded
	placement *placement
	frozen    frozenSet
	output    *output
	index     objectIndexes
	scoping   scoping
}

// output is what the brokers, jobs, history, layout and metadata stages write.
type output struct {
	files   Tree
	meta    map[string]objMeta
	pending []*pendingBuild
	retired map[objectKey]bool // Jobs retired in this render
	// diff is Diff(prev, out), worked out once out is final (diffed).
	diff   []string
	diffed bool
	// digest is InputsDigest(req.Files).
	digest string
	// layoutWarns are the layout's warnings, by the Configuration whose folder they are about.
	layoutWarns map[string][]string
	// rolling are the Configurations in the middle of a staged rollout, by namespace/name.
	rolling map[string]bool
	// configNotes are the plan's notes about a Configuration (instances kept for nodes with an
	// invalid inventory, a staged rollout), by Configuration: a scoped pass carries the others'
	// over.
	configNotes map[string][]string
	// sliceReasons say, for the ResourceSlices built in this pass, which nodes their devices are
	// on (sliceReason), by path: the plan need not read them back.
	sliceReasons map[string]sliceNodes
}

// objectIndexes are the sorted paths and the indexes of objects of prev and out (index.go).
type objectIndexes struct {
	// The sorted paths of prev and of the request's inputs, each sorted once per pass: a
	// fleet's tree holds over a hundred thousand paths.
	prevSorted, filesSorted []string
	prevJobs                []string
	// The objects of prev and of the finished out, each indexed once per pass when asked for,
	// and whether two files held one object.
	prevObjects, outObjects map[objectKey]string
	prevDups, outDups       bool
	// outFromDiff says outObjects is prevObjects brought up to date with the diff, in place:
	// undo holds what it held for the objects it changed, and prevCount its size.
	outFromDiff bool
	undo        map[objectKey]prevEntry
	prevCount   int
}

// scoping is what a pass scoped to the Configurations a change reaches works with (scope.go).
type scoping struct {
	// onLast says prev is exactly the Renderer's last output; scoped that this pass may be
	// scoped, and scope, once decided, the Configurations it renders (nil: all).
	onLast, scoped bool
	scope          map[string]bool
	// fresh are the scoped output's files by Configuration.
	fresh map[string]*configSlice
	// merged are the paths a scoped pass wrote over prev or deleted from it (mergeScope).
	merged []string
}

// objMeta says which configuration and instance an output file belongs to, for the plan.
type objMeta struct {
	ns, cfg, inst, deviceID string
	nodes                   []string
}

func (p *pass) run() (*Result, error) {
	p.output.digest = digestOf(p.req.Files, p.inputPaths())
	res := &Result{Previous: p.prev, InputsDigest: p.output.digest}
	var settings api.ResolvedSettings
	var errs api.ErrorList
	switch {
	case p.r.parent != nil && p.r.parent.settings != nil:
		settings = *p.r.parent.settings // one cluster's pass of several (clusters.go)
	case p.r.parsed != nil:
		settings, errs = p.r.parsed.settings, slices.Clone(p.r.parsed.errs) // Render parsed them
	default:
		settings, errs = api.ParseSettings(api.SettingsPath, p.req.Files[api.SettingsPath])
	}
	if why, ok := p.req.Unreadable[api.SettingsPath]; ok {
		errs = append(errs, &api.FieldError{File: api.SettingsPath, Message: why})
	}
	errs = append(errs, p.req.Invalid...)
	if len(errs) > len(p.req.Invalid) {
		// Settings shape everything; without them nothing is rendered and nothing is lost.
		res.Files, res.Errors = p.prev, errs
		res.Untrusted = append([]string(nil), p.req.Untrusted...)
		res.Plan = &Plan{Configurations: []*ConfigurationPlan{}, Errors: fieldProblems(errs), Trust: p.req.Trust, Untrusted: untrustedProblems(p.req, nil)}
		return res, nil
	}
	p.errs = append(p.errs, p.req.Invalid...)

	p.loaded = p.load(settings)
	p.placement = p.place()
	if p.scoping.scoped {
		p.scoping.scope = p.scopeFor()
	}
	p.frozen = p.findFrozenInstances()
	p.planConfigurations()
	p.renderBrokers()
	if err := p.renderJobs(); err != nil {
		return nil, err
	}
	p.renderHistory()
	p.copyFrozenConfigurations()
	p.layout()
	if p.scoping.scope != nil {
		m, err := p.mergeScope()
		if err != nil {
			return nil, err
		}
		p.output.files, p.output.diff, p.output.diffed = m.files, m.diff, true
		p.scoping.fresh, p.scoping.merged = m.fresh, m.merged
		p.carryPlans(p.r.scope)
	}
	p.writeMetadata()

	p.errs.Sort()
	res.Errors = p.errs
	for _, n := range sortedKeys(p.held) {
		res.Held = append(res.Held, p.held[n])
	}
	p.planFromDiff()
	plan := p.plan.finish()
	plan.Errors = fieldProblems(p.errs)
	res.Untrusted = append([]string(nil), p.req.Untrusted...)
	for _, r := range p.loaded.ignoredRecords {
		res.Untrusted = append(res.Untrusted, r.Text)
	}
	plan.Trust, plan.Untrusted = p.req.Trust, untrustedProblems(p.req, p.loaded.ignoredRecords)
	res.Plan = plan
	res.Files, res.Diff = p.output.files, p.output.diff
	if reason := p.checkSafety(); reason != "" && !p.req.AllowDeletions {
		res.Refused = &RefusedError{Reason: reason}
		plan.Refused = reason
		res.Files, res.Diff = p.prev, nil
	}
	return res, nil
}

func (p *pass) warn(format string, args ...any) {
	p.plan.plan.Warnings = append(p.plan.plan.Warnings, fmt.Sprintf(format, args...))
}

func (p *pass) put(f string, data []byte, m objMeta) {
	p.output.files[f] = data
	p.output.meta[f] = m
}
