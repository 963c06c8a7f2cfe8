package render_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
)

func deviceInventory(node string, props map[string]string) string {
	s := inventory(node, "  - name: cam\n    devices:\n    - id: cam-1\n      properties:\n")
	for _, k := range sortedMapKeys(props) {
		s += fmt.Sprintf("        %s: %q\n", k, props[k])
	}
	return s
}

func sortedMapKeys(m map[string]string) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func podEnv(t *testing.T, tree render.Tree) map[string]string {
	t.Helper()
	files := filesUnder(tree, "rendered/default/cam/", "/deployment-")
	require.Len(t, files, 1)
	var d appsv1.Deployment
	require.NoError(t, yaml.UnmarshalStrict(tree[files[0]], &d))
	env := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	return env
}

// The reviewed Configuration decides: a broker property wins over a device's of the same name.
func TestBrokerPropertiesWinOverDeviceProperties(t *testing.T) {
	cfg := strings.Replace(podConfig, "  capacity: 1\n", "  capacity: 1\n  brokerProperties:\n    ONVIF_RESOLUTION: 720p\n", 1)
	tree := repo(map[string]string{
		"configurations/cam.yaml": cfg,
		"inventory/edge-a.yaml":   deviceInventory("edge-a", map[string]string{"ONVIF_RESOLUTION": "4k", "ONVIF_IP": "10.0.0.7"}),
	})
	env := podEnv(t, renderOK(t, tree).Files)
	require.Equal(t, "720p", env["ONVIF_RESOLUTION"])
	require.Equal(t, "10.0.0.7", env["ONVIF_IP"])
	for k, v := range env {
		if strings.HasPrefix(k, "ONVIF_RESOLUTION_") {
			require.Equal(t, "720p", v, k)
		}
	}
}

// A property that changes how a process loads code or where it connects is refused from a
// device: the node's part stays as it was, the error names file, line and field, and the
// Configuration can allow it by name.
func TestDeviceMayNotSetLoaderOrProxyVariables(t *testing.T) {
	base := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   deviceInventory("edge-a", map[string]string{"ONVIF_IP": "10.0.0.7"}),
	})
	base = apply(base, renderOK(t, base))
	for _, name := range []string{"LD_PRELOAD", "BASH_ENV", "NODE_OPTIONS", "PYTHONPATH", "JAVA_TOOL_OPTIONS", "http_proxy", "HTTPS_PROXY", "PATH", "GCONV_PATH", "PERL5OPT", "GLIBC_TUNABLES"} {
		t.Run(name, func(t *testing.T) {
			tree := repo(nil)
			for p, b := range base {
				tree[p] = b
			}
			tree["inventory/edge-a.yaml"] = []byte(deviceInventory("edge-a", map[string]string{"ONVIF_IP": "10.0.0.9", name: "/tmp/x"}))
			res := render.Render(render.Request{Files: tree})
			require.Len(t, res.Errors, 1)
			msg := res.Errors[0].Error()
			require.Contains(t, msg, "inventory/edge-a.yaml:")
			require.Contains(t, msg, "spec.configurations[0].devices[0].properties."+name)
			require.Contains(t, msg, "default/cam can allow it")
			require.False(t, res.Changed(), "the node's previous output is kept, untouched")
			require.Equal(t, "10.0.0.7", podEnv(t, res.Files)["ONVIF_IP"])

			allowed := strings.Replace(podConfig, "  name: cam\n", "  name: cam\n  annotations:\n    gitbroker.dev/allowed-device-properties: \"OTHER, "+name+"\"\n", 1)
			tree["configurations/cam.yaml"] = []byte(allowed)
			env := podEnv(t, renderOK(t, tree).Files)
			require.Equal(t, "/tmp/x", env[name], "allowed by name")
		})
	}
	// On gitbroker.dev/v1alpha1 it is a spec field.
	tree := repo(map[string]string{
		"configurations/cam.yaml": strings.Replace(strings.Replace(podConfig, "apiVersion: akri.sh/v0", "apiVersion: gitbroker.dev/v1alpha1", 1),
			"  capacity: 1\n", "  capacity: 1\n  allowedDeviceProperties: [HTTPS_PROXY]\n", 1),
		"inventory/edge-a.yaml": deviceInventory("edge-a", map[string]string{"HTTPS_PROXY": "http://proxy:3128"}),
	})
	require.Equal(t, "http://proxy:3128", podEnv(t, renderOK(t, tree).Files)["HTTPS_PROXY"])
	// and an akri.sh/v0 Configuration cannot use the field.
	tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "  capacity: 1\n", "  capacity: 1\n  allowedDeviceProperties: [HTTPS_PROXY]\n", 1))
	res := render.Render(render.Request{Files: tree})
	require.NotEmpty(t, res.Errors)
	require.Contains(t, res.Errors[0].Error(), "spec.allowedDeviceProperties: unknown field in akri.sh/v0")
}

