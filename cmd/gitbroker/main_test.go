package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

// demoRepo writes the embedded demo repository to a temporary directory and renders it.
func demoRepo(t *testing.T) string {
	t.Helper()
	tree, err := readFS(fixtures.Demo())
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, writeAll(dir, tree))
	code, _, stderr := gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	return dir
}

func demoFile(t *testing.T, p string) string {
	t.Helper()
	data, err := fs.ReadFile(fixtures.Demo(), p)
	require.NoError(t, err)
	return string(data)
}

func gitbroker(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func owned(t *testing.T, dir string) render.Tree {
	t.Helper()
	tree, _, err := readTree(dir)
	require.NoError(t, err)
	return tree.Owned()
}

func TestBadInputKeepsPreviousOutput(t *testing.T) {
	const (
		echo   = "configurations/akri-debug-echo.yaml"
		fw     = "configurations/plc-firmware.yaml"
		format = "configurations/journal-format.yaml"
		edgeA  = "inventory/edge-a.yaml"
	)
	replace := func(old, new string) func(string) string {
		return func(s string) string {
			if !strings.Contains(s, old) {
				panic("test input does not contain " + old)
			}
			return strings.Replace(s, old, new, 1)
		}
	}
	content := func(c string) func(string) string { return func(string) string { return c } }
	cases := []struct {
		name  string
		file  string
		edit  func(string) string
		field string // the message names this field (or, for YAML errors, this text)
	}{
		{"unknown container field", echo, replace("image: ", "imagee: "), "spec.brokerSpec.brokerPodSpec.containers[0].imagee"},
		{"mistyped capacity", echo, replace("capacity: 2", "capacity: two"), "spec.capacity"},
		{"capacity zero", echo, replace("capacity: 2", "capacity: 0"), "spec.capacity"},
		{"invalid name", echo, replace("name: akri-debug-echo\n", "name: Akri_Echo\n"), "metadata.name"},
		{"property key not an env name", echo, replace("  capacity: 2", "  brokerProperties:\n    bad-key: x\n  capacity: 2"), "spec.brokerProperties.bad-key"},
		{"service port out of range", echo, replace("port: 80\n", "port: 70000\n"), "spec.instanceServiceSpec.ports[0].port"},
		{"service protocol", echo, replace("protocol: TCP", "protocol: HTTP"), "spec.instanceServiceSpec.ports[0].protocol"},
		{"service target port", echo, replace("targetPort: 80", "targetPort: 99999"), "spec.instanceServiceSpec.ports[0].targetPort"},
		{"mistyped service port", echo, replace("port: 80\n", "port: eighty\n"), "spec.instanceServiceSpec.ports[0].port: expected an integer"},
		{"malformed quantity", echo, replace("memory: 30Mi", "memory: 30 MB"), "spec.brokerSpec.brokerPodSpec.containers[0].resources.limits.memory: quantities must match"},
		{"both brokers", echo, replace("    brokerPodSpec:", "    brokerJobSpec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers:\n          - name: x\n            image: y\n    brokerPodSpec:"), "spec.brokerSpec"},
		{"wrong apiVersion", echo, replace("akri.sh/v0", "akri.sh/v1"), "apiVersion"},
		{"wrong kind", echo, replace("kind: Configuration", "kind: Instance"), "kind"},
		{"invalid YAML", echo, replace("  brokerSpec:\n", "  brokerSpec:\n\t- x: [\n"), "invalid YAML"},
		{"duplicate key", echo, replace("  capacity: 2", "  capacity: 2\n  capacity: 3"), "capacity"},
		{"missing discovery handler name", echo, replace("    name: debugEcho\n", "    name: \"\"\n"), "spec.discoveryHandler.name"},
		{"missing container name", echo, replace("      - name: akri-debug-echo-broker\n        image:", "      - image:"), "spec.brokerSpec.brokerPodSpec.containers[0].name"},
		{"ttlSecondsAfterFinished", fw, replace("      backoffLimit: 2", "      backoffLimit: 2\n      ttlSecondsAfterFinished: 100"), "spec.brokerSpec.brokerJobSpec.ttlSecondsAfterFinished"},
		{"job restartPolicy Always", fw, replace("restartPolicy: Never", "restartPolicy: Always"), "spec.brokerSpec.brokerJobSpec.template.spec.restartPolicy"},
		{"mistyped backoffLimit", fw, replace("backoffLimit: 2", "backoffLimit: [2]"), "spec.brokerSpec.brokerJobSpec.backoffLimit"},
		{"run policy value", fw, replace("runPolicy: OnChange", "runPolicy: Sometimes"), "spec.jobPolicy.runPolicy"},
		{"unknown jobPolicy field", fw, replace("historyLimit: 3", "historyLimt: 3"), "spec.jobPolicy.historyLimt"},
		{"jobPolicy on akri.sh/v0", format, replace("spec:\n", "spec:\n  jobPolicy:\n    runPolicy: Once\n"), "spec.jobPolicy"},
		{"bad run-policy annotation", format, replace("gitbroker.dev/run-policy: Once", "gitbroker.dev/run-policy: Sometimes"), "metadata.annotations.gitbroker.dev/run-policy"},
		{"unknown gitbroker annotation", format, replace("gitbroker.dev/run-id:", "gitbroker.dev/runid:"), "metadata.annotations.gitbroker.dev/runid"},
		{"after on a Job broker", format, replace("    gitbroker.dev/run-policy: Once\n", "    gitbroker.dev/run-policy: Once\n    gitbroker.dev/after: journal-reader\n"), "metadata.annotations.gitbroker.dev/after"},
		{"history-limit not a number", format, replace("    gitbroker.dev/run-policy: Once\n", "    gitbroker.dev/run-policy: Once\n    gitbroker.dev/history-limit: five\n"), "metadata.annotations.gitbroker.dev/history-limit"},
		{"duplicate Configuration name", "configurations/zz-copy.yaml", content(demoFile(t, echo)), "metadata.name: Configuration default/akri-debug-echo is also defined in configurations/akri-debug-echo.yaml"},
		{"duplicate Configuration that sorts first", "configurations/a-copy.yaml", content(strings.Replace(demoFile(t, echo), "nginx:stable-alpine", "attacker/nginx:latest", 1)), "metadata.name: Configuration default/akri-debug-echo is also defined in configurations/akri-debug-echo.yaml"},
		{"Configuration twice in one file", "configurations/zz-two.yaml", content(strings.Replace(demoFile(t, echo), "name: akri-debug-echo\n", "name: echo-two\n", 1) + "---\n" + strings.Replace(demoFile(t, echo), "name: akri-debug-echo\n", "name: echo-two\n", 1)), "metadata.name: Configuration default/echo-two is defined twice in this file"},
		{"node differs from file name", edgeA, replace("name: edge-a", "name: edge-x"), "metadata.name"},
		{"inventory property key", edgeA, replace("DEBUG_ECHO_DESCRIPTION: bar0", "DEBUG-ECHO: bar0"), "spec.configurations[0].devices[0].properties.DEBUG-ECHO"},
		{"inventory device id missing", edgeA, replace("- id: bar0", "- id: \"\""), "spec.configurations[0].devices[0].id"},
		{"inventory duplicate device", edgeA, replace("- id: foo0", "- id: bar0"), "spec.configurations[0].devices[1].id"},
		{"inventory unknown field", edgeA, replace("shared: true", "sharedd: true"), "spec.configurations[0].devices[1].sharedd"},
		{"inventory mistyped shared", edgeA, replace("shared: true", "shared: [yes]"), "spec.configurations[0].devices[1].shared: expected a boolean"},
		{"JobRecord outcome", "status/jobs/plant/plc-firmware-x-job.yaml", content("apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: plc-firmware-x-job\n  namespace: plant\nspec:\n  configuration: plc-firmware\n  instance: plc-firmware-84beef\n  deviceID: plc-1\n  outcome: Maybe\n  succeeded: 0\n  failed: 0\n"), "spec.outcome"},
		{"JobRecord time", "status/jobs/plant/plc-firmware-y-job.yaml", content("apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: plc-firmware-y-job\n  namespace: plant\nspec:\n  configuration: plc-firmware\n  instance: plc-firmware-84beef\n  deviceID: plc-1\n  outcome: Failed\n  completionTime: yesterday\n  succeeded: 0\n  failed: 1\n"), "spec.completionTime: parsing time"},
		{"device sets LD_PRELOAD", edgeA, replace("DEBUG_ECHO_DESCRIPTION: bar0", "DEBUG_ECHO_DESCRIPTION: bar0\n        LD_PRELOAD: /tmp/evil.so"), "spec.configurations[0].devices[0].properties.LD_PRELOAD: a device may not set LD_PRELOAD"},
		{"device sets a proxy", edgeA, replace("DEBUG_ECHO_DESCRIPTION: bar0", "DEBUG_ECHO_DESCRIPTION: bar0\n        https_proxy: http://attacker:8080"), "properties.https_proxy: a device may not set https_proxy"},
		{"device id too long", edgeA, replace("- id: bar0", "- id: "+strings.Repeat("b", 600)), "spec.configurations[0].devices[0].id: device id is 600 bytes"},
		{"property value too large", edgeA, replace("DEBUG_ECHO_DESCRIPTION: bar0", "DEBUG_ECHO_DESCRIPTION: "+strings.Repeat("b", 9000)), "properties.DEBUG_ECHO_DESCRIPTION: value is 9000 bytes"},
		{"JobRecord instance not a name", "status/jobs/plant/plc-firmware-z-job.yaml", content("apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: plc-firmware-z-job\n  namespace: plant\nspec:\n  configuration: plc-firmware\n  instance: \"../Plc Firmware\"\n  deviceID: plc-1\n  outcome: Failed\n  succeeded: 0\n  failed: 1\n"), "spec.instance: \"../Plc Firmware\" is not a valid instance name"},
		{"settings out of range", "gitbroker.yaml", content("apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  maxDeletionPercent: 150\n"), "spec.maxDeletionPercent"},
	}
	require.GreaterOrEqual(t, len(cases), 25)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := demoRepo(t)
			before := owned(t, dir)
			path := filepath.Join(dir, filepath.FromSlash(tc.file))
			old, _ := os.ReadFile(path)
			next := tc.edit(string(old))
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(next), 0o644))

			code, stdout, stderr := gitbroker(t, "render", "--dir", dir)
			require.Equal(t, exitInvalid, code, stderr)
			located := regexp.MustCompile(regexp.QuoteMeta(tc.file) + `:[0-9]+: .*` + regexp.QuoteMeta(tc.field))
			require.Regexp(t, located, stdout, "the plan names the file, the line and the field")
			require.NotRegexp(t, located, stderr, "and it is said once")
			require.Contains(t, stderr, "invalid input")
			require.True(t, render.Equal(before, owned(t, dir)), "previous output is untouched: %v", render.Diff(before, owned(t, dir)))

			code, _, stderr = gitbroker(t, "check", "--dir", dir)
			require.Equal(t, exitInvalid, code)
			require.Regexp(t, located, stderr, "check, which prints no plan, lists it")
		})
	}
}

