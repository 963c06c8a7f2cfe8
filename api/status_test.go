package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
)

// Each kind registers itself from its own file; the table is in the order of the folders, so
// messages list the layouts in one order.
func TestStatusKindsRegisterInFolderOrder(t *testing.T) {
	var kinds []string
	for _, k := range api.StatusKinds {
		kinds = append(kinds, k.Kind)
	}
	require.Equal(t, []string{api.KindJobRecord, api.KindNodeLoss, api.KindRolloutRecord}, kinds)
	require.Equal(t, "status/jobs/<namespace>/<job>.yaml, status/nodes/<node>.yaml and status/rollouts/<namespace>/<deployment>.yaml", api.StatusLayouts())
	for p, want := range map[string]string{
		"status/jobs/plant/job-1.yaml":        api.KindJobRecord,
		"status/nodes/edge-a.yaml":            api.KindNodeLoss,
		"status/rollouts/plant/cam-1.yaml":    api.KindRolloutRecord,
		"status/rollouts/plant/cam-1.yaml.sh": "",
		"status/other/x.yaml":                 "",
	} {
		k, ok := api.StatusKindOf(p)
		require.Equal(t, want != "", ok, p)
		require.Equal(t, want, k.Kind, p)
	}
}

// An agent reads its own entry of a shard's shares line by line: other nodes' entries, lines it
// cannot read and shares that are not positive give it nothing.
func TestSharesOfReadsOnlyTheNodesEntry(t *testing.T) {
	data := []byte(`apiVersion: gitbroker.dev/v1alpha1
kind: DeviceShares
nodes:
  "123":
    cam-1a2b3c: 2
  edge-a:
    cam-1a2b3c: 1
    cam-ffffff: 0
    cam-eeeeee: -1
    cam-dddddd: lots
    plc-abcdef: 3
  edge-b:
    plc-abcdef: 1
`)
	require.Equal(t, map[string]int{"cam-1a2b3c": 1, "plc-abcdef": 3}, api.SharesOf(data, "edge-a"))
	require.Equal(t, map[string]int{"cam-1a2b3c": 2}, api.SharesOf(data, "123"))
	require.Equal(t, map[string]int{"plc-abcdef": 1}, api.SharesOf(data, "edge-b"))
	require.Empty(t, api.SharesOf(data, "edge-c"))
	require.Empty(t, api.SharesOf([]byte("nodes: {edge-a: {cam-1a2b3c: 1}}\n"), "edge-a"), "only the renderer's block form")
}
