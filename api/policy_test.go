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
		"jobPolicy.runPolicy":     {"Once", "Once"},
		"jobPolicy.concurrency":   {"Allow", "Allow"},
		"jobPolicy.historyLimit":  {"7", "7"},
		"jobPolicy.runID":         {"r2", "r2"},
		"after":                   {"first", "first"},
		"shards":                  {"3", "3"},
		"allowedDeviceProperties": {"[LD_PRELOAD, HTTP_PROXY]", "LD_PRELOAD, HTTP_PROXY"},
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
