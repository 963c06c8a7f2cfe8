package render

import (
	"errors"
	"sync"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/identity"
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
	// Invalid are invalid inputs found outside render (the trust files of a work tree, which
	// the verify package reads): reported with render's own, so plan and check refuse them.
	Invalid api.ErrorList
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
	// Rejections are Untrusted structured (writer, ref, commit, reason), in the same order, for
	// the plan's JSON; optional.
	Rejections []Problem
	// holdRollout, for one cluster of several in a later ring of spec.clusterRollout, are the
	// Pod broker Configurations whose changed brokers keep their previous render, by key, with
	// why: a ring before it has not recorded them Available with their new spec.
	holdRollout map[string]string
	// elsewhere, for one cluster of several, are the runs of its nodes' Jobs in another
	// cluster's folder, by namespace/Job, which a node took with it when it moved here
	// (ranElsewhere): finished ones never start again, unrecorded ones hold the instance.
	elsewhere map[string]elsewhereRun
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
	// Rejections are Untrusted structured (writer, ref, commit, reason), in the same order, for
	// the plan's JSON; optional.
	Rejections []Problem
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
	// pins are, for a repository of several clusters, the Jobs of each cluster's folder and
	// the nodes they are pinned to (ranElsewhere).
	pins memo[jobPin]
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
	// shares are the device shares of the last pass that was kept, by shard, and nextShares
	// those of the pass in flight (writeShares), kept with its output.
	shares, nextShares map[string]sharesFile
	// once says the Renderer renders once (Render): it keeps nothing for a next pass.
	once bool
	// scoped counts the passes that were scoped, and outOfScope the scoped passes that had to
	// run again whole, for tests.
	scoped, outOfScope int
	// cluster is the cluster this Renderer renders, one of a repository of several
	// (clusters.go); nil for a repository of one. parent is then the Renderer of the whole
	// repository, and clusters, on that one, its Renderers by cluster.
	cluster  *api.Cluster
	parent   *Renderer
	clusters map[string]*Renderer
	// settings are, while a repository of several clusters renders, its settings, parsed once
	// for every cluster's pass; parsed are, while a repository of one renders, its settings
	// and their errors, parsed once for its passes (Render decides the layout with them).
	settings *api.ResolvedSettings
	parsed   *parsedSettings
	// lastRun is, on a cluster's Renderer, its last render, kept while the cluster's inputs
	// and output stay as they were.
	lastRun *clusterRun
}

// configMemo is the memo of Configuration files: a cluster's Renderer uses the repository's,
// since every cluster parses the same files.
func (r *Renderer) configMemo() *memo[parsedConfigFile] {
	if r.parent != nil {
		return &r.parent.configs
	}
	return &r.configs
}

// lastOutput is the last render's output with the index of its objects.
type lastOutput struct {
	files   Tree
	objects map[objectKey]string
	dups    bool
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
	if r.cluster == nil {
		parsed := settingsOf(req)
		if parsed.clusters() {
			return r.renderClusters(req, parsed.settings)
		}
		r.clusters = nil
		r.parsed = &parsed
		defer func() { r.parsed = nil }()
	}
	in := r.split(req)
	req.Unreadable = in.unreadable(req)
	res, p, err := r.scopedPass(req, in)
	var outOfScope *outOfScopeError
	if errors.As(err, &outOfScope) {
		r.outOfScope++
		res, p = r.wholePass(req, in, nil)
	}
	if res.Refused != nil && p.scoping.scope != nil {
		// The budget is judged on the whole tree.
		p.dropIndex()
		res, p = r.wholePass(req, in, nil)
	}
	if res.Refused != nil {
		// Over the fleet-wide budget: hold the nodes that caused it and render the rest, as
		// if their inventories were invalid; the memos make the second pass cost only what
		// differs. What is still over the budget then is refused.
		if held := p.overBudgetNodes(); len(held) > 0 {
			p.dropIndex()
			res, p = r.wholePass(req, in, held)
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
	case res.Refused == nil && p.index.outObjects != nil:
		r.last = lastOutput{files: res.Files, objects: p.index.outObjects, dups: p.index.outDups}
	case res.Refused != nil && p.index.prevObjects != nil:
		r.last = lastOutput{files: res.Files, objects: p.index.prevObjects, dups: p.index.prevDups}
	}
	if p.scoping.scope != nil {
		r.scoped++
	}
	// The output this pass was made on top of is the next scoped pass's to reuse, when this
	// one was scoped too (a whole pass made every file anew: nothing would be left to reuse).
	r.spare, r.spareLag = nil, nil
	if p.scoping.merged != nil && res.Refused == nil && p.scoping.onLast && r.lastMade {
		// The metadata file is written after the merge.
		r.spare, r.spareLag = p.prev, append(p.scoping.merged, MetadataPath)
	}
	r.lastMade = p.req.Previous == nil || !identity.Map(res.Files, p.req.Previous)
	if res.Refused == nil && r.nextShares != nil {
		r.shares = r.nextShares
	}
	r.nextShares = nil
	switch {
	case p.loaded == nil:
		// Invalid settings: nothing was loaded, and the next pass runs whole.
		r.scope = nil
	case !r.once:
		p.keepScope(res)
	}
	if p.loaded != nil && p.loaded.refused != nil {
		r.refused = p.loaded.refused
	}
	// The memos keep what this pass used and drop the rest. A scoped pass used only its
	// Configurations' objects: the memos of objects and files keep everything until they hold
	// half as much again as the last whole pass left them, and the next pass is then whole.
	rotate := []interface{ rotate() }{r.configMemo(), &r.invs, &r.recs}
	if p.scoping.scope == nil {
		rotate = append(rotate, &r.heads, &r.hist, &r.objs, &r.jobs)
	} else if r.objs.grown() || r.heads.grown() || r.jobs.grown() {
		r.scope = nil
	}
	for _, m := range rotate {
		m.rotate()
	}
}
