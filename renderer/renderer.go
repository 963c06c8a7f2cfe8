package renderer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
	"unsafe"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/templates"
	"github.com/gitbroker/gitbroker/verify"
)

// Trailers of the renderer's commits.
const (
	TrailerSourceCommit = api.TrailerSourceCommit
	TrailerInputsDigest = api.TrailerInputsDigest
)

// commitPlanLines bounds the plan quoted in a commit message; the rest is
// in the plan itself.
const commitPlanLines = 200

// Renderer renders the inputs of every writer's ref and commits rendered/ and history/, with
// the verified inputs they came from, to the rendered branch. Its Engine is kept, so a render
// recomputed after a conflict (or the next render of a daemon) parses and builds only what
// changed. The exported fields configure it; set them before the first render.
type Renderer struct {
	// Store is the rendered branch the render commits to.
	Store gitsync.Store
	// Sources are where the inputs are read and verified from.
	Sources verify.Sources
	// Review, when set, proposes each render on a new branch named ReviewPrefix + the source
	// commit, on top of the rendered branch (--review-branch); Store is then unused.
	Review       *gitsync.Repository
	ReviewPrefix string
	// Published, when set, is verify.ConfigurationsBranch in the repository of the node refs:
	// after each render that lands (or finds nothing to change), the Configurations and
	// settings it verified are published there, signed, for the agents.
	Published gitsync.Store
	// Branch is the people's branch, for messages.
	Branch         string
	Engine         *render.Renderer
	AllowDeletions bool
	Author         gitsync.Signature
	Now            func() time.Time

	// last is what the rendered branch holds at the commit this renderer pushed or found last,
	// kept from building that commit: the next render reads the previous rendered/ and history/
	// from here instead of the object store, and commits only the paths that differ from it.
	last struct {
		commit string
		// rendered is the render's Result.Files, the very map: handed back to the Renderer as
		// the previous output, it is known without a pass over it.
		rendered render.Tree
		// inputs are the inputs mirrored beside it: everything not rendered/ or history/.
		inputs render.Tree
	}
	// pushed is the rendered branch's commit this renderer pushed, or found holding exactly
	// its render, last (verify.Sources.LastPushed); a daemon that starts takes it from its
	// leader election Lease.
	pushed string
	// lastCompanions are the companions of the last render's files (the map's identity).
	lastCompanions struct {
		of    unsafe.Pointer
		value map[string]string
	}
}

// Outcome is what one render against the remote did.
type Outcome struct {
	// Source is the commit the final attempt rendered; SourceTime is the newest committer
	// time among it and the writers' tips it rendered.
	Source     string
	SourceTime time.Time
	// Commit is the renderer's commit; "" when there was nothing to do.
	Commit string
	// Branch is the review branch, in review mode.
	Branch string
	// Inputs are what the final attempt verified.
	Inputs *verify.Inputs
	// tree is what the final attempt rendered.
	tree   render.Tree
	Result *render.Result
	Push   gitsync.Result
	// Published is the commit that published the verified Configurations for the agents, ""
	// when what was published already holds them; PublishErr is why publishing failed (the
	// render itself stands).
	Published  string
	PublishErr error
}

// errRefused carries a safety refusal out of the writer callback.
type errRefused struct{ err error }

func (e *errRefused) Error() string { return e.err.Error() }
func (e *errRefused) Unwrap() error { return e.err }

