package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gitbroker/gitbroker/cmd/internal/cli"
	"github.com/gitbroker/gitbroker/renderer"

	"github.com/fluxcd/pkg/runtime/logger"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gitbroker/gitbroker/render"
)

// renderOptions are the flags of the commands that render a work tree.
type renderOptions struct {
	Dir            string
	AllowDeletions bool
	SourceCommit   string
}

// Flag names of render against a remote.
const (
	flagRenderedBranch     = "rendered-branch"
	flagInventoryPrefix    = cli.FlagInventoryPrefix
	flagAdoptRendered      = "adopt-rendered"
	flagReviewBranch       = "review-branch"
	flagReviewBranchPrefix = "review-branch-prefix"
	flagPRDescription      = "pr-description"
	flagPushOption         = "push-option"
)

// remoteOptions are render's flags for a remote branch.
type remoteOptions struct {
	Git                gitsync.RemoteFlags
	Signing            cli.SigningOptions
	AuthorName         string
	AuthorEmail        string
	Inventory          gitsync.RemoteFlags
	RenderedBranch     string
	AdoptRendered      string
	FirstRender        bool
	ReviewBranch       bool
	ReviewBranchPrefix string
	PRDescription      string
	PushOptions        []string
}

func (o *remoteOptions) BindFlags(cmd *cobra.Command) {
	o.Git.BindFlags(cmd.Flags(), "The people's branch to render (Configurations, gitbroker.yaml, .gitbroker/); never written: the render goes to --rendered-branch.")
	o.Signing.BindFlags(cmd.Flags(), "Private key that signs the renderer's commits, as principal renderer (mounted from the renderer's own Secret): OpenSSH (what Flux verifies), or an armored OpenPGP key for Argo CD, which verifies only GnuPG signatures.")
	o.Inventory.BindRemoteFlags(cmd.Flags(), flagInventoryPrefix, "Repository holding the node refs (gitbroker/inventory/<node>), when they are kept apart from --git so that agents need no credential for it; its credentials take the same flags with the inventory- prefix, and are --git's when none is given.")
	cmd.Flags().StringVar(&o.RenderedBranch, flagRenderedBranch, verify.RenderedBranch, "The renderer's own branch, which Flux or Argo CD syncs: each render commits rendered/ and history/ there with the verified inputs they came from.")
	cmd.Flags().StringVar(&o.AdoptRendered, flagAdoptRendered, "", "With .gitbroker/allowed_signers, start from this commit of the rendered branch although this renderer's key did not sign it (the first render after verification is turned on, or after a new key); check it first.")
	cmd.Flags().BoolVar(&o.FirstRender, verify.FlagFirstRender, false, "With .gitbroker/allowed_signers, render from nothing when the rendered branch does not exist: the repository's first render, which happens once in its life. Without it a render that finds no previous render is refused, since the renderer's branches may have been deleted (a render from nothing would accept replayed writer commits and forget every JobRecord). Give it by hand, once; never leave it in a daemon's arguments (a render daemon with leader election starts from nothing by itself only while its Lease records no push).")
	cmd.Flags().BoolVar(&o.ReviewBranch, flagReviewBranch, false, "Propose the render on a new branch per source commit, for review, instead of committing to --rendered-branch; the review branch starts from --rendered-branch, so its diff is the change.")
	cmd.Flags().StringVar(&o.ReviewBranchPrefix, flagReviewBranchPrefix, "gitbroker/render-", "Review branches are named this prefix and the source commit's first 12 characters.")
	cmd.Flags().StringVar(&o.PRDescription, flagPRDescription, "", "With --review-branch, write the pull-request description (markdown) to this file; - is stdout.")
	cmd.Flags().StringArrayVar(&o.PushOptions, flagPushOption, nil, "A git push option, key=value, for hosts that act on them (GitLab: merge_request.create=true, merge_request.target=main); repeatable.")
	cmd.Flags().StringVar(&o.AuthorName, cli.FlagAuthorName, "gitbroker-renderer", "Author name of the renderer's commits.")
	cmd.Flags().StringVar(&o.AuthorEmail, cli.FlagAuthorEmail, "renderer@gitbroker.dev", "Author email of the renderer's commits.")
}

