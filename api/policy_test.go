package api

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each setting reads the same from its spec field on gitbroker.dev/v1alpha1 as from its
// annotation on akri.sh/v0, and is in the docs' table.
func TestConfigurationSettingsTable(t *testing.T) {
	examples := map[string][2]string{ // field -> spec YAML value, annotation value
		"jobPolicy.runPolicy":      {"Once", "Once"},
		"jobPolicy.concurrency":    {"Allow", "Allow"},
		"jobPolicy.historyLimit":   {"7", "7"},
		"jobPolicy.runID":          {"r2", "r2"},
		"after":                    {"first", "first"},
		"shards":                   {"3", "3"},
		"allowedDeviceProperties":  {"[LD_PRELOAD, HTTP_PROXY]", "LD_PRELOAD, HTTP_PROXY"},
		"allowedHostPaths":         {"[/sys/class/gpio, /run/acme]", "/sys/class/gpio, /run/acme"},
		"rollout.maxChanged":       {`"30%"`, "30%"},
		"rollout.progressDeadline": {"5m", "5m"},
		"clusterSelector":          {"{matchLabels: {ring: canary}}", "ring=canary"},
	}
	docs, err := os.ReadFile("../docs/FORMATS.md")
	require.NoError(t, err)
	for _, s := range configurationSettings {
		for _, a := range s.annotations {
			require.Contains(t, string(docs), "`"+a+"`", "docs/FORMATS.md does not list %s", a)
		}
		if s.field != "" {
			require.Contains(t, string(docs), "`spec."+s.field+"`", "docs/FORMATS.md does not list spec.%s", s.field)
		}
		if s.field == "" || len(s.annotations) != 1 {
			continue
		}
		ex, ok := examples[s.field]
		require.True(t, ok, "say here how to set %s", s.field)
		broker := "brokerPodSpec: {containers: [{name: b, image: busybox:1.36}]}"
		if s.broker == "Job" {
			broker = "brokerJobSpec: {template: {spec: {restartPolicy: Never, containers: [{name: b, image: busybox:1.36}]}}}"
		}
		spec := ex[0]
		parent, leaf, nested := strings.Cut(s.field, ".")
		field := fmt.Sprintf("  %s: %s\n", s.field, spec)
		if nested {
			field = fmt.Sprintf("  %s:\n    %s: %s\n", parent, leaf, spec)
		}
		const head = "kind: Configuration\nmetadata:\n  name: c\n"
		body := "  discoveryHandler: {name: debugEcho}\n  brokerSpec:\n    " + broker + "\n"
		fromSpec, errs := ParseConfigurations("c.yaml", []byte("apiVersion: "+APIVersion+"\n"+head+"spec:\n"+field+body), "default")
		require.Empty(t, errs, s.field)
		fromAnn, errs := ParseConfigurations("c.yaml", []byte(fmt.Sprintf("apiVersion: %s\n%s  annotations: {%s: %q}\nspec:\n%s", AkriAPIVersion, head, s.annotations[0], ex[1], body)), "default")
		require.Empty(t, errs, s.annotations[0])
		require.Equal(t, fromSpec[0].Policy, fromAnn[0].Policy, s.field)
		require.NotEqual(t, resolvePolicy(&Configuration{}, APIVersion, func(string, string, ...any) {}), fromSpec[0].Policy, "%s changed nothing", s.field)
		// On akri.sh/v0 the spec field is refused, naming the annotation to use.
		_, errs = ParseConfigurations("c.yaml", []byte("apiVersion: "+AkriAPIVersion+"\n"+head+"spec:\n"+field+body), "default")
		require.NotEmpty(t, errs, s.field)
	}
}

// A staged rollout takes a whole number of brokers from 1 or a percentage from 1% to 100%, on a
// Pod broker only, and names the field of a bad value; a share rounds down, to at least one.
func TestRolloutMaxChanged(t *testing.T) {
	parse := func(v, broker string) ErrorList {
		_, errs := ParseConfigurations("c.yaml", []byte("apiVersion: "+AkriAPIVersion+"\nkind: Configuration\nmetadata:\n  name: c\n  annotations: {gitbroker.dev/rollout-max-changed: \""+v+
			"\"}\nspec:\n  discoveryHandler: {name: debugEcho}\n  brokerSpec:\n    "+broker+"\n"), "default")
		return errs
	}
	pod := "brokerPodSpec: {containers: [{name: b, image: busybox:1.36}]}"
	for _, v := range []string{"1", "25", "1%", "100%"} {
		require.Empty(t, parse(v, pod), v)
	}
	for _, v := range []string{"0", "-2", "0%", "101%", "x", "3.5", "%"} {
		errs := parse(v, pod)
		require.Len(t, errs, 1, v)
		require.Contains(t, errs[0].Error(), "c.yaml:5: metadata.annotations.gitbroker.dev/rollout-max-changed: expected a whole number of brokers from 1 or a percentage from 1% to 100%", v)
	}
	errs := parse("3", "brokerJobSpec: {template: {spec: {restartPolicy: Never, containers: [{name: b, image: busybox:1.36}]}}}")
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), "a staged rollout needs spec.brokerSpec.brokerPodSpec")
	for _, c := range []struct {
		v           string
		total, want int
	}{{"3", 10, 3}, {"30%", 10, 3}, {"5%", 10, 1}, {"100%", 7, 7}, {"50%", 5, 2}} {
		got, err := RolloutWave(c.v, c.total)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%s of %d", c.v, c.total)
	}
}

