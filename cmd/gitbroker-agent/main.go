// Command gitbroker-agent is gitbroker's node agent alone, for edge nodes: `gitbroker-agent
// agent` takes the same flags as `gitbroker agent`, in a binary without the renderer's and the
// recorder's Kubernetes clients, a third of gitbroker's size.
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

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	return cli.Root("gitbroker-agent", "gitbroker's node agent: discover this node's devices and keep its inventory ref in git up to date",
		stdout, stderr, cli.AgentCommand(nil), cli.VersionCommand())
}

func main() {
	// GOMEMLIMIT at 90% of the container's memory limit (deploy/ gives each writer one), so the
	// garbage collector works harder before the kernel kills the process; none without a limit.
	_, _ = memlimit.Set()
	os.Exit(runRoot(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func runRoot(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Run(ctx, newRootCommand, args, stdout, stderr)
}
