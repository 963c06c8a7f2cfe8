package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are set at build time (make build: -ldflags "-X
// github.com/gitbroker/gitbroker/cmd/internal/cli.version=... -X ...cli.commit=..."); otherwise
// they come from the module's build information, when the go command stamped it.
var version, commit string

// BuildVersion is the version and the commit it was built from ("(modified)" when the tree was).
func BuildVersion() (v, c string) {
	v, c = version, commit
	if v != "" && c != "" {
		return v, c
	}
	if c == "" {
		c = "unknown"
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v, c
	}
	if v == "" {
		v = info.Main.Version
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if commit == "" {
				c = s.Value
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && commit == "" {
		c += " (modified)"
	}
	if v == "" {
		v = "(devel)"
	}
	return v, c
}

// VersionCommand is `version` for each of the binaries.
func VersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gitbroker's version, the commit it was built from, and its Go version and platform",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, commit := BuildVersion()
			fmt.Fprintf(cmd.OutOrStdout(), "gitbroker %s\ncommit %s\n%s %s/%s\n", v, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
