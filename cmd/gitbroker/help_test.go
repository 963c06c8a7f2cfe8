package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
)

// commands are gitbroker's own commands (not cobra's help and completion).
func commands(t *testing.T) []*cobra.Command {
	t.Helper()
	var out []*cobra.Command
	for _, c := range newRootCommand(io.Discard, io.Discard).Commands() {
		if c.Name() != "help" && c.Name() != "completion" {
			out = append(out, c)
		}
	}
	require.NotEmpty(t, out)
	return out
}

// Every command's --help has Examples, and every example is a command line its flags parse: an
// example that names a flag the command no longer has fails here.
func TestEveryCommandHasExamplesThatParse(t *testing.T) {
	for _, c := range commands(t) {
		t.Run(c.Name(), func(t *testing.T) {
			require.NotEmpty(t, c.Example, "gitbroker %s --help has no Examples", c.Name())
			lines := 0
			for _, line := range strings.Split(strings.ReplaceAll(c.Example, "\\\n", " "), "\n") {
				line = strings.TrimSpace(line)
				if i := strings.Index(line, " #"); i >= 0 {
					line = line[:i]
				}
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				args := strings.Fields(line)
				require.Equal(t, "gitbroker", args[0], "an example of %s: %q", c.Name(), line)
				root := newRootCommand(io.Discard, io.Discard)
				cmd, rest, err := root.Find(args[1:])
				require.NoError(t, err, "%q", line)
				require.Equal(t, c.Name(), cmd.Name(), "an example of %s runs another command: %q", c.Name(), line)
				require.NoError(t, cmd.ParseFlags(rest), "%q", line)
				require.NoError(t, cmd.ValidateArgs(cmd.Flags().Args()), "%q", line)
				lines++
			}
			require.NotZero(t, lines, "gitbroker %s --help shows no command line", c.Name())
		})
	}
}

// --branch says what each command does with the branch: the read-only commands offer no push
// flags and never say they write, and none says "read and write" (no command writes the people's
// branch); the recorder, which never reads it, marks it deprecated.
func TestBranchFlagSaysWhatTheCommandDoes(t *testing.T) {
	for _, c := range commands(t) {
		f := c.Flags().Lookup(gitsync.FlagBranch)
		if f == nil {
			continue
		}
		assert.NotContains(t, f.Usage, "read and write", c.Name())
		switch c.Name() {
		case "plan", "check", "history":
			assert.Contains(t, f.Usage, "nothing is written", c.Name())
			assert.Nil(t, c.Flags().Lookup(gitsync.FlagPushAttempts), "%s writes nothing but offers --%s", c.Name(), gitsync.FlagPushAttempts)
			assert.Nil(t, c.Flags().Lookup(gitsync.FlagPushTimeout), "%s writes nothing but offers --%s", c.Name(), gitsync.FlagPushTimeout)
		case "record":
			assert.NotEmpty(t, f.Deprecated)
		default:
			assert.Contains(t, f.Usage, "never written", c.Name())
		}
	}
}

// -n is --namespace wherever a command takes one, as in kubectl.
func TestNamespaceShorthand(t *testing.T) {
	found := 0
	for _, c := range commands(t) {
		if f := c.Flags().Lookup(flagNamespace); f != nil {
			assert.Equal(t, "n", f.Shorthand, c.Name())
			found++
		}
	}
	require.Equal(t, 2, found, "history and record take --namespace")
}

// The renderer's --signing-key says what the renderer accepts: OpenSSH, or OpenPGP for Argo CD.
func TestRendererSigningKeyHelp(t *testing.T) {
	for _, c := range commands(t) {
		if c.Name() == "render" {
			u := c.Flags().Lookup("signing-key").Usage
			assert.Contains(t, u, "OpenSSH")
			assert.Contains(t, u, "OpenPGP")
		}
	}
}
