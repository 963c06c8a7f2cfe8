package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Root is a binary's root command, silent on errors so that Run prints each once, with flag
// errors as usage errors (exit 2).
func Root(use, short string, stdout, stderr io.Writer, commands ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{Use: use, Short: short, SilenceUsage: true, SilenceErrors: true}
	root.Version, _ = BuildVersion()
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("%w\n\n%s", err, c.UsageString())}
	})
	root.AddCommand(commands...)
	return root
}

// Run executes the command line and returns the exit code; the daemons stop when ctx ends (or
// on SIGTERM).
func Run(ctx context.Context, newRoot func(stdout, stderr io.Writer) *cobra.Command, args []string, stdout, stderr io.Writer) int {
	// A plan of a large fleet has tens of thousands of lines: write them in blocks.
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	root := newRoot(out, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	out.Flush()
	if errors.As(err, &ee) {
		if !ee.Silent {
			fmt.Fprintln(stderr, "error:", ee.Err)
		}
		return ee.Code
	}
	// Cobra's own errors (unknown command, bad arguments) are usage errors.
	fmt.Fprintln(stderr, "error:", err)
	return ExitInvalid
}
