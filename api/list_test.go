package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
)

// What `kubectl get akric -o yaml` prints: a List whose items carry the fields the API server
// sets. Moving from a running Akri starts with it, so it parses as the Configurations it holds.

func TestKubectlListOfAkriConfigurations(t *testing.T) {
	cs, errs := api.ParseConfigurations("configurations/from-akri.yaml", []byte(fixtures.KubectlAkric), "default")
	require.Empty(t, errs)
	require.Len(t, cs, 2)
	require.Equal(t, "default/akri-debug-echo", cs[0].Key())
	require.Equal(t, 2, cs[0].Policy.Capacity)
	require.Equal(t, "default/akri-udev", cs[1].Key())

	// A mistake in an item is named at its line, under items[i].
	bad := strings.Replace(fixtures.KubectlAkric, "image: ghcr.io/project-akri/akri/udev-video-broker:latest", "image: [not, a, string]", 1)
	_, errs = api.ParseConfigurations("configurations/from-akri.yaml", []byte(bad), "default")
	require.Len(t, errs, 1)
	require.Equal(t, "items[1].spec.brokerSpec.brokerPodSpec.containers[0].image", errs[0].Field)
	require.Equal(t, 1+strings.Count(bad[:strings.Index(bad, "image: [not")], "\n"), errs[0].Line)

	_, errs = api.ParseConfigurations("configurations/empty.yaml", []byte("apiVersion: v1\nkind: List\nitems: []\n"), "default")
	require.ErrorContains(t, errs, "an empty List")
}
