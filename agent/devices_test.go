package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
)

type sink struct {
	mu   sync.Mutex
	last []deviceplugin.Instance
}

func (s *sink) Update(list []deviceplugin.Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = list
}

func (s *sink) byName() map[string]deviceplugin.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]deviceplugin.Instance{}
	for _, in := range s.last {
		out[in.Name] = in
	}
	return out
}

// The agent serves akri.sh/<instance> under exactly the names the renderer gives the brokers'
// resources, shared and unshared devices alike; a device the latest discovery did not see is
// Unhealthy; broker properties win over device properties, and a property no device may set
// is not given to the container.
func TestDevicePluginServesTheRenderersInstances(t *testing.T) {
	cfg := strings.Replace(echoConfig, "  brokerSpec:", `  capacity: 3
  brokerProperties: {DEBUG_ECHO_MODE: ro}
  brokerSpec:`, 1) + `        resources: {limits: {"{{PLACEHOLDER}}": "1"}}
`
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": cfg})
	s := &sink{}
	a := f.agent(t, "edge-a", func(o *agent.Options) { o.Devices = s })
	lib := device("lib0", false)
	lib.Properties["DEBUG_ECHO_MODE"] = "rw"
	lib.DeviceSpecs = []api.DeviceSpec{{ContainerPath: "/dev/lib0", HostPath: "/dev/lib0", Permissions: "rw"}}
	f.echo.set(device("foo0", true), lib)
	_, err := a.Sync(context.Background())
	require.NoError(t, err)

	res := render.Render(render.Request{Files: snapshotFiles(t, f)})
	require.Empty(t, res.Errors)
	rendered := map[string]bool{}
	for _, p := range res.Files.Paths() {
		if !strings.Contains(p, "/deployment-") {
			continue
		}
		var d appsv1.Deployment
		require.NoError(t, yaml.Unmarshal(res.Files[p], &d))
		for r := range d.Spec.Template.Spec.Containers[0].Resources.Limits {
			rendered[strings.TrimPrefix(string(r), "akri.sh/")] = true
		}
	}
	served := s.byName()
	require.Len(t, rendered, 2)
	for name := range rendered {
		in, ok := served[name]
		require.True(t, ok, "the renderer asks for akri.sh/%s; the agent serves %v", name, served)
		require.True(t, in.Healthy)
		require.Equal(t, 3, in.Capacity)
		require.Equal(t, "akri-debug-echo", in.Configuration)
		require.Equal(t, strings.ToUpper(name[len(name)-6:]), in.Digest)
	}
	// A property no device may set reaches no container through Allocate either: one that
	// changes how a process loads code, or one not named as its discovery handler names them.
	lib.Properties["LD_PRELOAD"] = "/tmp/evil.so"
	lib.Properties["SERIAL"] = "42"
	f.echo.set(device("foo0", true), lib)
	f.clock.Advance(time.Second)
	_, err = a.Sync(context.Background())
	require.NoError(t, err)
	var unshared deviceplugin.Instance
	for _, in := range s.byName() {
		if len(in.DeviceSpecs) > 0 {
			unshared = in
		}
	}
	require.Equal(t, map[string]string{"DEBUG_ECHO_DESCRIPTION": "lib0", "DEBUG_ECHO_MODE": "ro"}, unshared.Env)
	require.Equal(t, []api.DeviceSpec{{ContainerPath: "/dev/lib0", HostPath: "/dev/lib0", Permissions: "rw"}}, unshared.DeviceSpecs)

	// Unseen (a handler error keeps the device in the inventory): Unhealthy, still served.
	f.echo.fail(fmt.Errorf("bus reset"))
	f.clock.Advance(time.Second)
	_, err = a.Sync(context.Background())
	require.NoError(t, err)
	after := s.byName()
	require.Equal(t, slices.Sorted(mapsKeys(served)), slices.Sorted(mapsKeys(after)))
	for _, in := range after {
		require.False(t, in.Healthy, in.Name)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func snapshotFiles(t *testing.T, f *fixture) render.Tree {
	t.Helper()
	snap, err := f.store.Snapshot(context.Background())
	require.NoError(t, err)
	all, err := snap.Files("")
	require.NoError(t, err)
	files := render.Tree{}
	for k, v := range all {
		files[k] = v
	}
	return files
}
