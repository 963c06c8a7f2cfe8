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

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = clone
	cmd.Env = append(os.Environ(), "PATH="+shims+":"+os.Getenv("PATH"), "TMPDIR="+t.TempDir(), "HOME="+t.TempDir(),
		"GIT_CONFIG_NOSYSTEM=1", "NODE_NAME=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the quick start failed:\n%s", out)
	text := string(out)
	require.Contains(t, text, "inventory/edge-a.yaml: 2 device(s), committed")
	require.Contains(t, text, "+ Pod edge-a-akri-debug-echo-8120fe-pod started")
	require.Contains(t, text, "Inputs: verified: every commit on main signed by a person")
	require.Contains(t, text, "to gitbroker/rendered")
	require.Contains(t, text, "**Summary:** 2 Pods replaced")
	require.NotContains(t, text, "untrusted")
}
