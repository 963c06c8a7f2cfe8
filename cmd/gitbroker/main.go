// Command gitbroker renders Akri Configurations and node inventories into plain Kubernetes
// manifests in git, and checks, plans and demonstrates that render.
package main

import (
	"context"
	"io"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/cobra"
	// Public roots for HTTPS remotes where the system has none: the images are built on an
	// empty base.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/gitbroker/gitbroker/cmd/internal/cli"
)

// Exit codes, as docs/COMMANDS.md gives them.
const (
	exitOK      = cli.ExitOK
	exitRefused = cli.ExitRefused
	exitInvalid = cli.ExitInvalid
)

// exitError carries an exit code to main; its message has already been printed when Silent.
type exitError = cli.ExitError

func exitf(code int, format string, args ...any) error { return cli.Exitf(code, format, args...) }

// Flag names shared by the commands.
const (
	flagDir            = "dir"
	flagAllowDeletions = "allow-deletions"
	flagSourceCommit   = "source-commit"
	flagFormat         = "format"
	flagOut            = "out"
)

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	return cli.Root("gitbroker", "Run Akri device brokers through GitOps: Configurations x inventory -> Deployments, Jobs and Services in git",
		stdout, stderr, newInitCommand(), newRenderCommand(), newPlanCommand(), newCheckCommand(), newHistoryCommand(), newDemoCommand(), newEnrollCommand(),
		cli.AgentCommand(draPlugin()), newRecordCommand(), cli.VersionCommand())
}

func main() {
	// GOMEMLIMIT at 90% of the container's memory limit (deploy/ gives each writer one), so the
	// garbage collector works harder before the kernel kills the process; none without a limit.
	_, _ = memlimit.Set()
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line; the daemons stop when ctx ends (or on SIGTERM).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Run(ctx, newRootCommand, args, stdout, stderr)
}
