package main

import (
	"github.com/spf13/cobra"
)

const (
	formatText     = "text"
	formatMarkdown = "markdown"
)

func newPlanCommand() *cobra.Command {
	o := &renderOptions{}
	var format string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what a render would change, per Configuration and instance, without writing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != formatText && format != formatMarkdown {
				return exitf(exitInvalid, "--%s must be %s or %s, got %q", flagFormat, formatText, formatMarkdown, format)
			}
			res, err := o.render()
			if err != nil {
				return err
			}
			if format == formatMarkdown {
				res.Plan.WriteMarkdown(cmd.OutOrStdout())
			} else {
				res.Plan.WriteText(cmd.OutOrStdout())
			}
			if len(res.Errors) > 0 {
				return inputErrors(cmd, res, true)
			}
			if res.Refused != nil {
				return &exitError{code: exitRefused, err: res.Refused}
			}
			return nil
		},
	}
	o.BindFlags(cmd)
	cmd.Flags().StringVar(&format, flagFormat, formatText, "output format: text or markdown (for a pull request body)")
	return cmd
}
