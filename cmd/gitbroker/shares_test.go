package main

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/publication"
)

// offered is what an agent's device plugin last offered of each instance: its slots less
// those other nodes offer.
func (s *pluginSink) offered() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, in := range s.last {
		out[in.Name] = in.Capacity - in.Elsewhere
	}
	return out
}

// A shared device's capacity is offered once across the nodes that see it: each agent offers
// the share the renderer published for its node, read from its shard only at a commit the
// renderer signed. A share forged on the shard branch, an older shard of the renderer's put
// back, and the shard deleted change nothing: the agent keeps the shares it read last. An agent
// that reads no shares offers none of a shared device.
func TestSharedDeviceIsOfferedOnceAcrossNodes(t *testing.T) {
	s := newSignedLoop(t)
	keys, err := publication.ParseRendererKeys("renderer.pub", []byte(s.allowed))
	require.NoError(t, err)
	plugins := map[string]*pluginSink{}
	agents := map[string]*agent.Agent{}
	for _, node := range []string{"edge-a", "edge-b"} {
		plugins[node] = &pluginSink{}
		store, _ := s.refs.agent(node, gitsync.WithSigner(s.keys["node:"+node]), gitsync.WithOwnHistory())
		shard := s.refs.open(api.AcceptedBranch(api.InventoryBranch(node)))
		a, err := agent.New(agent.Options{Node: node, Store: store, Configurations: s.refs.published(s.allowed),
			Handlers: agent.Builtin{"debugEcho": s.nodes[node]}, Log: logr.Discard(), Devices: plugins[node],
			Shares: publication.Shares(shard, keys, node)})
		require.NoError(t, err)
		agents[node] = a
	}
	sync := func() {
		t.Helper()
		for _, node := range []string{"edge-a", "edge-b"} {
			_, err := agents[node].Sync(t.Context())
			require.NoError(t, err)
		}
	}
	// The demo's akri-debug-echo: capacity 2, one camera, first seen by edge-b alone.
	s.nodes["edge-b"].set("default/akri-debug-echo", "shared:cam")
	sync()
	inst := ""
	for name := range plugins["edge-b"].offered() {
		inst = name
	}
	require.NotEmpty(t, inst)
	require.Equal(t, map[string]int{inst: 0}, plugins["edge-b"].offered(), "before the renderer placed it, no slot")
	s.renderTrust()
	sync()
	require.Equal(t, map[string]int{inst: 2}, plugins["edge-b"].offered(), "the only node that sees it offers its capacity")
	branch := api.AcceptedBranch(api.InventoryBranch("edge-b"))
	older := s.srv.On(branch).Head()

	// edge-a sees the camera too: a broker on each node, one slot each, two in all.
	time.Sleep(1100 * time.Millisecond) // the next shard commit a second later
	s.nodes["edge-a"].set("default/akri-debug-echo", "shared:cam")
	sync()
	s.renderTrust()
	sync()
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-a"].offered())
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-b"].offered())

	// edge-b's key is stolen: a share of the whole capacity committed on its shard branch.
	shard := api.AcceptedShard(api.InventoryBranch("edge-b"))
	current, _ := s.srv.On(branch).File(api.SharesFile(shard))
	s.forge("node:edge-b", branch, map[string][]byte{
		api.SharesFile(shard): []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: DeviceShares\nnodes:\n  edge-b:\n    " + inst + ": 2\n"),
	})
	sync()
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-b"].offered(), "a forged share is not read")
	// The renderer's own older shard put back, which gave edge-b both slots.
	s.srv.SetRef(branch, older)
	sync()
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-b"].offered(), "an older shard is not read")
	// The shard deleted.
	s.srv.SetRef(branch, "")
	sync()
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-b"].offered(), "a deleted shard takes no slot away")
	// The renderer's next render puts the shard back.
	s.renderTrust()
	restored, _ := s.srv.On(branch).File(api.SharesFile(shard))
	require.Equal(t, current, restored, "the shard's shares as the renderer left them")
	sync()
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-b"].offered())
}
