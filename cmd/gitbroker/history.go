package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
)

const (
	flagInstance      = "instance"
	flagConfiguration = "configuration"
	flagDevice        = "device"
	flagNode          = "node"
	flagLines         = "lines"
	flagOutcome       = "outcome"
	flagSince         = "since"
)

func newHistoryCommand() *cobra.Command {
	var dir, format, since string
	var lines int
	var f render.RunFilter
	ro := &readOptions{}
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List finished Job runs with their outcome, times, Pods and the first lines of their log tails",
		Example: `  gitbroker history --git https://git.example.com/fleet/edge.git --configuration firmware --lines 20
  gitbroker history --dir edge --outcome Failed --since 24h -n plant -o json`,
		Long: `History lists the finished broker Jobs, newest first: every entry under history/ (a retired
Job with its JobRecord) and every record under status/ whose Job is not retired yet. For each
run it shows the outcome and times, per Pod the node, per container the exit code and reason,
and the first --lines lines of the log tail the recorder kept (spec.jobPolicy.logs). Each run also
says the images it ran, the properties its brokers got (the firmware version a Configuration
passed, the device's properties) and the source commit that rendered it. Filter by
--namespace, --configuration, --instance, --device, --node, --outcome or --since; -o json or
yaml gives every field of every record, and the Job that ran.

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
			switch f.Outcome {
			case "", api.OutcomeSucceeded, api.OutcomeFailed:
			default:
				return exitf(exitInvalid, "--%s must be %s or %s, got %q", flagOutcome, api.OutcomeSucceeded, api.OutcomeFailed, f.Outcome)
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return exitf(exitInvalid, "--%s: %v", flagSince, err)
				}
				f.Since = t
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
	fs.StringVarP(&f.Namespace, flagNamespace, "n", "", "only runs in this namespace")
	fs.StringVar(&f.Configuration, flagConfiguration, "", "only runs of this Configuration")
	fs.StringVar(&f.Instance, flagInstance, "", "only runs of this instance (akri.sh/instance)")
	fs.StringVar(&f.DeviceID, flagDevice, "", "only runs on this device id")
	fs.StringVar(&f.Node, flagNode, "", "only runs with a Pod on this node")
	fs.StringVar(&f.Outcome, flagOutcome, "", "only runs with this outcome: Succeeded or Failed")
	fs.StringVar(&since, flagSince, "", "only runs that completed since then: a duration back from now (24h, 7d) or a time (2026-12-01 or RFC 3339)")
	fs.IntVar(&lines, flagLines, 5, "lines of each log tail to show; 0 shows none")
	fs.StringVarP(&format, flagOutput, "o", formatText, "output format: text, json or yaml")
	return cmd
}

// parseSince reads --since: a duration back from now (Go's, or whole days such as 7d), a date, or
// an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (24h, 7d), a date (2026-12-01) nor an RFC 3339 time", v)
}
