package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/verify"
)

const flagRef = "ref"

// readOptions are the flags of plan and check against a remote: the same inputs the renderer
// reads, with nothing written.
type readOptions struct {
	remote remoteOptions
	Ref    string
}

func (o *readOptions) BindFlags(cmd *cobra.Command, withRef bool) {
	fs := cmd.Flags()
	o.remote.Git.BindReadFlags(fs, "The people's branch to read (Configurations, gitbroker.yaml, .gitbroker/); nothing is written.")
	o.remote.Inventory.BindRemoteFlags(fs, flagInventoryPrefix, "Repository holding the node refs, when the renderer reads them from there (render --inventory-git); its credentials take the inventory- prefix, and are --git's when none is given.")
	fs.StringVar(&o.remote.RenderedBranch, flagRenderedBranch, verify.RenderedBranch, "The renderer's own branch.")
	if withRef {
		fs.StringVar(&o.Ref, flagRef, "", "A proposed change to plan against --branch: a branch, or a ref such as a pull request's head (refs/pull/7/head on GitHub, refs/merge-requests/7/head on GitLab).")
	}
}

// remotePlan renders what the renderer would do on the target branch now, from every writer's
// ref; with a ref, it then renders the proposed change's people's files (gitbroker.yaml,
// configurations/, .gitbroker/) on top of that, so the plan shows exactly what merging it
// would change. Nothing is written.
func (o *readOptions) remotePlan(ctx context.Context) (*render.Result, *verify.Inputs, error) {
	in, source, err := o.verifiedInputs(ctx)
	if err != nil {
		return nil, nil, err
	}
	var warnings []string
	r := render.New()
	req := render.Request{Files: in.Inputs, Previous: in.Rendered, SourceCommit: in.Source, Writers: in.Writers,
		RenderedJobsOnly: in.Verified, Trust: in.Trust, Untrusted: in.Untrusted, Rejections: in.Problems()}
	target := r.Render(req)
	if in.Verified && in.Previous == "" {
		// A read previews a start from nothing; a render refuses one without --first-render.
		warnings = append(warnings, fmt.Sprintf("%s does not exist: this is what a render from nothing would do, which render refuses without --%s (the repository's first render, once in its life; if it was rendered before, its branches were deleted: push its last render back)",
			o.remote.RenderedBranch, verify.FlagFirstRender))
	}
	target.Plan.Warnings = append(target.Plan.Warnings, warnings...)
	if o.Ref == "" {
		return target, in, nil
	}
	proposed, err := source.Ref(ctx, o.Ref)
	if err != nil {
		return nil, nil, &exitError{Code: exitRefused, Err: err}
	}
	files, err := proposed.Files("")
	if err != nil {
		return nil, nil, &exitError{Code: exitRefused, Err: err}
	}
	proposedWarnings, err := o.proposedCommits(ctx, source, in)
	if err != nil {
		return nil, nil, &exitError{Code: exitRefused, Err: err}
	}
	tree := render.Tree{}
	for p, b := range in.Inputs {
		if !verify.IsPeoplePath(p) {
			tree[p] = b
		}
	}
	trustFiles := map[string][]byte{}
	for p, b := range files {
		if verify.IsPeoplePath(p) {
			tree[p] = b
		}
		if verify.IsTrustPath(p) {
			trustFiles[p] = b
		}
	}
	// A trust file the change breaks is refused here at its line, as the render would refuse
	// the commit that holds it.
	req.Invalid = verify.TrustFileErrors(trustFiles)
	// On top of what the renderer would render now: its own last output, known as such.
	req.Files, req.Previous, req.SourceCommit = tree, target.Files, proposed.Commit()
	req.Trust = "the proposed change " + o.Ref + " (" + short(proposed.Commit()) + ") on what the renderer would render now; " + in.Trust
	// What the proposed change's own commits would do once merged is a warning for the
	// reviewer, not an input refused now.
	res := r.Render(req)
	res.Plan.Warnings = append(res.Plan.Warnings, append(warnings, proposedWarnings...)...)
	return res, in, nil
}

// maxProposedWalk bounds the commits of a proposed change and of the branch searched for
// where it starts.
const maxProposedWalk = 10000

// proposedCommits says which of the proposed change's commits would stop rendering once on
// the source branch (verify.Proposed): those after the newest commit the branch already has.
func (o *readOptions) proposedCommits(ctx context.Context, source *gitsync.Repository, in *verify.Inputs) ([]string, error) {
	branch := source.Branch()
	onBranch := map[string]bool{}
	commits, _, err := source.FirstParents(ctx, branch, in.SourceTip, "", maxProposedWalk)
	if err != nil {
		return nil, err
	}
	for _, c := range commits {
		onBranch[c.Hash] = true
	}
	proposed, _, err := source.RefFirstParents(ctx, o.Ref, func(h string) bool { return onBranch[h] }, maxProposedWalk)
	if err != nil {
		return nil, err
	}
	tip, err := source.SnapshotOf(ctx, branch, in.SourceTip)
	if err != nil {
		return nil, err
	}
	return verify.Proposed(tip, branch, o.Ref, proposed), nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// verifiedInputs reads what the renderer would render from now, verified as it verifies it (the
// previous rendered/ and history/ from its last signed commit, the signed records), and returns
// the source repository with it.
func (o *readOptions) verifiedInputs(ctx context.Context) (*verify.Inputs, *gitsync.Repository, error) {
	source, rendered, sources, err := o.remote.open(nil, gitsync.WithFailFast())
	if err != nil {
		return nil, nil, err
	}
	// Reading holds no renderer key: the renderer's commits are the ones allowed_signers lists.
	sources.AnyListedRenderer = true
	// Reading writes nothing, so it previews a render from nothing rather than refuse it; the
	// plan warns that render would refuse it (remotePlan).
	sources.FirstRender = true
	head, err := rendered.Snapshot(ctx)
	if err != nil {
		return nil, nil, &exitError{Code: exitRefused, Err: err}
	}
	in, err := verify.Collect(ctx, sources, head)
	if err != nil {
		return nil, nil, &exitError{Code: exitRefused, Err: withBranches(ctx, source, err)}
	}
	return in, source, nil
}

// remoteTimeout bounds one plan or check against a remote.
func (o *readOptions) remoteTimeout() time.Duration {
	return gitsync.DefaultBackoff.MaxElapsed + time.Minute
}

// renderedTree reads the head of the rendered branch: its inputs and its rendered/ and history/.
func (o *readOptions) renderedTree(ctx context.Context) (render.Tree, error) {
	_, rendered, _, err := o.remote.open(nil, gitsync.WithFailFast())
	if err != nil {
		return nil, err
	}
	snap, err := rendered.Ref(ctx, o.remote.RenderedBranch)
	if err != nil {
		return nil, &exitError{Code: exitRefused, Err: err}
	}
	files, err := snap.Files("")
	if err != nil {
		return nil, &exitError{Code: exitRefused, Err: err}
	}
	tree := render.Tree{}
	for p, b := range files {
		if render.IsInput(p) || render.IsOwned(p) {
			tree[p] = b
		}
	}
	return tree, nil
}