func TestInvalidFileStillRendersTheRest(t *testing.T) {
	dir := demoRepo(t)
	before := owned(t, dir)
	echo := filepath.Join(dir, "configurations/akri-debug-echo.yaml")
	data, _ := os.ReadFile(echo)
	require.NoError(t, os.WriteFile(echo, bytes.Replace(data, []byte("image:"), []byte("imagee:"), 1), 0o644))
	fw := filepath.Join(dir, "configurations/plc-firmware.yaml")
	data, _ = os.ReadFile(fw)
	require.NoError(t, os.WriteFile(fw, bytes.Replace(data, []byte(`"4.2.0"`), []byte(`"4.3.0"`), 1), 0o644))
	// The firmware change still renders (held behind the running Job), while the invalid
	// Configuration keeps its folder as it was.
	code, stdout, stderr := gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stdout, "configurations/akri-debug-echo.yaml:17: spec.brokerSpec.brokerPodSpec.containers[0].imagee: unknown field")
	require.Contains(t, stdout, "held: waiting for")
	after := owned(t, dir)
	for _, p := range before.Paths() {
		if strings.HasPrefix(p, "rendered/default/") {
			require.Equal(t, before[p], after[p])
		}
	}
}

func TestCheck(t *testing.T) {
	dir := demoRepo(t)
	code, stdout, _ := gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitOK, code, stdout)

	pod := filepath.Join(dir, "rendered/default/akri-debug-echo/deployment-edge-a-akri-debug-echo-8120fe.yaml")
	data, err := os.ReadFile(pod)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pod, bytes.Replace(data, []byte("nginx:stable-alpine"), []byte("nginx:latest"), 1), 0o644))
	code, stdout, _ = gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitRefused, code)
	require.Contains(t, stdout, "differs: rendered/default/akri-debug-echo/deployment-edge-a-akri-debug-echo-8120fe.yaml")

	code, _, _ = gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitOK, code)
	code, _, _ = gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitOK, code)
}

