package main

import (
	"context"
	"fmt"

	"github.com/gitbroker/gitbroker/gitsync"

	"github.com/gitbroker/gitbroker/render"
	"github.com/spf13/cobra"
)

// checkReport is check's -o json and -o yaml output.
type checkReport struct {
	// Matches is true when rendered/ and history/ are what their inputs render to.
	Matches bool `json:"matches"`
	// Files are the files that differ: "differs", "missing" or "unexpected".
	Files []checkedFile `json:"files"`
	// Errors are invalid inputs; with any, the tree cannot be checked (exit 2).
	Errors []render.Problem `json:"errors,omitempty"`
}

type checkedFile struct {
	Path  string `json:"path"`
	State string `json:"state"`
}

func newCheckCommand() *cobra.Command {
	o := &renderOptions{}
	ro := &readOptions{}
	var format string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Exit 1 when rendered/ or history/ do not match their inputs (a CI gate against hand edits)",
		Example: `  # the rendered branch of a remote, as CI's gate, with no clone
  gitbroker check --git https://git.example.com/fleet/edge.git --git-password-file token
  # a work tree
  gitbroker check --dir edge -o yaml`,
		Long: `Check renders the work tree's inputs in memory and exits 1 when rendered/ or history/ differ
from what they render to, listing the files. With --git it checks the head of the rendered
branch (gitbroker/rendered), which carries the inputs it was rendered from: the gate for a
branch nobody but the renderer should write.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data := format == formatJSON || format == formatYAML
			if format != formatText && !data {
				return exitf(exitInvalid, "--%s must be %s, %s or %s, got %q", flagOutput, formatText, formatJSON, formatYAML, format)
			}
			renderIt := o.render
			if ro.remote.Git.URL != "" {
				if cmd.Flags().Changed(flagDir) || cmd.Flags().Changed(flagSourceCommit) {
					return exitf(exitInvalid, "--%s and --%s are for a work tree; with --%s, check reads the rendered branch", flagDir, flagSourceCommit, gitsync.FlagGit)
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), ro.remoteTimeout())
				defer cancel()
				files, err := ro.renderedTree(ctx)
				if err != nil {
					return err
				}
				renderIt = func() (*render.Result, error) {
					return render.Render(render.Request{Files: files, AllowDeletions: o.AllowDeletions}), nil
				}
			}
			res, err := renderIt()
			if err != nil {
				return err
			}
			report := checkReport{Files: []checkedFile{}}
			if len(res.Errors) > 0 {
				if data {
					report.Errors = res.Plan.Errors
					if err := writeData(cmd.OutOrStdout(), report, format); err != nil {
						return err
					}
				}
				return inputErrors(cmd, res, data)
			}
			// A refused render (or one holding nodes) still tells what a render would write:
			// compare with that.
			want := res.Files
			if res.Refused != nil || len(res.Held) > 0 {
				o.AllowDeletions = true
				again, err := renderIt()
				if err != nil {
					return err
				}
				want = again.Files
			}
			diff := render.Diff(res.Previous, want)
			for _, p := range diff {
				state := "differs"
				switch {
				case res.Previous[p] == nil:
					state = "missing"
				case want[p] == nil:
					state = "unexpected"
				}
				report.Files = append(report.Files, checkedFile{Path: p, State: state})
			}
			report.Matches = len(diff) == 0
			if data {
				if err := writeData(cmd.OutOrStdout(), report, format); err != nil {
					return err
				}
			} else if report.Matches {
				fmt.Fprintln(cmd.OutOrStdout(), "rendered/ and history/ match their inputs")
			} else {
				for _, f := range report.Files {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", f.State, f.Path)
				}
			}
			if report.Matches {
				return nil
			}
			return &exitError{Code: exitRefused, Err: fmt.Errorf("%d files under rendered/ and history/ do not match their inputs; run gitbroker render", len(diff))}
		},
	}
	o.BindFlags(cmd)
	ro.BindFlags(cmd, false)
	cmd.Flags().StringVarP(&format, flagOutput, "o", formatText, "output format: text, json or yaml")
	return cmd
}