// Once renders the writers' refs and commits the result. A render with nothing to change,
// which includes a render of the renderer's own last commit, returns gitsync.ErrNoChanges and
// commits nothing.
func (r *Renderer) Once(ctx context.Context) (Outcome, error) {
	var out Outcome
	sources := r.sources()
	// What the final attempt commits: the rendered branch's files once its change lands.
	var base string
	var rendered, inputs render.Tree
	write := func(ctx context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		base, rendered, inputs = "", nil, nil
		in, err := verify.Collect(ctx, sources, head)
		if err != nil {
			return nil, err
		}
		result := r.Engine.Render(render.Request{
			Files:            in.Inputs,
			Previous:         in.Rendered,
			SourceCommit:     in.Source,
			AllowDeletions:   r.AllowDeletions,
			Writers:          in.Writers,
			RenderedJobsOnly: in.Verified,
			Trust:            in.Trust,
			Untrusted:        in.Untrusted,
			Rejections:       in.Problems(),
		})
		out.Source, out.SourceTime, out.Result, out.tree, out.Inputs = in.Source, in.Newest, result, in.Inputs, in
		if result.Refused != nil {
			return nil, &errRefused{result.Refused}
		}
		change, mirrored, err := r.change(head, in, result)
		if err != nil {
			return nil, err
		}
		base, rendered, inputs = head.Commit(), result.Files, mirrored
		return change, nil
	}
	var res gitsync.Result
	var err error
	if r.Review != nil {
		res, err = r.Review.UpdateNewBranch(ctx, func(head gitsync.Snapshot) string {
			out.Branch = r.reviewBranch(out.Source)
			return out.Branch
		}, write)
	} else {
		res, err = r.Store.Update(ctx, write)
		switch {
		case err == nil && res.Commit != "":
			r.last.commit, r.last.rendered, r.last.inputs = res.Commit, rendered, inputs
			r.pushed = res.Commit
		case errors.Is(err, gitsync.ErrNoChanges) && rendered != nil:
			// Nothing to commit: the head holds exactly these files.
			r.last.commit, r.last.rendered, r.last.inputs = base, rendered, inputs
			r.pushed = base
		}
		if r.Published != nil && rendered != nil && (err == nil || errors.Is(err, gitsync.ErrNoChanges)) {
			out.Published, out.PublishErr = r.publish(ctx, out.Inputs, rendered)
		}
	}
	out.Push, out.Commit = res, res.Commit
	return out, err
}

// change is the commit of a render of in on head: its rendered files and the inputs they came
// from (mirrored, returned too), built from what differs when head is this renderer's last
// commit, with the folder sources' and accepted shards' branches as companions.
func (r *Renderer) change(head gitsync.Snapshot, in *verify.Inputs, result *render.Result) (*gitsync.Change, render.Tree, error) {
	digest := result.InputsDigest
	msg, err := r.text(templates.CommitMessageName, in.Inputs, digest, in.Source, result)
	if err != nil {
		return nil, nil, err
	}
	author := r.Author
	author.When = r.Now()
	// The rendered branch is the renderer's alone: it carries the inputs it rendered (so it
	// can be checked on its own) and nothing else; whatever else was pushed there is dropped.
	change := &gitsync.Change{
		Owned:   ownedPaths(head),
		Message: msg,
		Trailers: []gitsync.Trailer{
			{Key: TrailerSourceCommit, Value: in.Source},
			{Key: TrailerInputsDigest, Value: digest},
		},
		Author: author,
		// Over a head this renderer did not sign it commits even when nothing changed:
		// Flux verifies the head's signature, and no head it did not make may stay.
		Overwrite: in.Overwrite,
	}
	mirrored := render.Tree{}
	// The inputs alone, not the hundred thousand rendered files beside them.
	for p, b := range in.Inputs {
		if render.IsInput(p) || strings.HasPrefix(p, ".gitbroker/") {
			mirrored[p] = b
		}
	}
	base := head.Commit()
	if r.Review == nil && base != "" && base == r.last.commit && in.Previous == base {
		// The head is this renderer's last commit, whose files it holds and rendered on top
		// of: the commit is built from what differs, not from a pass over every file.
		change.Edits, change.EditsBase = edits(r.last.inputs, mirrored, result), base
	} else {
		// The rendered files (cloned, not changed: the Renderer knows its output by the
		// map; copying a fleet's map whole is several times faster than inserting its
		// files), then the inputs they came from.
		change.Files = maps.Clone(result.Files)
		if change.Files == nil {
			change.Files = render.Tree{}
		}
		maps.Copy(change.Files, mirrored)
	}
	// Each folder source's branch moves with the commit when its folder changed; once the
	// setting is gone, the branches are deleted. So does each accepted-tips shard's branch,
	// which a restarted writer reads (api.AcceptedBranch).
	folders, before := r.companions(result)
	change.Companions = render.AcceptedCompanions(result.Files)
	maps.Copy(change.Companions, folders)
	change.CompanionPrefixes, change.KeepCompanion = []string{api.AcceptedBranchPrefix}, in.Own
	if len(folders) > 0 || len(before) > 0 {
		change.CompanionPrefixes = append(change.CompanionPrefixes, api.FolderBranchPrefix)
	}
	return change, mirrored, nil
}

