package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/verify"
)

// The attacks of the trust review (issue "Trust, as attacked"), one test each, played with one
// node's key and the shared git credential against the real git server. Each test fails on the
// code before its fix.

// untrusted fails the test unless the render reported an untrusted input of ref saying why.
func (s *signedLoop) untrusted(out remoteOutcome, ref, why string) {
	s.t.Helper()
	for _, u := range out.Result.Untrusted {
		if strings.HasPrefix(u, ref+":") && strings.Contains(u, why) {
			return
		}
	}
	s.t.Fatalf("no untrusted input for %s saying %q in:\n%s", ref, why, s.plan(out))
}

// inventoryWith returns whether the rendered branch's mirrored inventory of node mentions s.
func (s *signedLoop) inventoryWith(node, substr string) bool {
	return strings.Contains(s.renderedFile(api.InventoryPath(node)), substr)
}

// Finding 1: a folder branch's commit, which the renderer's key signed too, pushed onto
// gitbroker/rendered. Taken for the previous render, it had no metadata: the accepted tips were
// dropped, so a node's old commit, refused before, became acceptable again.
func TestAttackFolderCommitIsNotAPreviousRender(t *testing.T) {
	s := newSignedLoop(t)
	s.srv.CommitSigned(s.keyFiles["alice@example.com"], map[string]string{api.SettingsPath: "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  flux:\n    folderSources:\n      url: https://git.example.com/fleet/edge.git\n"}, nil, "folder sources")
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	oldB := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	out := s.renderTrust()
	require.Empty(t, out.Result.Untrusted, s.plan(out))
	render := s.rendered().Head()

	var folder string
	for ref, hash := range s.srv.Heads() {
		if strings.HasPrefix(ref, api.FolderBranchPrefix) {
			folder = hash
		}
	}
	require.NotEmpty(t, folder, "folder sources make folder branches")
	msg, err := s.srv.VerifyCommit(folder, s.allowed)
	require.NoError(t, err, "the folder commit is the renderer's own signature: %s", msg)

	s.srv.SetRef(verify.RenderedBranch, folder)
	s.srv.SetRef(verify.InventoryBranch("edge-b"), oldB)
	// A renderer that starts now (a one-shot render) has only the branch, which holds no render
	// of its own: it refuses to render rather than start over without the tips it accepted.
	fresh := s.refs.renderer(s.keys["renderer"])
	_, err = fresh.once(t.Context())
	require.ErrorContains(t, err, "no render commit on gitbroker/rendered is signed by this renderer's key")
	require.Equal(t, folder, s.rendered().Head())

	// The daemon knows the commit it pushed last: it reports the branch and renders over it.
	out = s.renderTrust()
	s.untrusted(out, verify.RenderedBranch, "this renderer pushed "+render[:12]+" last")
	s.untrusted(out, verify.InventoryBranch("edge-b"), "does not descend from")
	require.True(t, s.inventoryWith("edge-b", "baz1"), "the replayed inventory is not rendered")
	require.False(t, s.inventoryWith("edge-b", "baz0"))

	// A folder commit on top of the renderer's own render is not taken for a render either.
	s.srv.SetRef(verify.RenderedBranch, render)
	onTop := s.forge("renderer", verify.RenderedBranch, map[string][]byte{"rendered/kustomization.yaml": []byte("resources: []\n")})
	out, err = s.refs.renderer(s.keys["renderer"]).once(t.Context())
	require.NoError(t, err)
	s.untrusted(out, verify.RenderedBranch, onTop[:12]+" is not a render signed by this renderer; everything after its own commit "+render[:12])
	require.NotEqual(t, "resources: []\n", s.renderedFile("rendered/kustomization.yaml"))
}

// Finding 1: an older render of the renderer's own pushed back onto gitbroker/rendered. The
// daemon adopted it silently, with the writers' tips it had accepted then: a node's replay,
// refused by the newer render, was rendered.
func TestAttackRolledBackRenderIsNotAdopted(t *testing.T) {
	s := newSignedLoop(t)
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz0")
	s.discover()
	s.renderTrust()
	older := s.rendered().Head()
	oldB := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	s.nodes["edge-b"].set("default/akri-debug-echo", "baz1")
	s.discover()
	s.renderTrust()
	last := s.rendered().Head()
	newB := s.srv.On(verify.InventoryBranch("edge-b")).Head()
	require.NotEqual(t, older, last)

	s.srv.SetRef(verify.RenderedBranch, older)
	s.srv.SetRef(verify.InventoryBranch("edge-b"), oldB)
	out := s.renderTrust()
	s.untrusted(out, verify.RenderedBranch, "this renderer pushed "+last[:12]+" last, and the branch is at "+older[:12])
	s.untrusted(out, verify.InventoryBranch("edge-b"), "does not descend from")
	require.NotEmpty(t, out.Commit, "the render repairs the branch")
	require.True(t, s.inventoryWith("edge-b", "baz1"), "the replay is not rendered")

	// An orphan commit of the renderer's (or any) in place of the branch: the same.
	s.srv.SetRef(verify.RenderedBranch, "")
	out = s.renderTrust()
	s.untrusted(out, verify.RenderedBranch, "the branch is gone")
	require.True(t, s.inventoryWith("edge-b", "baz1"))
	s.srv.SetRef(verify.InventoryBranch("edge-b"), newB)
	out = s.renderTrust()
	require.Empty(t, out.Result.Untrusted, "repaired within one render: %s", s.plan(out))
}
