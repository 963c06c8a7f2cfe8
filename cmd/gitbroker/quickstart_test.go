package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's quick start, run as written: the shell block under "## Quick start", from a
// folder holding bin/gitbroker as make build leaves it (make itself is a stand-in here, since
// the test already built the binary).
func TestQuickStart(t *testing.T) {
	text := runQuickStart(t, "")
	require.Contains(t, text, "inventory/edge-a.yaml: 2 device(s), committed")
	require.Contains(t, text, "+ Deployment edge-a-akri-debug-echo-8120fe created")
	require.Contains(t, text, "Inputs: verified: every commit on main signed by a person")
	require.Contains(t, text, "to gitbroker/rendered")
	require.Contains(t, text, "**Summary:** 2 Deployments rolled out")
	require.NotContains(t, text, "untrusted")
}

// The quick start's repository, on as a team goes on with it: the pull request is merged by
// the git host with its OpenPGP key, which plan warned about until the key was listed; then
// someone pushes an unsigned commit, which stops the people's part of rendering at its parent
// until a person's signed commit accepts it. Nothing is rewritten.
func TestQuickStartSurvivesHostMergesAndUnsignedCommits(t *testing.T) {
	_, err := exec.LookPath("gpg")
	require.NoError(t, err, "the host's merge is signed with gpg: apt-get install gnupg (.ci/run does)")
	text := runQuickStart(t, `
echo "--- plan before the host's key is listed"
gitbroker plan --git "$R" --ref more-memory
export GNUPGHOME=$(mktemp -d) && trap 'gpgconf --kill gpg-agent' EXIT
gpg -q --batch --pinentry-mode loopback --passphrase '' --quick-gen-key "Git host <noreply@host.example>" ed25519 sign never
git switch -q main && mkdir -p .gitbroker/trusted-keys && gpg --armor --export noreply@host.example > .gitbroker/trusted-keys/host.asc
git add .gitbroker && git commit -qm "trust the git host's merge key" && git push -q "$R" main
echo "--- plan after"
gitbroker plan --git "$R" --ref more-memory
git -c gpg.format=openpgp -c user.signingkey=noreply@host.example merge -q --no-ff -S -m "Merge pull request #1 from more-memory" more-memory
git push -q "$R" main
echo "--- render of the host's merge"
gitbroker render --git "$R" --signing-key ../renderer
echo "# unsigned" >> configurations/akri-debug-echo.yaml && sed -i 's/memory: 16Mi/memory: 24Mi/' configurations/akri-debug-echo.yaml
git -c commit.gpgsign=false commit -qam "an unsigned commit" && git push -q "$R" main
echo "--- render of the unsigned commit"
gitbroker render --git "$R" --signing-key ../renderer && exit 1 || echo "render exit $?"
git commit -q --allow-empty -m "accept the unsigned commit" --trailer "Gitbroker-Accept: $(git rev-parse HEAD)" && git push -q "$R" main
echo "--- render of the acceptance"
gitbroker render --git "$R" --signing-key ../renderer
`)
	before, after, ok := strings.Cut(text, "--- plan after")
	require.True(t, ok, text)
	require.Contains(t, before, "a merge commit the git host makes for it would stop rendering")
	require.NotContains(t, after[:strings.Index(after, "--- render of the host's merge")], "a merge commit the git host makes")
	_, merged, _ := strings.Cut(text, "--- render of the host's merge")
	merged, unsigned, _ := strings.Cut(merged, "--- render of the unsigned commit")
	unsigned, accepted, _ := strings.Cut(unsigned, "--- render of the acceptance")
	require.Contains(t, merged, "memory: 10Mi → 16Mi", "the host's signed merge renders")
	require.NotContains(t, merged, "untrusted")
	require.Contains(t, unsigned, "is not signed by a person")
	require.Contains(t, unsigned, "render exit")
	require.NotContains(t, unsigned, "24Mi")
	require.Contains(t, accepted, "memory: 16Mi → 24Mi", "the accepted commit renders")
	require.NotContains(t, accepted, "untrusted")
}

// runQuickStart runs the README's quick start as written, then more (a script run in the same
// shell, in the fleet's work tree), and returns everything they printed.
func runQuickStart(t *testing.T, more string) string {
	for _, tool := range []string{"bash", "ssh-keygen", "sed", "cut", "mktemp"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the quick start needs %s", tool)
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "\n## Quick start\n")
	require.True(t, ok, "the README has a quick start")
	_, block, ok := strings.Cut(after, "```sh\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	commands := 0
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			commands++
		}
	}
	require.LessOrEqual(t, commands, 17, "a quick start stays short")

	clone := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(clone, "bin"), 0o755))
	data, err := os.ReadFile(binary(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(clone, "bin", "gitbroker"), data, 0o755))
	shims := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(shims, "make"), []byte("#!/bin/sh\ntest \"$1\" = build\n"), 0o755))

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block+more)
	cmd.Dir = clone
	cmd.Env = append(os.Environ(), "PATH="+shims+":"+os.Getenv("PATH"), "TMPDIR="+t.TempDir(), "HOME="+t.TempDir(),
		"GIT_CONFIG_NOSYSTEM=1", "NODE_NAME=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the quick start failed:\n%s", out)
	return string(out)
}

// DEPLOYING's step 1, for a host that protects the branch and merges without signing: its
// trust.yaml block, run as written in the fleet repository and committed signed, lets the host's
// unsigned merge render.
func TestDeployingProtectedBranchRendersUnsignedMerges(t *testing.T) {
	block := docBlock(t, "../../docs/DEPLOYING.md", "sourceBranch: protected")
	text := runQuickStart(t, `
git switch -q main && export FLEET=$PWD
`+block+`
git add .gitbroker/trust.yaml && git commit -qm "the host protects main" && git push -q "$R" main
git -c commit.gpgsign=false merge -q --no-ff -m "Merge pull request #1 from more-memory" more-memory
git push -q "$R" main
echo "--- render of the host's unsigned merge"
gitbroker render --git "$R" --signing-key ../renderer
`)
	_, merged, ok := strings.Cut(text, "--- render of the host's unsigned merge")
	require.True(t, ok, text)
	require.Contains(t, merged, "memory: 10Mi → 16Mi", "the unsigned merge renders")
	require.Contains(t, merged, "declares the branch protected by its host")
	require.NotContains(t, merged, "untrusted")
}

// docBlock is the one shell block of a document that contains marker.
func docBlock(t *testing.T, doc, marker string) string {
	t.Helper()
	data, err := os.ReadFile(doc)
	require.NoError(t, err)
	var found []string
	for _, b := range strings.Split(string(data), "```sh\n")[1:] {
		b, _, ok := strings.Cut(b, "```")
		require.True(t, ok, "an unclosed shell block in %s", doc)
		if strings.Contains(b, marker) {
			found = append(found, b)
		}
	}
	require.Len(t, found, 1, "%s's shell blocks with %q", doc, marker)
	return found[0]
}
