package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
)

const folderSources = `apiVersion: gitbroker.dev/v1alpha1
kind: Settings
spec:
  flux:
    folderSources:
      url: https://git.example.com/fleet/edge.git
`

// With spec.flux.folderSources, each rendered folder's GitRepository follows a branch that the
// renderer moves, in the push of its own signed commit, only when that folder changes; a branch
// moved by anyone else is put back, and the branches go when the setting does.
func TestFolderSourceBranches(t *testing.T) {
	s := newSignedLoop(t)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{api.SettingsPath: folderSources}, nil, "one source per folder")
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0")
	s.nodes["edge-a"].set("plant/plc-firmware", "shared:plc-1")
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	const (
		echo      = api.FolderBranchPrefix + "gitbroker-default-akri-debug-echo"
		firmware  = api.FolderBranchPrefix + "gitbroker-plant-plc-firmware"
		namespace = api.FolderBranchPrefix + "gitbroker-namespaces"
	)
	require.Equal(t, map[string]string{
		echo:                 "rendered/default/akri-debug-echo",
		firmware:             "rendered/plant/plc-firmware",
		namespace:            "rendered/_namespaces",
		api.FluxFolderBranch: "rendered/flux",
	}, render.Companions(out.Result.Files))
	first := s.rendered().Head()
	require.Equal(t, 4, out.Push.CompanionsMoved)
	for _, b := range []string{echo, firmware, namespace, api.FluxFolderBranch} {
		require.Equal(t, first, s.srv.On(b).Head(), b)
	}
	msg, err := s.srv.VerifyCommit(s.srv.On(echo).Head(), s.allowed)
	require.NoError(t, err, msg)
	require.Contains(t, msg, `Good "git" signature for renderer`)

	// One more device on edge-a: one folder changes, one branch moves.
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0", "bar1")
	s.discover()
	out = s.renderTrust()
	second := s.rendered().Head()
	require.NotEqual(t, first, second)
	require.Equal(t, 1, out.Push.CompanionsMoved)
	require.Equal(t, second, s.srv.On(echo).Head())
	require.Equal(t, first, s.srv.On(firmware).Head())
	require.Equal(t, first, s.srv.On(namespace).Head())
	require.Equal(t, first, s.srv.On(api.FluxFolderBranch).Head(), "no Flux object changed")

	// A stolen node credential moves a folder's branch to a commit of its own, with the same
	// folder, and plants another: the next render, with nothing to commit, puts both right.
	forged := s.forge("node:edge-a", firmware, map[string][]byte{"configurations/x.yaml": []byte("x: 1\n")})
	s.forge("node:edge-a", api.FolderBranchPrefix+"planted", map[string][]byte{"rendered/x.yaml": []byte("x: 1\n")})
	require.Equal(t, forged, s.srv.On(firmware).Head())
	out = s.renderTrust()
	require.Equal(t, "", out.Commit)
	require.Equal(t, 2, out.Push.CompanionsMoved)
	require.Equal(t, second, s.srv.On(firmware).Head())
	require.Equal(t, "", s.srv.On(api.FolderBranchPrefix+"planted").Head())

	// Without the setting, the sources and their branches go in the same push.
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], nil, []string{api.SettingsPath}, "one source for all")
	out = s.renderTrust()
	require.NotEmpty(t, out.Commit)
	require.Empty(t, render.Companions(out.Result.Files))
	for _, b := range []string{echo, firmware, namespace, api.FluxFolderBranch} {
		require.Equal(t, "", s.srv.On(b).Head(), b)
	}
}
