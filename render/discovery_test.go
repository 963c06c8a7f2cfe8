package render_test

import (
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/render"
)

// TestDiscoveryInReview: what a Configuration asks the agents to discover renders no object, so
// plan said "No changes." to a handler name no agent serves, to udev rules every agent refuses,
// and to a changed rule that replaces brokers once the agents rediscover.
func TestDiscoveryInReview(t *testing.T) {
	udev := strings.Replace(podConfig, "    name: onvif\n", "    name: udev\n    discoveryDetails: |\n      udevRules:\n      - 'KERNEL==\"video[0-9]*\"'\n", 1)
	tree := repo(map[string]string{
		"configurations/cam.yaml": udev,
		"inventory/edge-a.yaml":   strings.ReplaceAll(inventory("edge-a", entry("cam", "c1")), "ONVIF_", "UDEV_"),
	})
	tree = apply(tree, renderOK(t, tree))
	before := tree.Owned()
	warnings := func(res *render.Result) string { return strings.Join(res.Plan.Warnings, "\n") }

	t.Run("an unknown handler is a warning naming the line and the known ones", func(t *testing.T) {
		typo := maps.Clone(tree)
		typo["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "name: onvif", "name: onvf", 1))
		typo["inventory/edge-a.yaml"] = []byte(strings.ReplaceAll(string(typo["inventory/edge-a.yaml"]), "UDEV_", "ONVF_"))
		res := render.Render(render.Request{Files: typo})
		require.Empty(t, res.Errors)
		line := strings.Count(podConfig[:strings.Index(podConfig, "name: onvif")], "\n") + 1
		require.Contains(t, warnings(res), "configurations/cam.yaml:"+strconv.Itoa(line)+": spec.discoveryHandler.name: no discovery handler \"onvf\" is known")
		require.Contains(t, warnings(res), `did you mean "onvif"?`)
		require.Contains(t, warnings(res), "known: debugEcho, onvif, opcua, udev")

		// Listed in gitbroker.yaml, a handler of one's own is known.
		typo["gitbroker.yaml"] = []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  discoveryHandlers: [onvf]\n")
		res = render.Render(render.Request{Files: typo})
		require.NotContains(t, warnings(res), "onvf")
	})

	t.Run("details the agent refuses are an input error, and the output is kept", func(t *testing.T) {
		bad := maps.Clone(tree)
		bad["configurations/cam.yaml"] = []byte(strings.Replace(udev, `'KERNEL=="video[0-9]*"'`, `'KERNEL="video[0-9]*"'`, 1))
		res := render.Render(render.Request{Files: bad})
		require.Len(t, res.Errors, 1, res.Errors.Error())
		require.Equal(t, "spec.discoveryHandler.discoveryDetails", res.Errors[0].Field)
		require.Contains(t, res.Errors[0].Message, "is an assignment; discovery rules only match with == or !=")
		require.True(t, render.Equal(before, res.Files.Owned()))
	})

	t.Run("a changed rule says brokers will be replaced once agents rediscover", func(t *testing.T) {
		changed := maps.Clone(tree)
		changed["configurations/cam.yaml"] = []byte(strings.Replace(udev, `video[0-9]*`, `video[0-1]`, 1))
		res := render.Render(render.Request{Files: changed})
		require.Empty(t, res.Errors)
		require.Contains(t, planText(res.Plan), "brokers will be replaced once agents rediscover")
		require.Equal(t, []string{render.MetadataPath}, res.Diff, "only the metadata file changes now")
		// Rendered again, it is the same: the note is said once.
		res = render.Render(render.Request{Files: apply(changed, res)})
		require.NotContains(t, planText(res.Plan), "rediscover")
		require.Empty(t, res.Diff)
	})
}