// sources are what a render reads, with what this renderer knows of its own past.
func (r *Renderer) sources() verify.Sources {
	sources := r.Sources
	sources.Known = r.known
	if r.Review == nil {
		sources.LastPushed = r.pushed
	}
	if r.Published != nil && sources.PublishedBefore == nil {
		// The publication is on the renderer's own history (WithOwnHistory): a head it finds
		// there is a commit this renderer's key signed.
		sources.PublishedBefore = func(ctx context.Context) (string, error) {
			snap, err := r.Published.Snapshot(ctx)
			if errors.Is(err, gitsync.ErrNoBranch) {
				return "", nil
			}
			if err != nil {
				return "", err
			}
			return snap.Commit(), nil
		}
	}
	return sources
}

// publish puts the Configurations and settings a render verified and rendered on
// verify.ConfigurationsBranch for the agents, on the renderer's own signed history there: a
// commit someone else pushed on that branch is dropped, and one whose tip holds other files is
// put back, even when the Configurations did not change.
func (r *Renderer) publish(ctx context.Context, in *verify.Inputs, rendered render.Tree) (string, error) {
	author := r.Author
	author.When = r.Now()
	// The instance digests that are not Akri's 3-byte ones, as the render metadata lists them:
	// the agents name their device plugin's resources as the renderer named the instances.
	var digests []byte
	if d := render.ParseMetadata(rendered[render.MetadataPath]).InstanceDigests; len(d) > 0 {
		var err error
		if digests, err = yaml.Marshal(d); err != nil {
			return "", fmt.Errorf("publishing the instance digests: %w", err)
		}
	}
	res, err := r.Published.Update(ctx, func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return verify.PublishedChange(in, digests, author), nil
	})
	if errors.Is(err, gitsync.ErrNoChanges) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("publishing the verified Configurations on %s: %w", verify.ConfigurationsBranch, err)
	}
	return res.Commit, nil
}

// companions are render.Companions of a render's files and of its previous files. A render on
// top of the last one (its previous files are the very map the last one returned) whose diff
// leaves the folder sources alone (rendered/flux/sources/, and each cluster's) has the last
// one's: no pass over a fleet's files.
func (r *Renderer) companions(result *render.Result) (now, before map[string]string) {
	same := r.lastCompanions.of != nil && r.lastCompanions.of == reflect.ValueOf(result.Previous).UnsafePointer()
	if same && !slices.ContainsFunc(result.Diff, render.IsFolderSourcePath) {
		now, before = r.lastCompanions.value, r.lastCompanions.value
	} else {
		now, before = render.Companions(result.Files), render.Companions(result.Previous)
	}
	r.lastCompanions.of, r.lastCompanions.value = reflect.ValueOf(result.Files).UnsafePointer(), now
	return now, before
}

// known returns the files of the rendered branch's commit this renderer holds (verify.Sources.Known).
func (r *Renderer) known(commit string) (rendered, inputs map[string][]byte, ok bool) {
	if commit == "" || commit != r.last.commit {
		return nil, nil, false
	}
	return r.last.rendered, r.last.inputs, true
}

