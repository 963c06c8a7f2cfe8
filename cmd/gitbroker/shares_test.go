package main

import (
	"testing"

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
// renderer signed. A share forged on the shard branch changes nothing: the agent keeps the
// shares it read last. An agent that reads no shares offers none of a shared device.
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
		// The demo's akri-debug-echo: capacity 2, one camera both nodes see.
		s.nodes[node].set("default/akri-debug-echo", "shared:cam")
	}
	sync := func() {
		t.Helper()
		for _, node := range []string{"edge-a", "edge-b"} {
			_, err := agents[node].Sync(t.Context())
			require.NoError(t, err)
		}
	}
	sync()
	inst := ""
	for name := range plugins["edge-a"].offered() {
		inst = name
	}
	require.NotEmpty(t, inst)
	// Before the renderer placed it, neither node offers the shared camera.
	require.Equal(t, map[string]int{inst: 0}, plugins["edge-a"].offered())
	require.Equal(t, map[string]int{inst: 0}, plugins["edge-b"].offered())

	s.renderTrust()
	sync()
	// A broker on each node, one slot each: two in all, the camera's capacity.
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-a"].offered())
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-b"].offered())

	// edge-b's key is stolen: a share of the whole capacity committed on its shard branch.
	shard := api.AcceptedShard(api.InventoryBranch("edge-b"))
	s.forge("node:edge-b", api.AcceptedBranch(api.InventoryBranch("edge-b")), map[string][]byte{
		api.SharesFile(shard): []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: DeviceShares\nnodes:\n  edge-b:\n    " + inst + ": 2\n"),
	})
	sync()
	require.Equal(t, map[string]int{inst: 1}, plugins["edge-b"].offered(), "a forged share is not read")
}
