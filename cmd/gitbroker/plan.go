package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
)

// Output formats.
const (
	formatText     = "text"
	formatMarkdown = "markdown"
	formatJSON     = "json"
	formatYAML     = "yaml"

	flagOutput = "output"
)

func newPlanCommand() *cobra.Command {
	o := &renderOptions{}
	ro := &readOptions{}
	var format string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what a render would change, per Configuration and instance, without writing",
		Example: `  gitbroker plan --dir edge
  # a pull request's change against main, as the comment CI posts
  gitbroker plan --git https://git.example.com/fleet/edge.git --ref refs/pull/7/head -o markdown`,
		Long: `Plan renders the work tree in memory and prints what would change, per Configuration and
instance: broker Deployments created, rolled out, removed or held, Jobs started, held, retired or kept,
Services, Flux Kustomizations and Configurations added or removed, with the invalid inputs and
warnings. -o markdown is ready to post as a pull-request comment; -o json and -o yaml are for
scripts (the same fields, and a summary of counts).

With --git it reads what the renderer reads (the people's branch, every node's ref, the
recorder's, the rendered branch) with no clone, and plans what the renderer would do now; with
--ref, what merging that proposed change (a pull request's head) would change on top of it:
the plan to post on the pull request.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed(flagFormat) && !cmd.Flags().Changed(flagOutput) {
				format = cmd.Flag(flagFormat).Value.String()
			}
			switch format {
			case formatText, formatMarkdown, formatJSON, formatYAML:
			default:
				return exitf(exitInvalid, "--%s must be %s, %s, %s or %s, got %q", flagOutput, formatText, formatMarkdown, formatJSON, formatYAML, format)
			}
			var res *render.Result
			var err error
			if ro.remote.Git.URL != "" {
				if cmd.Flags().Changed(flagDir) || cmd.Flags().Changed(flagSourceCommit) {
					return exitf(exitInvalid, "--%s and --%s are for a work tree; with --%s, plan reads the remote", flagDir, flagSourceCommit, gitsync.FlagGit)
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), ro.remoteTimeout())
				defer cancel()
				res, _, err = ro.remotePlan(ctx)
			} else {
				if ro.Ref != "" {
					return exitf(exitInvalid, "--%s needs --%s", flagRef, gitsync.FlagGit)
				}
				res, err = o.render()
			}
			if err != nil {
				return err
			}
			if err := writePlan(cmd.OutOrStdout(), res.Plan, format); err != nil {
				return err
			}
			// The exit code is render's for the same inputs: refused, untrusted or held 1,
			// invalid 2. (With --ref, what the proposed change's own commits would do is a
			// warning for the reviewer.)
			if res.Refused != nil {
				return &exitError{Code: exitRefused, Err: res.Refused}
			}
			return inputErrors(cmd, res, true)
		},
	}
	o.BindFlags(cmd)
	ro.BindFlags(cmd, true)
	cmd.Flags().StringVarP(&format, flagOutput, "o", formatText, "output format: text, markdown (for a pull-request comment), json or yaml")
	cmd.Flags().String(flagFormat, formatText, "the same as --output")
	_ = cmd.Flags().MarkHidden(flagFormat) // its older name; kept so scripts keep working
	return cmd
}

func writePlan(w io.Writer, p *render.Plan, format string) error {
	switch format {
	case formatMarkdown:
		p.WriteMarkdown(w)
	case formatJSON, formatYAML:
		return writeData(w, p, format)
	default:
		p.WriteText(w)
	}
	return nil
}

// writeData writes v as indented JSON or as YAML, for scripts.
func writeData(w io.Writer, v any, format string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err == nil && format == formatYAML {
		b, err = yaml.JSONToYAML(b)
	} else if err == nil {
		b = append(b, '\n')
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", format, err)
	}
	_, err = w.Write(b)
	return err
}
