package main

import (
	"fmt"

	"github.com/gitbroker/gitbroker/render"
	"github.com/spf13/cobra"
)

// checkReport is check's -o json output.
type checkReport struct {
	// Matches is true when rendered/ and history/ are what their inputs render to.
	Matches bool `json:"matches"`
	// Files are the files that differ: "differs", "missing" or "unexpected".
	Files []checkedFile `json:"files"`
	// Errors are invalid inputs; with any, the tree cannot be checked (exit 2).
	Errors []string `json:"errors,omitempty"`
}

type checkedFile struct {
	Path  string `json:"path"`
	State string `json:"state"`
}

func newCheckCommand() *cobra.Command {
	o := &renderOptions{}
	var format string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Exit 1 when rendered/ or history/ do not match their inputs (a CI gate against hand edits)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != formatText && format != formatJSON {
				return exitf(exitInvalid, "--%s must be %s or %s, got %q", flagOutput, formatText, formatJSON, format)
			}
			res, err := o.render()
			if err != nil {
				return err
			}
			report := checkReport{Files: []checkedFile{}}
			if len(res.Errors) > 0 {
				if format == formatJSON {
					report.Errors = res.Plan.Errors
					if err := writeData(cmd.OutOrStdout(), report, formatJSON); err != nil {
						return err
					}
				}
				return inputErrors(cmd, res, format == formatJSON)
			}
			// A refused render (or one holding nodes) still tells what a render would write:
			// compare with that.
			want := res.Files
			if res.Refused != nil || len(res.Held) > 0 {
				o.AllowDeletions = true
				again, err := o.render()
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
			if format == formatJSON {
				if err := writeData(cmd.OutOrStdout(), report, formatJSON); err != nil {
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
			return &exitError{code: exitRefused, err: fmt.Errorf("%d files under rendered/ and history/ do not match their inputs; run gitbroker render", len(diff))}
		},
	}
	o.BindFlags(cmd)
	cmd.Flags().StringVarP(&format, flagOutput, "o", formatText, "output format: text or json")
	return cmd
}