func (o *renderOptions) BindFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Dir, flagDir, ".", "path of the GitOps repository work tree")
	cmd.Flags().BoolVar(&o.AllowDeletions, flagAllowDeletions, false, "allow a render that removes more than maxDeletionPercent of the broker objects, or all of them")
	cmd.Flags().StringVar(&o.SourceCommit, flagSourceCommit, "", "commit the inputs come from; recorded in the metadata file and on new Jobs")
}

func (o *renderOptions) render() (*render.Result, error) {
	if err := isRepository(o.Dir); err != nil {
		return nil, exitf(exitInvalid, "%v", err)
	}
	files, unreadable, err := readTree(o.Dir)
	if err != nil {
		return nil, exitf(exitInvalid, "%v", err)
	}
	invalid, err := trustFileErrors(o.Dir)
	if err != nil {
		return nil, exitf(exitInvalid, "%v", err)
	}
	return render.Render(render.Request{Files: files, SourceCommit: o.SourceCommit, AllowDeletions: o.AllowDeletions, Unreadable: unreadable, Invalid: invalid}), nil
}

// trustFileErrors checks the work tree's .gitbroker/ as a render of the branch would: a trust
// file that does not parse (or is not a regular file) is an invalid input for plan and check
// too, at its file and line.
func trustFileErrors(dir string) (api.ErrorList, error) {
	root := filepath.Join(dir, ".gitbroker")
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	files := map[string][]byte{}
	var invalid api.ErrorList
	err := fs.WalkDir(os.DirFS(dir), ".gitbroker", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() || !verify.IsTrustPath(p):
			return nil
		case !d.Type().IsRegular():
			invalid = append(invalid, &api.FieldError{File: p, Message: "not a regular file; trust files are read only as regular files"})
			return nil
		}
		data, err := fs.ReadFile(os.DirFS(dir), p)
		files[p] = data
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root, err)
	}
	return append(invalid, verify.TrustFileErrors(files)...), nil
}

// isRepository refuses a folder that is not a gitbroker repository, so that check or plan run
// from the wrong directory fails instead of finding nothing to say.
func isRepository(dir string) error {
	for _, p := range []string{api.SettingsPath, api.ConfigurationsDir, strings.TrimSuffix(render.RenderedDir, "/")} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s is not a gitbroker repository: it has no %s, %s/ or %s (run gitbroker init there, or give --%s)",
		dir, api.SettingsPath, api.ConfigurationsDir, render.RenderedDir, flagDir)
}

