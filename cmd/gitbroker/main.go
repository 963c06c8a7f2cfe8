// Command gitbroker renders Akri Configurations and node inventories into plain Kubernetes
// manifests in git, and checks, plans and demonstrates that render.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes, as DESIGN.md gives them.
const (
	exitOK      = 0
	exitRefused = 1 // check found rendered/ stale, or a safety rule refused the render
	exitInvalid = 2 // invalid input or usage
)

// exitError carries an exit code to main; its message has already been printed when silent.
type exitError struct {
	code   int
	err    error
	silent bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// Flag names shared by the commands.
const (
	flagDir            = "dir"
	flagAllowDeletions = "allow-deletions"
	flagSourceCommit   = "source-commit"
	flagFormat         = "format"
	flagOut            = "out"
)

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "gitbroker",
		Short:         "Run Akri device brokers through GitOps: Configurations x inventory -> Pods, Jobs and Services in git",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.Version, _ = buildVersion()
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitInvalid, err: fmt.Errorf("%w\n\n%s", err, c.UsageString())}
	})
	root.AddCommand(newInitCommand(), newRenderCommand(), newPlanCommand(), newCheckCommand(), newDemoCommand(), newAgentCommand(), newRecordCommand(), newVersionCommand())
	return root
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line; the daemons stop when ctx ends (or on
// SIGTERM).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// A plan of a large fleet has tens of thousands of lines: write them in blocks.
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	root := newRootCommand(out, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	out.Flush()
	if errors.As(err, &ee) {
		if !ee.silent {
			fmt.Fprintln(stderr, "error:", ee.err)
		}
		return ee.code
	}
	// Cobra's own errors (unknown command, bad arguments) are usage errors.
	fmt.Fprintln(stderr, "error:", err)
	return exitInvalid
}
