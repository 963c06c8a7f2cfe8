package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
)

func jobConfiguration(apiVersion, annotations, policy string) string {
	return `apiVersion: ` + apiVersion + `
kind: Configuration
metadata:
  name: fw
` + annotations + `spec:
  discoveryHandler:
    name: debugEcho
` + policy + `  brokerSpec:
    brokerJobSpec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: flash
            image: busybox
`
}

func TestLogPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, apiVersion, annotations, policy string
		want                                  *api.LogPolicy
		err                                   string
	}{
		{name: "off by default", apiVersion: api.APIVersion},
		{name: "on with the defaults", apiVersion: api.APIVersion, policy: "  jobPolicy:\n    logs: {}\n",
			want: &api.LogPolicy{TailLines: 200, TailBytes: 64 << 10}},
		{name: "off explicitly", apiVersion: api.APIVersion, policy: "  jobPolicy:\n    logs:\n      tailLines: 0\n"},
		{name: "annotations on akri.sh/v0", apiVersion: api.AkriAPIVersion,
			annotations: "  annotations:\n    gitbroker.dev/log-tail-lines: \"50\"\n    gitbroker.dev/log-redact: |\n      token=\\S+\n      secret\n",
			want:        &api.LogPolicy{TailLines: 50, TailBytes: 64 << 10, Redact: []string{`token=\S+`, "secret"}}},
		{name: "too many bytes", apiVersion: api.APIVersion, policy: "  jobPolicy:\n    logs:\n      tailBytes: 2000000\n",
			err: "fw.yaml:10: spec.jobPolicy.logs.tailBytes: must be between 0 and 1048576, got 2000000"},
		{name: "bad pattern", apiVersion: api.APIVersion, policy: "  jobPolicy:\n    logs:\n      redact: ['(x']\n",
			err: "spec.jobPolicy.logs.redact[0]: not a regular expression (RE2)"},
		{name: "bad annotation", apiVersion: api.AkriAPIVersion, annotations: "  annotations:\n    gitbroker.dev/log-tail-lines: lots\n",
			err: `metadata.annotations.gitbroker.dev/log-tail-lines: expected an integer, got "lots"`},
		{name: "both", apiVersion: api.APIVersion, annotations: "  annotations:\n    gitbroker.dev/log-tail-lines: \"5\"\n", policy: "  jobPolicy:\n    logs: {}\n",
			err: "conflict with spec.jobPolicy.logs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, errs := api.ParseConfigurations("configurations/fw.yaml", []byte(jobConfiguration(tc.apiVersion, tc.annotations, tc.policy)), "default")
			if tc.err != "" {
				require.NotEmpty(t, errs)
				require.Contains(t, errs.Error(), tc.err)
				return
			}
			require.Empty(t, errs)
			require.Equal(t, tc.want, cs[0].Policy.Logs)
			// What the renderer puts on the Job reads back as the same policy in the recorder.
			back, err := api.LogPolicyFromAnnotations(cs[0].Policy.Logs.Annotations())
			require.NoError(t, err)
			require.Equal(t, tc.want, back)
		})
	}
}

func TestJobRecordBounds(t *testing.T) {
	rec := func(pods string) string {
		return "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: j\n  namespace: plant\nspec:\n  configuration: fw\n  instance: fw-abcdef\n  deviceID: d\n  outcome: Failed\n  succeeded: 0\n  failed: 1\n" + pods
	}
	_, errs := api.ParseJobRecordFile("status/jobs/plant/j.yaml", []byte(rec("  pods:\n  - name: p\n    node: edge-a\n    containers:\n    - name: c\n      exitCode: 1\n      log: |\n        boom\n")))
	require.Empty(t, errs)
	_, errs = api.ParseJobRecordFile("status/jobs/plant/j.yaml", []byte(rec("  pods:\n  - name: p\n    containers:\n    - name: c\n      log: \""+strings.Repeat("x", api.MaxLogTailBytes+1)+"\"\n")))
	require.ErrorContains(t, errs, "spec.pods[0].containers[0].log: a tail may be at most 1048576 bytes")
	_, errs = api.ParseJobRecordFile("status/jobs/plant/j.yaml", []byte(rec("  pods:\n  - name: p\n    containers:\n    - name: c\n      logBase64: '***'\n")))
	require.ErrorContains(t, errs, "spec.pods[0].containers[0].logBase64: not base64")
	_, errs = api.ParseJobRecordFile("status/jobs/plant/j.yaml", []byte(rec("  pods:\n  - node: edge-a\n")))
	require.ErrorContains(t, errs, "spec.pods[0].name: required")
}
