package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
)

const (
	flagInstance      = "instance"
	flagConfiguration = "configuration"
	flagDevice        = "device"
	flagNode          = "node"
	flagLines         = "lines"
)

func newHistoryCommand() *cobra.Command {
	var dir, format string
	var lines int
	var f render.RunFilter
	ro := &readOptions{}
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List finished Job runs with their outcome, times, Pods and the first lines of their log tails",
		Long: `History lists the finished broker Jobs, newest first: every entry under history/ (a retired
Job with its JobRecord) and every record under status/ whose Job is not retired yet. For each
run it shows the outcome and times, per Pod the node, per container the exit code and reason,
and the first --lines lines of the log tail the recorder kept (spec.jobPolicy.logs). Filter by
--namespace, --configuration, --instance, --device or --node; -o json or yaml gives every field
of every record.

It reads a work tree (--dir, or a clone of gitbroker/rendered), or with --git the remote's
rendered branch and status ref as the renderer verifies them, with no clone. Everything a
device or a broker printed is escaped, so a log cannot act on the terminal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch format {
			case formatText, formatJSON, formatYAML:
			default:
				return exitf(exitInvalid, "--%s must be %s, %s or %s, got %q", flagOutput, formatText, formatJSON, formatYAML, format)
			}
			var tree render.Tree
			if ro.remote.Git.URL != "" {
				if cmd.Flags().Changed(flagDir) {
					return exitf(exitInvalid, "--%s is for a work tree; with --%s, history reads the remote", flagDir, gitsync.FlagGit)
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), ro.remoteTimeout())
				defer cancel()
				in, _, err := ro.verifiedInputs(ctx)
				if err != nil {
					return err
				}
				tree = in.Tree()
				if format == formatText {
					fmt.Fprintf(cmd.ErrOrStderr(), "Inputs: %s\n", in.Trust)
				}
			} else {
				if err := isRepository(dir); err != nil {
					return exitf(exitInvalid, "%v", err)
				}
				files, _, err := readTree(dir)
				if err != nil {
					return exitf(exitInvalid, "%v", err)
				}
				tree = files
			}
			runs, errs := render.Runs(tree, f)
			for _, err := range errs {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v\n", err)
			}
			if format != formatText {
				if runs == nil {
					runs = []render.Run{}
				}
				return writeData(cmd.OutOrStdout(), runs, format)
			}
			render.WriteRuns(cmd.OutOrStdout(), runs, lines)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, flagDir, ".", "path of the GitOps repository work tree, or of a clone of gitbroker/rendered")
	ro.BindFlags(cmd, false)
	fs.StringVar(&f.Namespace, flagNamespace, "", "only runs in this namespace")
	fs.StringVar(&f.Configuration, flagConfiguration, "", "only runs of this Configuration")
	fs.StringVar(&f.Instance, flagInstance, "", "only runs of this instance (akri.sh/instance)")
	fs.StringVar(&f.DeviceID, flagDevice, "", "only runs on this device id")
	fs.StringVar(&f.Node, flagNode, "", "only runs with a Pod on this node")
	fs.IntVar(&lines, flagLines, 5, "lines of each log tail to show; 0 shows none")
	fs.StringVarP(&format, flagOutput, "o", formatText, "output format: text, json or yaml")
	return cmd
}
