package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
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

// versionInfo is version's -o json and -o yaml output.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// VersionCommand is `version` for each of the binaries.
func VersionCommand() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version, the commit it was built from, and its Go version and platform",
		Example: `  gitbroker version
  gitbroker version -o json     # {"version": ..., "commit": ..., "goVersion": ..., "platform": ...}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, commit := BuildVersion()
			info := versionInfo{Version: v, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			switch format {
			case "text":
				// The binary's own name: gitbroker, or gitbroker-agent on an edge node.
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\ncommit %s\n%s %s\n", cmd.Root().Name(), info.Version, info.Commit, info.GoVersion, info.Platform)
				return nil
			case "json", "yaml":
				b, err := json.MarshalIndent(info, "", "  ")
				if err == nil && format == "yaml" {
					b, err = yaml.JSONToYAML(b)
				} else {
					b = append(b, '\n')
				}
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			return Exitf(ExitInvalid, "--output must be text, json or yaml, got %q", format)
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "text", "output format: text, json or yaml")
	return cmd
}
