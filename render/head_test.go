package render

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
)

// A Job's head is taken from the Job as it is built (jobHead), so that the next render need not
// read it back; it must be exactly what reading it back gives.
func TestJobHeadIsWhatIsReadBack(t *testing.T) {
	const cfg = `apiVersion: gitbroker.dev/v1alpha1
kind: Configuration
metadata:
  name: fw
  annotations:
    gitbroker.dev/log-tail-lines: "20"
spec:
  discoveryHandler:
    name: debugEcho
  brokerProperties:
    VERSION: "1"
  brokerSpec:
    brokerJobSpec:
      template:
        metadata:
          labels:
            team: ops
        spec:
          restartPolicy: Never
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms:
                - matchExpressions:
                  - key: zone
                    operator: In
                    values: [a, b]
                - matchExpressions:
                  - key: tier
                    operator: NotIn
                    values: [x]
          containers:
          - name: flash
            image: busybox
`
	cfgs, errs := api.ParseConfigurations("configurations/fw.yaml", []byte(cfg), "default")
	require.Empty(t, errs)
	for _, nodes := range [][]string{{"edge-a"}, {"edge-a", "edge-b", "edge-c"}} {
		in := &instance{cfg: cfgs[0], name: "fw-abcdef", digest: "abcdef", deviceID: "plc-1", nodes: nodes,
			properties: map[string]string{"DEVICE": "plc-1", "NOTE": "<a & b>"}}
		bj := buildJob(in, nil, "0123456789abcdef", false)
		for _, commit := range []string{"", "4b825dc642cb6eb9a060e54bf8d69288fbee4904"} {
			data, head := bj.bytes(commit)
			read := parseHead(data)
			require.NoError(t, read.err)
			require.Equal(t, read, head, "%s", data)
			require.Equal(t, nodes, head.nodes())
		}
	}
}