func TestRefusedRenderWritesNothing(t *testing.T) {
	dir := demoRepo(t)
	// The demo fleet is small: each node's objects are within the default deletionAllowance, so
	// the per-node budget is shown with the strict one.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gitbroker.yaml"), []byte("apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  deletionAllowance: 0\n"), 0o644))
	before := owned(t, dir)
	require.NoError(t, os.Remove(filepath.Join(dir, "inventory/edge-a.yaml")))
	require.NoError(t, os.Remove(filepath.Join(dir, "inventory/edge-b.yaml")))
	code, stdout, stderr := gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stdout, "node edge-a: its inventory would remove", "the plan says which node is held")
	require.NotContains(t, stderr, "node edge-a: its inventory would remove", "and it is said once")
	require.Contains(t, stderr, "held by the deletion budget")
	require.True(t, render.Equal(before, owned(t, dir)))
	code, _, stderr = gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitRefused, code, "rendered/ does not show what the inventory says")

	// With the default allowance, the same two nodes each remove few enough objects to pass
	// alone, but together they would remove most of the fleet: the render is refused as a whole.
	require.NoError(t, os.Remove(filepath.Join(dir, "gitbroker.yaml")))
	code, stdout, stderr = gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stdout, "REFUSED: the render would remove 6 of 8 broker objects (75%)")
	require.True(t, render.Equal(before, owned(t, dir)))

	// A person's change that would empty rendered/ is refused as a whole.
	dir = demoRepo(t)
	before = owned(t, dir)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "configurations")))
	code, stdout, stderr = gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stdout, "REFUSED")
	require.True(t, render.Equal(before, owned(t, dir)))

	code, _, _ = gitbroker(t, "render", "--dir", dir, "--allow-deletions")
	require.Equal(t, exitOK, code)
	require.NotEqual(t, before, owned(t, dir))
}