// What a device may set is an allow-list: the names its discovery handler reports (Akri's
// handlers prefix them with their own name), and others only when the Configuration allows them
// by name. A name outside it is refused as a loader variable is, naming the prefix.
func TestDevicePropertiesAreNamedByTheirHandler(t *testing.T) {
	require.Equal(t, "DEBUG_ECHO_", api.HandlerPropertyPrefix("debugEcho"))
	require.Equal(t, "UDEV_", api.HandlerPropertyPrefix("udev"))
	require.Equal(t, "MY_HANDLER_", api.HandlerPropertyPrefix("my-handler"))
	for name, want := range map[string]string{
		"SERIAL":                "devices of discovery handler onvif set only names that start with ONVIF_",
		"UDEV_DEVNODE":          "devices of discovery handler onvif set only names that start with ONVIF_",
		"ONVIF_":                "devices of discovery handler onvif set only names that start with ONVIF_",
		"ONVIF_LD_LIBRARY_PATH": "it changes how a broker loads code",
	} {
		t.Run(name, func(t *testing.T) {
			tree := repo(map[string]string{
				"configurations/cam.yaml": podConfig,
				"inventory/edge-a.yaml":   deviceInventory("edge-a", map[string]string{name: "x"}),
			})
			res := render.Render(render.Request{Files: tree})
			require.Len(t, res.Errors, 1)
			require.Contains(t, res.Errors[0].Error(), "properties."+name+": a device may not set "+name+": "+want)
		})
	}
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   deviceInventory("edge-a", map[string]string{"ONVIF_DEVICE_SERVICE_URL": "http://10.0.0.7/onvif", "AKRI_ONVIF_EXTRA": "y"}),
	})
	env := podEnv(t, renderOK(t, tree).Files)
	require.Equal(t, "http://10.0.0.7/onvif", env["ONVIF_DEVICE_SERVICE_URL"])
	require.Equal(t, "y", env["AKRI_ONVIF_EXTRA"], "Akri's custom handlers prefix AKRI_<HANDLER>_")
	tree["inventory/edge-a.yaml"] = []byte(deviceInventory("edge-a", map[string]string{"SERIAL": "42"}))
	tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "  name: cam\n", "  name: cam\n  annotations:\n    gitbroker.dev/allowed-device-properties: SERIAL\n", 1))
	require.Equal(t, "42", podEnv(t, renderOK(t, tree).Files)["SERIAL"], "allowed by name")
}

func TestInventoryBounds(t *testing.T) {
	many := map[string]string{}
	for i := 0; i < 65; i++ {
		many[fmt.Sprintf("P%02d", i)] = "x"
	}
	for _, tc := range []struct {
		name, inv, want string
	}{
		{"long id", inventory("edge-a", entry("cam", strings.Repeat("d", 513))), "spec.configurations[0].devices[0].id: device id is 513 bytes, above the limit of 512"},
		{"many properties", deviceInventory("edge-a", many), "spec.configurations[0].devices[0].properties: 65 properties, above the limit of 64"},
		{"large value", deviceInventory("edge-a", map[string]string{"BLOB": strings.Repeat("v", 8<<10+1)}), "spec.configurations[0].devices[0].properties.BLOB: value is 8193 bytes, above the limit of 8192"},
		{"large file", deviceInventory("edge-a", map[string]string{"A": "b"}) + "#" + strings.Repeat(" ", 4<<20) + "\n", "inventory/edge-a.yaml:1: inventory is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := render.Render(render.Request{Files: repo(map[string]string{
				"configurations/cam.yaml": podConfig,
				"inventory/edge-a.yaml":   tc.inv,
			})})
			require.NotEmpty(t, res.Errors)
			require.Contains(t, res.Errors[0].Error(), tc.want)
			require.Contains(t, res.Errors[0].Error(), "inventory/edge-a.yaml:")
		})
	}
}

// What a device reports is escaped in the markdown a reviewer reads: no links, HTML, mentions,
// code-span breakouts or new lines.
func TestDeviceTextIsEscapedInMarkdown(t *testing.T) {
	id := "cam](https://evil.example)<img src=x onerror=alert(1)> @admins `x` *bold*\n## injected"
	tree := repo(map[string]string{
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", "  - name: cam\n    devices:\n    - id: "+fmt.Sprintf("%q", id)+"\n"),
	})
	res := renderOK(t, tree)
	var b strings.Builder
	res.Plan.WriteMarkdown(&b)
	md := b.String()
	require.Contains(t, md, "(device ")
	require.NotRegexp(t, `[^\\]\]\(`, md, "every ] is escaped, so no link")
	require.Contains(t, md, `cam\](https://evil.example)`)
	for _, bad := range []string{"<img", "@admins", "\n## injected", "*bold*", "`x`"} {
		require.NotContains(t, md, bad)
	}
	require.Contains(t, md, `&lt;img src=x onerror=alert(1)&gt; &#64;admins`)
	require.NotContains(t, planText(res.Plan), "\n## injected", "the text plan (and so a commit message) quotes it too")

	// An error quoting device text stays inside its code span.
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", "  - name: cam\n    devices:\n    - id: a\n    - id: a\n      properties:\n        \"X`` Y\": v\n"))
	res = render.Render(render.Request{Files: tree})
	require.NotEmpty(t, res.Plan.Errors)
	b.Reset()
	res.Plan.WriteMarkdown(&b)
	require.Contains(t, b.String(), "- ``` inventory/edge-a.yaml:")
}
