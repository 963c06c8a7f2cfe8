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
