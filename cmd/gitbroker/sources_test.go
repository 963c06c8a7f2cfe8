package main

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/verify"
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
		namespace = api.FolderBranchPrefix + render.NamespacesKustomization
	)
	require.Equal(t, map[string]string{
		echo:                 "rendered/default/akri-debug-echo",
		firmware:             "rendered/plant/plc-firmware",
		namespace:            "rendered/_namespaces",
		api.FluxFolderBranch: "rendered/flux",
	}, render.Companions(out.Result.Files))
	// With them move the accepted tips' shards, one for each writer's shard, which every
	// render has.
	accepted := render.AcceptedCompanions(out.Result.Files)
	meta, _ := s.rendered().File(render.MetadataPath)
	writers := render.ParseMetadata([]byte(meta)).Writers
	require.NotEmpty(t, writers)
	for ref := range writers {
		require.Contains(t, accepted, api.AcceptedBranch(ref))
	}
	require.LessOrEqual(t, len(accepted), len(writers))
	require.Equal(t, 4+len(accepted), out.Push.CompanionsMoved)
	tips := map[string]string{}
	all := render.Companions(out.Result.Files)
	maps.Copy(all, accepted)
	for b, folder := range all {
		tips[b] = s.srv.On(b).Head()
		msg, err := s.srv.VerifyCommit(tips[b], s.allowed)
		require.NoError(t, err, msg)
		require.Contains(t, msg, `Good "git" signature for renderer`)
		// The branch shows its folder, as the rendered branch has it, and nothing else.
		files := s.srv.On(b).Files()
		require.NotEmpty(t, files)
		for _, f := range files {
			require.True(t, strings.HasPrefix(f, folder+"/"), "%s shows %s", b, f)
			want, _ := s.rendered().File(f)
			got, _ := s.srv.On(b).File(f)
			require.Equal(t, want, got, f)
		}
	}

	// One more device on edge-a: one folder changes, one folder branch moves (and edge-a's
	// accepted tip, on its shard's branch).
	s.nodes["edge-a"].set("default/akri-debug-echo", "bar0", "bar1")
	s.discover()
	out = s.renderTrust()
	require.NotEmpty(t, out.Commit)
	require.ElementsMatch(t, []string{echo, api.AcceptedBranch(verify.InventoryBranch("edge-a"))}, out.Push.CompanionBranches)
	require.NotEqual(t, tips[echo], s.srv.On(echo).Head())
	for _, b := range []string{firmware, namespace, api.FluxFolderBranch} {
		require.Equal(t, tips[b], s.srv.On(b).Head(), "%s did not change", b)
	}
	require.Len(t, s.srv.On(echo).Files(), len(s.srv.On(verify.RenderedBranch).Files())-len(filesOutside(s, "rendered/default/akri-debug-echo/")), "the folder with the new device's Pod")
	bar1 := false
	for _, f := range s.srv.On(echo).Files() {
		got, _ := s.srv.On(echo).File(f)
		bar1 = bar1 || strings.Contains(got, "bar1")
	}
	require.True(t, bar1, "the new device's Pod is on its folder's branch")

	// A stolen node credential moves a folder's branch to a commit of its own, with the same
	// folder, and plants another: the next render, with nothing to commit, puts both right.
	forged := s.forge("node:edge-a", firmware, map[string][]byte{"configurations/x.yaml": []byte("x: 1\n")})
	s.forge("node:edge-a", api.FolderBranchPrefix+"planted", map[string][]byte{"rendered/x.yaml": []byte("x: 1\n")})
	require.Equal(t, forged, s.srv.On(firmware).Head())
	out = s.renderTrust()
	require.Equal(t, "", out.Commit)
	require.Equal(t, 2, out.Push.CompanionsMoved)
	repaired := s.srv.On(firmware).Head()
	require.NotEqual(t, forged, repaired)
	msg, err := s.srv.VerifyCommit(repaired, s.allowed)
	require.NoError(t, err, msg)
	require.Contains(t, msg, `Good "git" signature for renderer`)
	require.NotContains(t, s.srv.On(firmware).Files(), "configurations/x.yaml")
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

// filesOutside lists the rendered branch's files that are not under folder.
func filesOutside(s *signedLoop, folder string) []string {
	var out []string
	for _, f := range s.rendered().Files() {
		if !strings.HasPrefix(f, folder) {
			out = append(out, f)
		}
	}
	return out
}