// The agent serves host paths under /dev, and under a prefix the Configuration allows; a handler
// cannot climb out with "..", and a prefix must be absolute, clean and not the root.
func TestAllowedHostPaths(t *testing.T) {
	parse := func(v string) (*ParsedConfiguration, ErrorList) {
		cs, errs := ParseConfigurations("c.yaml", []byte(`apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: c
  annotations: {gitbroker.dev/allowed-host-paths: "`+v+`"}
spec:
  discoveryHandler: {name: udev}
`), "default")
		if len(errs) > 0 {
			return nil, errs
		}
		return cs[0], nil
	}
	c, errs := parse("/sys/class/gpio")
	require.Empty(t, errs)
	for p, want := range map[string]bool{
		"/dev/video0": true, "/dev": true, "/dev/bus/usb/001/002": true,
		"/dev/../etc/shadow": false, "/devices": false, "dev/video0": false, "/etc": false,
		"/sys/class/gpio/gpio17/value": true, "/sys/class/gpiochip": false, "/sys/class/gpio/../../kernel": false,
	} {
		require.Equal(t, want, c.Policy.HostPathAllowed(p), p)
	}
	d, errs := parse("")
	require.Empty(t, errs)
	require.False(t, d.Policy.HostPathAllowed("/sys/class/gpio/x"))
	require.True(t, d.Policy.HostPathAllowed("/dev/ttyUSB0"))
	for v, msg := range map[string]string{
		"sys/class":  `"sys/class" is not an absolute path`,
		"/sys/../x":  `"/sys/../x" is not a clean path (write "/x")`,
		"/":          `"/" would let a discovery handler mount any host path into a broker`,
		"/run/acme/": `"/run/acme/" is not a clean path (write "/run/acme")`,
	} {
		_, errs := parse(v)
		require.Len(t, errs, 1, v)
		require.Contains(t, errs.Error(), "c.yaml:5: metadata.annotations.gitbroker.dev/allowed-host-paths: "+msg)
	}
}

// A valueFrom names a Secret or ConfigMap key as Kubernetes names them: the agent reads it from a
// file named after it, so a reference that could leave its folder is refused at review.
func TestDiscoveryPropertyReferences(t *testing.T) {
	parse := func(props string) ErrorList {
		_, errs := ParseConfigurations("c.yaml", []byte(`apiVersion: akri.sh/v0
kind: Configuration
metadata: {name: c}
spec:
  discoveryHandler:
    name: onvif
    discoveryProperties:
`+props), "default")
		return errs
	}
	require.Empty(t, parse("    - {name: USER, valueFrom: {secretKeyRef: {name: onvif-auth, namespace: cams, key: user.name}}}\n    - {name: EMPTY}\n"))
	errs := parse("    - {name: P, valueFrom: {secretKeyRef: {name: ../../etc, key: ../shadow}}}\n    - {name: Q, value: x, valueFrom: {configMapKeyRef: {name: m, namespace: A_B, key: k}}}\n")
	require.Len(t, errs, 4)
	msg := errs.Error()
	require.Contains(t, msg, `c.yaml:8: spec.discoveryHandler.discoveryProperties[0].valueFrom.secretKeyRef.name: "../../etc" is not a valid name`)
	require.Contains(t, msg, `spec.discoveryHandler.discoveryProperties[0].valueFrom.secretKeyRef.key: "../shadow" is not a valid key`)
	require.Contains(t, msg, `spec.discoveryHandler.discoveryProperties[1].valueFrom: set only one of value and valueFrom`)
	require.Contains(t, msg, `spec.discoveryHandler.discoveryProperties[1].valueFrom.configMapKeyRef.namespace: "A_B" is not a valid namespace`)
}
