package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/verify"
)

// TestPlanExitsAsRenderDoes: a CI gate runs plan, the renderer runs render; for the same inputs
// they must agree. plan used to exit 0 on a writer's ref that is not trusted while render exited
// 1, and 2 before 1 when a render was also refused.
func TestPlanExitsAsRenderDoes(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	codes := func() [2]int {
		t.Helper()
		plan, _, stderr := gitbroker(t, "plan", "--git", s.srv.URL())
		t.Logf("plan: %s", stderr)
		render, _, stderr := gitbroker(t, "render", "--git", s.srv.URL(), "--signing-key", s.keyFiles["renderer"])
		t.Logf("render %d: %q", render, stderr)
		return [2]int{plan, render}
	}
	require.Equal(t, [2]int{exitOK, exitOK}, codes())

	edgeB := s.renderedFile(api.InventoryPath("edge-b"))
	s.forge("node:edge-a", verify.InventoryBranch("edge-b"), map[string][]byte{
		api.InventoryPath("edge-b"): []byte(strings.ReplaceAll(edgeB, "baz0", "evil0")),
	})
	require.Equal(t, [2]int{exitRefused, exitRefused}, codes(), "an untrusted ref")

	cfg := string(s.mustFile("configurations/akri-debug-echo.yaml"))
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{
		"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "nginx:stable-alpine", "nginx:latest:v2", 1),
	}, nil, "an image the kubelet cannot parse")
	require.Equal(t, [2]int{exitInvalid, exitInvalid}, codes(), "an invalid Configuration as well")
}

// TestFolderInInventoryIsReported: a work tree's inventory/edge-a.yaml/ folder (empty, or holding
// the node's file one level too deep) is an invalid input naming it; edge-a keeps its brokers,
// and plan and render both exit 2.
func TestFolderInInventoryIsReported(t *testing.T) {
	for _, moved := range []bool{false, true} {
		dir := demoRepo(t)
		before := owned(t, dir)
		file := filepath.Join(dir, "inventory", "edge-a.yaml")
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, os.Remove(file))
		require.NoError(t, os.Mkdir(file, 0o755))
		if moved {
			require.NoError(t, os.WriteFile(filepath.Join(file, "edge-a.yaml"), data, 0o644))
		}
		for _, command := range []string{"plan", "render"} {
			code, stdout, stderr := gitbroker(t, command, "--dir", dir)
			require.Equal(t, exitInvalid, code, "%s: %s", command, stderr)
			require.Contains(t, stdout, "inventory/edge-a.yaml: a folder", command)
		}
		require.True(t, render.Equal(before, owned(t, dir)), "edge-a keeps what it rendered")
	}
}
