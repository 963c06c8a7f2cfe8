package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/templates"
)

// Trailers of the renderer's commits.
const (
	TrailerSourceCommit = "Gitbroker-Source-Commit"
	TrailerInputsDigest = "Gitbroker-Inputs-Digest"
)

// commitPlanLines bounds the plan quoted in a commit message; the rest is
// in the plan itself.
const commitPlanLines = 200

// remoteRender renders a branch and commits rendered/ and history/ back to
// it. A Renderer is kept, so a render recomputed after a conflict (or the
// next render of a daemon) parses and builds only what changed.
type remoteRender struct {
	// store is the branch the render commits to.
	store gitsync.Store
	// source, when set, is the branch the inputs come from, and store is
	// a rendered branch kept in step with it (--push-branch).
	source gitsync.Store
	// review, when set, proposes each render on a new branch named
	// reviewPrefix + the source commit, on top of the source commit
	// (--review-branch); store is then unused.
	review         *gitsync.Repository
	reviewPrefix   string
	branch         string
	renderer       *render.Renderer
	allowDeletions bool
	author         gitsync.Signature
	now            func() time.Time
}

// remoteOutcome is what one render against the remote did.
type remoteOutcome struct {
	// Source is the commit the final attempt rendered, SourceTime its
	// committer time.
	Source     string
	SourceTime time.Time
	// Commit is the renderer's commit; "" when there was nothing to do.
	Commit string
	// Branch is the review branch, in review mode.
	Branch string
	// tree is what the final attempt rendered.
	tree   render.Tree
	Result *render.Result
	Push   gitsync.Result
}

// errRefused carries a safety refusal out of the writer callback.
type errRefused struct{ err error }

func (e *errRefused) Error() string { return e.err.Error() }
func (e *errRefused) Unwrap() error { return e.err }

// once renders the head and commits the result. A render with nothing to
// change, which includes a render of the renderer's own last commit,
// returns gitsync.ErrNoChanges and commits nothing.
func (r *remoteRender) once(ctx context.Context) (remoteOutcome, error) {
	var out remoteOutcome
	write := func(ctx context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		// head holds rendered/ and history/; src holds the inputs.
		src := head
		if r.source != nil {
			s, err := r.source.Snapshot(ctx)
			if err != nil {
				return nil, err
			}
			src = s
		}
		tree, err := r.tree(src, head)
		if err != nil {
			return nil, err
		}
		result := r.renderer.Render(render.Request{Files: tree, SourceCommit: src.Commit(), AllowDeletions: r.allowDeletions})
		out.Source, out.SourceTime, out.Result, out.tree = src.Commit(), src.CommitTime(), result, tree
		if result.Refused != nil {
			return nil, &errRefused{result.Refused}
		}
		if !result.Changed() && (r.source == nil || mirrored(tree, head)) {
			return nil, gitsync.ErrNoChanges
		}
		digest := render.InputsDigest(tree)
		msg, err := r.text(templates.CommitMessageName, tree, digest, src.Commit(), result)
		if err != nil {
			return nil, err
		}
		author := r.author
		author.When = r.now()
		change := &gitsync.Change{
			Owned:   []string{render.RenderedDir, render.HistoryDir},
			Files:   result.Files,
			Message: msg,
			Trailers: []gitsync.Trailer{
				{Key: TrailerSourceCommit, Value: src.Commit()},
				{Key: TrailerInputsDigest, Value: digest},
			},
			Author: author,
		}
		if r.source != nil {
			// The rendered branch carries the inputs it was rendered from,
			// so it can be checked on its own.
			change.Owned = append(change.Owned, mirroredPaths...)
			change.Files = render.Tree{}
			for p, b := range tree {
				if render.IsInput(p) {
					change.Files[p] = b
				}
			}
			for p, b := range result.Files {
				change.Files[p] = b
			}
		}
		return change, nil
	}
	var res gitsync.Result
	var err error
	if r.review != nil {
		res, err = r.review.UpdateNewBranch(ctx, func(head gitsync.Snapshot) string {
			out.Branch = r.reviewBranch(head.Commit())
			return out.Branch
		}, write)
	} else {
		res, err = r.store.Update(ctx, write)
	}
	out.Push, out.Commit = res, res.Commit
	return out, err
}

// mirroredPaths are the inputs a rendered branch carries.
var mirroredPaths = []string{api.SettingsPath, api.ConfigurationsDir + "/", api.InventoryDir + "/", "status/"}

// tree is what the renderer reads: the inputs of src and the owned paths
// of head.
func (r *remoteRender) tree(src, head gitsync.Snapshot) (render.Tree, error) {
	tree := render.Tree{}
	files, err := src.Files("")
	if err != nil {
		return nil, err
	}
	for p, b := range files {
		if render.IsInput(p) || (src == head && render.IsOwned(p)) {
			tree[p] = b
		}
	}
	if src != head {
		for _, dir := range []string{render.RenderedDir, render.HistoryDir} {
			owned, err := head.Files(strings.TrimSuffix(dir, "/"))
			if err != nil {
				return nil, err
			}
			for p, b := range owned {
				tree[p] = b
			}
		}
	}
	return tree, nil
}

// mirrored reports whether head already carries tree's inputs.
func mirrored(tree render.Tree, head gitsync.Snapshot) bool {
	n := 0
	for p, b := range tree {
		if !render.IsInput(p) {
			continue
		}
		n++
		have, err := head.ReadFile(p)
		if err != nil || !bytes.Equal(have, b) {
			return false
		}
	}
	for _, dir := range mirroredPaths {
		files, err := head.Files(strings.TrimSuffix(dir, "/"))
		if err != nil {
			return false
		}
		for p := range files {
			if render.IsInput(p) {
				n--
			}
		}
	}
	return n == 0
}

func (r *remoteRender) reviewBranch(source string) string {
	short := source
	if len(short) > 12 {
		short = short[:12]
	}
	return r.reviewPrefix + short
}

// pullRequest renders the pull-request description of a render.
func (r *remoteRender) pullRequest(out remoteOutcome) (string, error) {
	return r.text(templates.PullRequestName, out.tree, render.InputsDigest(out.tree), out.Source, out.Result)
}

// text renders the commit message or the pull-request description
// (gitbroker.yaml may replace either; an invalid gitbroker.yaml falls back
// to the defaults).
func (r *remoteRender) text(name string, tree render.Tree, digest, source string, result *render.Result) (string, error) {
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
		Branch:       r.branch,
		Summary:      result.Plan.Summary.String(),
		Plan:         truncateLines(plan.String(), commitPlanLines),
		FilesChanged: len(render.Diff(result.Previous, result.Files)),
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

// isRefused reports whether a render was refused by a safety rule.
func isRefused(err error) bool {
	var r *errRefused
	return errors.As(err, &r)
}
