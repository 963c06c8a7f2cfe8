package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
)

// What `kubectl get akric -o yaml` prints: a List whose items carry the fields the API server
// sets. Moving from a running Akri starts with it, so it parses as the Configurations it holds.
const kubectlAkric = `apiVersion: v1
items:
- apiVersion: akri.sh/v0
  kind: Configuration
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"akri.sh/v0","kind":"Configuration","metadata":{"annotations":{},"name":"akri-debug-echo","namespace":"default"}}
    creationTimestamp: "2026-11-30T10:00:00Z"
    generation: 1
    name: akri-debug-echo
    namespace: default
    resourceVersion: "4711"
    uid: 0b5b5f9e-5d1c-4a43-9d6c-1c4b1b7e2f01
  spec:
    capacity: 2
    discoveryHandler:
      name: debugEcho
      discoveryDetails: |+
        descriptions:
        - "foo0"
    brokerSpec:
      brokerPodSpec:
        containers:
        - name: akri-debug-echo-broker
          image: nginx:stable-alpine
  status: {}
- apiVersion: akri.sh/v0
  kind: Configuration
  metadata:
    creationTimestamp: "2026-11-30T10:00:01Z"
    generation: 3
    managedFields:
    - apiVersion: akri.sh/v0
      fieldsType: FieldsV1
      manager: kubectl-client-side-apply
      operation: Update
    name: akri-udev
    namespace: default
    resourceVersion: "4712"
    uid: 7f3c2a1e-0000-4000-8000-000000000002
  spec:
    discoveryHandler:
      name: udev
      discoveryDetails: |
        udevRules:
        - KERNEL=="video[0-9]*"
    brokerSpec:
      brokerPodSpec:
        containers:
        - name: akri-udev-video-broker
          image: ghcr.io/project-akri/akri/udev-video-broker:latest
kind: List
metadata:
  resourceVersion: ""
`

func TestKubectlListOfAkriConfigurations(t *testing.T) {
	cs, errs := api.ParseConfigurations("configurations/from-akri.yaml", []byte(kubectlAkric), "default")
	require.Empty(t, errs)
	require.Len(t, cs, 2)
	require.Equal(t, "default/akri-debug-echo", cs[0].Key())
	require.Equal(t, 2, cs[0].Policy.Capacity)
	require.Equal(t, "default/akri-udev", cs[1].Key())

	// A mistake in an item is named at its line, under items[i].
	bad := strings.Replace(kubectlAkric, "image: ghcr.io/project-akri/akri/udev-video-broker:latest", "image: [not, a, string]", 1)
	_, errs = api.ParseConfigurations("configurations/from-akri.yaml", []byte(bad), "default")
	require.Len(t, errs, 1)
	require.Equal(t, "items[1].spec.brokerSpec.brokerPodSpec.containers[0].image", errs[0].Field)
	require.Equal(t, 1+strings.Count(bad[:strings.Index(bad, "image: [not")], "\n"), errs[0].Line)

	_, errs = api.ParseConfigurations("configurations/empty.yaml", []byte("apiVersion: v1\nkind: List\nitems: []\n"), "default")
	require.ErrorContains(t, errs, "an empty List")
}