func TestPlanFormats(t *testing.T) {
	tree, err := readFS(fixtures.Demo())
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, writeAll(dir, tree))
	code, stdout, _ := gitbroker(t, "plan", "--dir", dir, "--format", "markdown")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "| `default/akri-debug-echo` | Pod broker | 3 created | – | 3 created | 1 created |")
	require.Contains(t, stdout, "- Job `plc-firmware-84beef-083a2d022a-job` **started**")
	require.Empty(t, owned(t, dir), "plan writes nothing")

	code, md, _ := gitbroker(t, "plan", "--dir", dir, "-o", "markdown")
	require.Equal(t, exitOK, code)
	require.Equal(t, stdout, md, "--format is the old name of -o")

	// Machine-readable plans carry the same content.
	code, stdout, _ = gitbroker(t, "plan", "--dir", dir, "-o", "json")
	require.Equal(t, exitOK, code)
	var plan render.Plan
	require.NoError(t, json.Unmarshal([]byte(stdout), &plan))
	require.Equal(t, 3, plan.Summary.DeploymentsCreated)
	require.Equal(t, 2, plan.Summary.JobsStarted)
	require.Contains(t, stdout, `"deploymentsCreated": 3`)
	require.Len(t, plan.Configurations, 4)
	code, stdout, _ = gitbroker(t, "plan", "--dir", dir, "-o", "yaml")
	require.Equal(t, exitOK, code)
	var fromYAML render.Plan
	require.NoError(t, yaml.UnmarshalStrict([]byte(stdout), &fromYAML))
	require.Equal(t, plan, fromYAML)

	code, _, stderr := gitbroker(t, "plan", "--dir", dir, "-o", "html")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--output must be text, markdown, json or yaml")
	code, _, _ = gitbroker(t, "plan", "--bogus")
	require.Equal(t, exitInvalid, code)

	// check -o json says what differs.
	code, stdout, _ = gitbroker(t, "check", "--dir", dir, "-o", "json")
	require.Equal(t, exitRefused, code)
	var report checkReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &report))
	require.False(t, report.Matches)
	require.NotEmpty(t, report.Files)
	require.Equal(t, "missing", report.Files[0].State)
	code, stdout, _ = gitbroker(t, "check", "--dir", dir, "-o", "yaml")
	require.Equal(t, exitRefused, code)
	var fromYAMLReport checkReport
	require.NoError(t, yaml.UnmarshalStrict([]byte(stdout), &fromYAMLReport))
	require.Equal(t, report, fromYAMLReport)
	code, _, _ = gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitOK, code)
	code, stdout, _ = gitbroker(t, "check", "--dir", dir, "-o", "json")
	require.Equal(t, exitOK, code)
	require.JSONEq(t, `{"matches": true, "files": []}`, stdout)
}

func TestDemo(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := gitbroker(t, "demo", "--out", out)
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{
		"== Step 1", "== Step 2", "== Step 3", "== Step 4",
		"held: waiting for plc-firmware-84beef-083a2d022a-job to be recorded finished",
		"retired: recorded Succeeded",
		"+ Deployment journal-reader-0542ca created",
		"- Deployment akri-debug-echo-3f431e removed",
		"kept: its device is gone",
		"== Step 5: Trust",
		"+ Deployment edge-a-akri-debug-echo-8120fe created",
		"(node:edge-a), not by node:edge-b; nothing of this node is rendered",
		"which .gitbroker/allowed_signers does not list as node:edge-x",
		"Inputs: verified",
	} {
		require.Contains(t, stdout, want)
	}
	require.NotContains(t, stdout, "forged0", "the forged device is never rendered")
	code, _, _ = gitbroker(t, "check", "--dir", out)
	require.Equal(t, exitOK, code, "the demo's result is a consistent repository")
}