func newRenderCommand() *cobra.Command {
	o := &renderOptions{}
	remote := &remoteOptions{}
	watch := &watchOptions{}
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Write rendered/ and history/ from the Configurations, inventory and Job records of a work tree",
		Example: `  gitbroker render --dir edge
  # the daemon deploy/renderer runs
  gitbroker render --git https://git.example.com/fleet/edge.git --git-password-file token \
    --signing-key renderer-signing-key --watch --interval 30s`,
		Long: `Render expands every Configuration x node inventory into Deployment, Job and Service manifests under
rendered/, moves recorded Jobs to history/, and prints the plan of what changed.

Invalid inputs keep their previous output; everything else renders, and the command exits 2
after listing every error. A render refused by a safety rule writes nothing and exits 1.

With --git URL it renders the head of --branch and commits rendered/ and history/ back as one
commit with Gitbroker-Source-Commit and Gitbroker-Inputs-Digest trailers. If the branch moved
meanwhile, it renders the new head and tries again. A render with nothing to change, such as a
render of its own last commit, commits nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if remote.Git.URL != "" {
				if cmd.Flags().Changed(flagDir) || cmd.Flags().Changed(flagSourceCommit) {
					return exitf(exitInvalid, "--%s and --%s are for a work tree; with --git the source commit is the branch head", flagDir, flagSourceCommit)
				}
				return runRemoteRender(cmd, o, remote, watch)
			}
			if watch.Watch {
				return exitf(exitInvalid, "--%s needs --%s", flagWatch, gitsync.FlagGit)
			}
			// A remote flag given to a work-tree render would be silently ignored.
			var remoteOnly []string
			cmd.Flags().Visit(func(f *pflag.Flag) {
				switch f.Name {
				case flagDir, flagAllowDeletions, flagSourceCommit:
				default:
					remoteOnly = append(remoteOnly, "--"+f.Name)
				}
			})
			if len(remoteOnly) > 0 {
				return exitf(exitInvalid, "%s: only for a render against a remote (--%s); a work-tree render takes --%s, --%s and --%s",
					strings.Join(remoteOnly, ", "), gitsync.FlagGit, flagDir, flagAllowDeletions, flagSourceCommit)
			}
			res, err := o.render()
			if err != nil {
				return err
			}
			res.Plan.WriteText(cmd.OutOrStdout())
			flushOut(cmd)
			if res.Refused != nil {
				return &exitError{Code: exitRefused, Err: res.Refused}
			}
			if res.Changed() {
				if err := writeOwned(o.Dir, res.Previous, res.Files); err != nil {
					return exitf(exitInvalid, "%v", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d changed files under rendered/ and history/\n", len(res.Diff))
			} else {
				fmt.Fprintln(cmd.ErrOrStderr(), "rendered/ and history/ are up to date")
			}
			return inputErrors(cmd, res, true)
		},
	}
	o.BindFlags(cmd)
	remote.BindFlags(cmd)
	watch.BindFlags(cmd)
	return cmd
}

func runRemoteRender(cmd *cobra.Command, o *renderOptions, remote *remoteOptions, watch *watchOptions) error {
	if remote.PRDescription != "" && !remote.ReviewBranch {
		return exitf(exitInvalid, "--%s needs --%s", flagPRDescription, flagReviewBranch)
	}
	pushOptions := map[string]string{}
	for _, kv := range remote.PushOptions {
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			return exitf(exitInvalid, "--%s %q: expected key=value", flagPushOption, kv)
		}
		pushOptions[k] = v
	}
	signer, err := remote.Signing.LoadRenderer()
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	var extra []gitsync.Option
	if signer != nil {
		extra = append(extra, gitsync.WithSigner(signer))
	}
	if len(pushOptions) > 0 {
		extra = append(extra, gitsync.WithPushOptions(pushOptions))
	}
	if watch.Watch {
		extra = append(extra, gitsync.WithLogger(logger.NewLogger(watch.Log)))
	} else {
		// One render: a remote that is not there is reported at once; conflicts are still
		// recomputed.
		extra = append(extra, gitsync.WithFailFast())
	}
	source, repo, sources, err := remote.open(signer, extra...)
	if err != nil {
		return err
	}
	r := &renderer.Renderer{
		Store:          repo,
		Sources:        sources,
		Branch:         remote.Git.Branch,
		Engine:         render.New(),
		AllowDeletions: o.AllowDeletions,
		Author:         gitsync.Signature{Name: remote.AuthorName, Email: remote.AuthorEmail},
		Now:            time.Now,
	}
	target := remote.RenderedBranch
	if remote.ReviewBranch {
		r.Review, r.ReviewPrefix = repo, remote.ReviewBranchPrefix
	} else if signer != nil {
		// The agents read the verified Configurations where they write, in the repository of
		// the node refs.
		pub := remote.Git
		if remote.Inventory.URL != "" {
			pub = remote.Inventory
			pub.Inherit(remote.Git)
		}
		pub.Branch = verify.ConfigurationsBranch
		// What it publishes are inputs (at most api.MaxFileSize each): a larger file someone
		// pushed there is never fetched.
		if r.Published, err = pub.Open(append(slices.Clip(extra), gitsync.WithSigner(signer), gitsync.WithCreateBranch(), gitsync.WithOwnHistory(),
			gitsync.WithLimits(0, api.MaxFileSize))...); err != nil {
			return exitf(exitInvalid, "%v", err)
		}
	}
	if watch.Watch {
		if remote.PRDescription != "" {
			return exitf(exitInvalid, "--%s is for one render, not --%s", flagPRDescription, flagWatch)
		}
		watch.CycleTimeout = remote.Git.PushTimeout + time.Minute
		return runRenderDaemon(cmd, r, watch, remote.Git.URL, remote.RenderedBranch)
	}
	// A connection that stalls must not hang the command: one render gets
	// the push timeout, plus a minute for the render itself.
	ctx, cancel := context.WithTimeout(cmd.Context(), remote.Git.PushTimeout+time.Minute)
	defer cancel()
	out, err := r.Once(ctx)
	if out.Result != nil && remote.PRDescription != "-" {
		out.Result.Plan.WriteText(cmd.OutOrStdout())
		flushOut(cmd)
	}
	stderr := cmd.ErrOrStderr()
	switch {
	case renderer.IsRefused(err):
		return &exitError{Code: exitRefused, Err: err}
	case errors.Is(err, gitsync.ErrNoChanges):
		fmt.Fprintf(stderr, "rendered/ and history/ are up to date with %s\n", out.Source)
	case errors.Is(err, gitsync.ErrBranchExists):
		fmt.Fprintf(stderr, "review branch %s already exists for %s\n", out.Branch, out.Source)
	case err != nil:
		return &exitError{Code: exitRefused, Err: withBranches(cmd.Context(), source, err)}
	case remote.ReviewBranch:
		fmt.Fprintf(stderr, "proposed %s on review branch %s (rendered from %s)\n", out.Commit, out.Branch, out.Source)
	default:
		fmt.Fprintf(stderr, "committed %s to %s (rendered from %s; %d attempt(s))\n",
			out.Commit, target, out.Source, out.Push.Attempts)
		if n := out.Push.CompanionsMoved; n > 0 {
			fmt.Fprintf(stderr, "moved %d folder source branch(es) under %s\n", n, api.FolderBranchPrefix)
		}
	}
	if out.Published != "" {
		fmt.Fprintf(stderr, "published the verified Configurations for the agents: %s on %s\n", out.Published, verify.ConfigurationsBranch)
	}
	if out.PublishErr != nil {
		return &exitError{Code: exitRefused, Err: out.PublishErr}
	}
	if remote.PRDescription != "" && out.Result != nil && (err == nil || errors.Is(err, gitsync.ErrBranchExists)) {
		desc, err := r.PullRequest(out)
		if err != nil {
			return exitf(exitInvalid, "%v", err)
		}
		if err := writeText(cmd, remote.PRDescription, desc); err != nil {
			return exitf(exitInvalid, "writing the pull-request description: %v", err)
		}
	}
	if out.Result != nil {
		return inputErrors(cmd, out.Result, true)
	}
	return nil
}

// open returns the people's branch (read only), the rendered branch (which its first render
// creates) and where the inputs come from, as every remote command reads them.
func (remote *remoteOptions) open(signer trust.Identity, extra ...gitsync.Option) (*gitsync.Repository, *gitsync.Repository, verify.Sources, error) {
	var none verify.Sources
	if remote.RenderedBranch == remote.Git.Branch {
		return nil, nil, none, exitf(exitInvalid, "--%s must differ from --%s: people own the source branch, the renderer its own", flagRenderedBranch, gitsync.FlagBranch)
	}
	source, err := remote.Git.Open(extra...)
	if err != nil {
		return nil, nil, none, exitf(exitInvalid, "%v", err)
	}
	renderedOpts := remote.Git
	renderedOpts.Branch = remote.RenderedBranch
	repo, err := renderedOpts.Open(append(extra, gitsync.WithCreateBranch())...)
	if err != nil {
		return nil, nil, none, exitf(exitInvalid, "%v", err)
	}
	sources := verify.Sources{Main: source, SourceBranch: remote.Git.Branch, RenderedBranch: remote.RenderedBranch, Adopt: remote.AdoptRendered,
		FirstRender: remote.FirstRender, Signatures: &verify.Signatures{}}
	sources.Renderer = signer
	// The node refs are read apart, even from the same repository: a node's ref holds one
	// inventory file of at most api.MaxInventorySize, so its fetches leave out any larger blob
	// (the renderer's own limit is far larger: its render metadata names every node), and a
	// stolen node credential cannot fill the renderer's memory through its ref.
	inv := remote.Git
	if remote.Inventory.URL != "" {
		inv = remote.Inventory
		inv.Inherit(remote.Git)
	}
	r, err := inv.Open(append(slices.Clip(extra), gitsync.WithLimits(0, api.MaxInventorySize))...)
	if err != nil {
		return nil, nil, none, exitf(exitInvalid, "--%s%s: %v", flagInventoryPrefix, gitsync.FlagGit, err)
	}
	sources.Inventory = r
	return source, repo, sources, nil
}

// writeText writes to a file, or to stdout for "-".
func writeText(cmd *cobra.Command, name, text string) error {
	if name == "-" {
		_, err := io.WriteString(cmd.OutOrStdout(), text)
		flushOut(cmd)
		return err
	}
	return os.WriteFile(name, []byte(text), 0o644)
}

// flushOut writes out what the command buffered on stdout, so that what follows on stderr
// comes after it.
func flushOut(cmd *cobra.Command) {
	if f, ok := cmd.OutOrStdout().(interface{ Flush() error }); ok {
		_ = f.Flush()
	}
}

// inputErrors turns invalid inputs into exit code 2, and nodes the deletion budget held (a
// safety rule refused their part) into exit code 1. Each is listed on stderr unless listed says
// the plan on stdout already did, so nothing is printed twice.
func inputErrors(cmd *cobra.Command, res *render.Result, listed bool) error {
	if len(res.Errors) == 0 && len(res.Held) == 0 && len(res.Untrusted) == 0 {
		return nil
	}
	flushOut(cmd)
	where := " (listed in the plan)"
	if !listed {
		where = ""
		w := cmd.ErrOrStderr()
		for _, e := range res.Errors {
			fmt.Fprintln(w, "error:", e.Error())
		}
		for _, h := range res.Held {
			fmt.Fprintln(w, "held:", h)
		}
		for _, u := range res.Untrusted {
			fmt.Fprintln(w, "untrusted:", u)
		}
	}
	if len(res.Errors) == 0 && len(res.Held) == 0 {
		return &exitError{Code: exitRefused, Err: fmt.Errorf("%d untrusted input(s)%s; each writer's previous part was kept, everything else was rendered", len(res.Untrusted), where)}
	}
	if len(res.Errors) == 0 {
		return &exitError{Code: exitRefused, Err: fmt.Errorf("%d node(s) held by the deletion budget%s; everything else was rendered", len(res.Held), where)}
	}
	return &exitError{Code: exitInvalid, Err: fmt.Errorf("%d invalid input(s)%s; their previous output was kept", len(res.Errors), where)}
}

// withBranches adds to an error about a source branch that does not exist the branches the
// repository has (outside gitbroker/), so a misspelt --branch shows the right name.
func withBranches(ctx context.Context, source *gitsync.Repository, err error) error {
	if !errors.Is(err, gitsync.ErrNoBranch) || source == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	names, more, lerr := source.OtherBranches(ctx, 20)
	switch {
	case lerr != nil:
		return err
	case len(names) == 0:
		return fmt.Errorf("%w (the repository has no branch outside gitbroker/)", err)
	case more > 0:
		return fmt.Errorf("%w (the repository's branches outside gitbroker/: %s and %d more)", err, strings.Join(names, ", "), more)
	}
	return fmt.Errorf("%w (the repository's branches outside gitbroker/: %s)", err, strings.Join(names, ", "))
}
