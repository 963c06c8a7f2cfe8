package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/gitbroker/gitbroker/gitsync"

	"github.com/gitbroker/gitbroker/render"
	"github.com/spf13/cobra"
)

// renderOptions are the flags of the commands that render a work tree.
type renderOptions struct {
	Dir            string
	AllowDeletions bool
	SourceCommit   string
}

// remoteOptions are render's flags for a remote branch.
type remoteOptions struct {
	Git         gitsync.Options
	AuthorName  string
	AuthorEmail string
}

func (o *remoteOptions) BindFlags(cmd *cobra.Command) {
	o.Git.BindFlags(cmd.Flags())
	cmd.Flags().StringVar(&o.AuthorName, flagAuthorName, "gitbroker-renderer", "Author name of the renderer's commits.")
	cmd.Flags().StringVar(&o.AuthorEmail, flagAuthorEmail, "renderer@gitbroker.dev", "Author email of the renderer's commits.")
}

func (o *renderOptions) BindFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Dir, flagDir, ".", "path of the GitOps repository work tree")
	cmd.Flags().BoolVar(&o.AllowDeletions, flagAllowDeletions, false, "allow a render that removes more than maxDeletionPercent of the broker objects, or all of them")
	cmd.Flags().StringVar(&o.SourceCommit, flagSourceCommit, "", "commit the inputs come from; recorded in the metadata file and on new Jobs")
}

func (o *renderOptions) render() (*render.Result, error) {
	files, err := readTree(o.Dir)
	if err != nil {
		return nil, exitf(exitInvalid, "%v", err)
	}
	return render.Render(render.Request{Files: files, SourceCommit: o.SourceCommit, AllowDeletions: o.AllowDeletions}), nil
}

func newRenderCommand() *cobra.Command {
	o := &renderOptions{}
	remote := &remoteOptions{}
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Write rendered/ and history/ from the Configurations, inventory and Job records of a work tree",
		Long: `Render expands every Configuration x node inventory into Pod, Job and Service manifests under
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
				return runRemoteRender(cmd, o, remote)
			}
			res, err := o.render()
			if err != nil {
				return err
			}
			res.Plan.WriteText(cmd.OutOrStdout())
			flushOut(cmd)
			if res.Refused != nil {
				return &exitError{code: exitRefused, err: res.Refused}
			}
			if res.Changed() {
				if err := writeOwned(o.Dir, res.Previous, res.Files); err != nil {
					return exitf(exitInvalid, "%v", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d changed files under rendered/ and history/\n", len(render.Diff(res.Previous, res.Files)))
			} else {
				fmt.Fprintln(cmd.ErrOrStderr(), "rendered/ and history/ are up to date")
			}
			return inputErrors(cmd, res)
		},
	}
	o.BindFlags(cmd)
	remote.BindFlags(cmd)
	return cmd
}

func runRemoteRender(cmd *cobra.Command, o *renderOptions, remote *remoteOptions) error {
	repo, err := remote.Git.Open()
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	r := &remoteRender{
		store:          repo,
		branch:         repo.Branch(),
		renderer:       render.New(),
		allowDeletions: o.AllowDeletions,
		author:         gitsync.Signature{Name: remote.AuthorName, Email: remote.AuthorEmail},
		now:            time.Now,
	}
	out, err := r.once(cmd.Context())
	if out.Result != nil {
		out.Result.Plan.WriteText(cmd.OutOrStdout())
		flushOut(cmd)
	}
	switch {
	case isRefused(err):
		return &exitError{code: exitRefused, err: err}
	case errors.Is(err, gitsync.ErrNoChanges):
		fmt.Fprintf(cmd.ErrOrStderr(), "rendered/ and history/ are up to date with %s\n", out.Source)
	case err != nil:
		return &exitError{code: exitRefused, err: err}
	default:
		fmt.Fprintf(cmd.ErrOrStderr(), "committed %s to %s (rendered from %s; %d attempt(s))\n",
			out.Commit, repo.Branch(), out.Source, out.Push.Attempts)
	}
	if out.Result != nil {
		return inputErrors(cmd, out.Result)
	}
	return nil
}

// flushOut writes out what the command buffered on stdout, so that what follows on stderr
// comes after it.
func flushOut(cmd *cobra.Command) {
	if f, ok := cmd.OutOrStdout().(interface{ Flush() error }); ok {
		_ = f.Flush()
	}
}

// inputErrors lists every invalid input and turns them into exit code 2.
func inputErrors(cmd *cobra.Command, res *render.Result) error {
	if len(res.Errors) == 0 {
		return nil
	}
	flushOut(cmd)
	w := cmd.ErrOrStderr()
	for _, e := range res.Errors {
		fmt.Fprintln(w, "error:", e.Error())
	}
	return &exitError{code: exitInvalid, err: fmt.Errorf("%d invalid inputs; their previous output was kept", len(res.Errors)), silent: false}
}
