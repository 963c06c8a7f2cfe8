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
	store          gitsync.Store
	branch         string
	renderer       *render.Renderer
	allowDeletions bool
	author         gitsync.Signature
	now            func() time.Time
}

// remoteOutcome is what one render against the remote did.
type remoteOutcome struct {
	// Source is the commit the final attempt rendered.
	Source string
	// Commit is the renderer's commit; "" when there was nothing to do.
	Commit string
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
	res, err := r.store.Update(ctx, func(_ context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		files, err := head.Files("")
		if err != nil {
			return nil, err
		}
		tree := make(render.Tree, len(files))
		for p, b := range files {
			if render.IsInput(p) || render.IsOwned(p) {
				tree[p] = b
			}
		}
		result := r.renderer.Render(render.Request{Files: tree, SourceCommit: head.Commit(), AllowDeletions: r.allowDeletions})
		out.Source, out.Result = head.Commit(), result
		if result.Refused != nil {
			return nil, &errRefused{result.Refused}
		}
		if !result.Changed() {
			return nil, gitsync.ErrNoChanges
		}
		msg, err := r.message(tree, head.Commit(), result)
		if err != nil {
			return nil, err
		}
		author := r.author
		author.When = r.now()
		return &gitsync.Change{
			Owned:   []string{render.RenderedDir, render.HistoryDir},
			Files:   result.Files,
			Message: msg,
			Trailers: []gitsync.Trailer{
				{Key: TrailerSourceCommit, Value: head.Commit()},
				{Key: TrailerInputsDigest, Value: render.InputsDigest(tree)},
			},
			Author: author,
		}, nil
	})
	out.Push, out.Commit = res, res.Commit
	return out, err
}

// message renders the commit message template (gitbroker.yaml may replace
// it; an invalid gitbroker.yaml falls back to the default).
func (r *remoteRender) message(tree render.Tree, source string, result *render.Result) (string, error) {
	settings, errs := api.ParseSettings(api.SettingsPath, tree[api.SettingsPath])
	override := ""
	if len(errs) == 0 {
		override = settings.Templates.CommitMessage
	}
	var plan bytes.Buffer
	result.Plan.WriteText(&plan)
	msg, err := templates.Execute(templates.CommitMessageName, override, templates.Render{
		SourceCommit: source,
		Branch:       r.branch,
		Summary:      result.Plan.Summary.String(),
		Plan:         truncateLines(plan.String(), commitPlanLines),
		FilesChanged: len(render.Diff(result.Previous, result.Files)),
		InputsDigest: render.InputsDigest(tree),
	})
	if err != nil && override != "" {
		return "", fmt.Errorf("gitbroker.yaml spec.templates.commitMessage: %w", err)
	}
	return msg, err
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