// edits lists what turns the commit a render was made on top of into the one it commits: the
// render's own changed files (Result.Diff) and the mirrored inputs that differ from last, the
// inputs of that commit, each with its new content, nil for a path that is gone.
func edits(last, inputs render.Tree, result *render.Result) map[string][]byte {
	out := map[string][]byte{}
	for _, p := range result.Diff {
		content, ok := result.Files[p]
		if ok && content == nil {
			content = []byte{} // an empty file, not a deletion
		}
		out[p] = content // nil when gone
	}
	for p, b := range inputs {
		if old, ok := last[p]; !ok || !bytes.Equal(old, b) {
			if b == nil {
				b = []byte{}
			}
			out[p] = b
		}
	}
	for p := range last {
		if _, ok := inputs[p]; !ok {
			out[p] = nil
		}
	}
	return out
}

// ownedPaths is everything on the rendered branch: the renderer's folders and inputs, and every
// other top-level entry the head has, so that what was planted there is removed.
func ownedPaths(head gitsync.Snapshot) []string {
	owned := []string{render.RenderedDir, render.HistoryDir, api.SettingsPath, api.ConfigurationsDir + "/", api.InventoryDir + "/", "status/", ".gitbroker/"}
	for _, top := range gitsync.TopLevel(head) {
		if !slices.Contains(owned, top) {
			owned = append(owned, top)
		}
	}
	return owned
}

func (r *Renderer) reviewBranch(source string) string {
	short := source
	if len(short) > 12 {
		short = short[:12]
	}
	return r.ReviewPrefix + short
}

// PullRequest renders the pull-request description of a render.
func (r *Renderer) PullRequest(out Outcome) (string, error) {
	return r.text(templates.PullRequestName, out.tree, out.Result.InputsDigest, out.Source, out.Result)
}

// text renders the commit message or the pull-request description
// (gitbroker.yaml may replace either; an invalid gitbroker.yaml falls back
// to the defaults).
func (r *Renderer) text(name string, tree render.Tree, digest, source string, result *render.Result) (string, error) {
	settings, errs := api.ParseSettings(api.SettingsPath, tree[api.SettingsPath])
	override := ""
	if len(errs) == 0 {
		override = map[string]string{
			templates.CommitMessageName: settings.Templates.CommitMessage,
			templates.PullRequestName:   settings.Templates.PullRequest,
		}[name]
	}
	var plan bytes.Buffer
	if name == templates.PullRequestName {
		result.Plan.WriteMarkdown(&plan)
	} else {
		result.Plan.WriteText(&plan)
	}
	text, err := templates.Execute(name, override, templates.Render{
		SourceCommit: source,
		Branch:       r.Branch,
		Summary:      result.Plan.Summary.String(),
		Plan:         truncateLines(plan.String(), commitPlanLines),
		FilesChanged: len(result.Diff),
		InputsDigest: digest,
	})
	if err != nil && override != "" {
		return "", fmt.Errorf("gitbroker.yaml spec.templates.%s: %w", name, err)
	}
	return text, err
}

func truncateLines(s string, n int) string {
	lines := strings.SplitAfter(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return strings.TrimRight(s, "\n")
	}
	return strings.Join(lines[:n], "") + fmt.Sprintf("... (%d more lines in `gitbroker plan`)", len(lines)-n)
}

// IsRefused reports whether a render was refused by a safety rule.
func IsRefused(err error) bool {
	var r *errRefused
	return errors.As(err, &r)
}

// Pushed is the rendered branch's commit this renderer pushed, or found holding exactly its
// render, last; "" before its first render.
func (r *Renderer) Pushed() string { return r.pushed }

// StartFrom tells a renderer that has not rendered yet the commit a previous renderer pushed
// last (a daemon that starts reads it from its leader election Lease): the branch must descend
// from it.
func (r *Renderer) StartFrom(commit string) {
	if r.pushed == "" {
		r.pushed = commit
	}
}
