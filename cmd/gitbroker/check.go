package main

import (
	"fmt"

	"github.com/gitbroker/gitbroker/render"
	"github.com/spf13/cobra"
)

func newCheckCommand() *cobra.Command {
	o := &renderOptions{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Exit 1 when rendered/ or history/ do not match their inputs (a CI gate against hand edits)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := o.render()
			if err != nil {
				return err
			}
			if len(res.Errors) > 0 {
				return inputErrors(cmd, res, false)
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
			if len(diff) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "rendered/ and history/ match their inputs")
				return nil
			}
			for _, p := range diff {
				state := "differs"
				switch {
				case res.Previous[p] == nil:
					state = "missing"
				case want[p] == nil:
					state = "unexpected"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", state, p)
			}
			return &exitError{code: exitRefused, err: fmt.Errorf("%d files under rendered/ and history/ do not match their inputs; run gitbroker render", len(diff))}
		},
	}
	o.BindFlags(cmd)
	return cmd
}
