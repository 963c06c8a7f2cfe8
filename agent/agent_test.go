package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
)

const echoConfig = `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: akri-debug-echo
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions:
      - "foo0"
      - "foo1"
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: nginx:stable-alpine
`

// clock is a settable clock for grace periods.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// scripted is a handler whose devices the test sets.
type scripted struct {
	mu      sync.Mutex
	devices []api.Device
	err     error
	calls   int
	last    agent.Request
}

func (s *scripted) set(devices ...api.Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devices, s.err = devices, nil
}

func (s *scripted) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *scripted) Discover(_ context.Context, req agent.Request) ([]api.Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.last = req
	if s.err != nil {
		return nil, s.err
	}
	out := make([]api.Device, len(s.devices))
	copy(out, s.devices)
	return out, nil
}

func device(id string, shared bool) api.Device {
	return api.Device{ID: id, Shared: shared, Properties: map[string]string{"DEBUG_ECHO_DESCRIPTION": id}}
}

type fixture struct {
	dir   string
	store gitsync.Store
	clock *clock
	echo  *scripted
}

func newDirFixture(t *testing.T, files map[string]string) *fixture {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	store, err := gitsync.NewDir(dir)
	require.NoError(t, err)
	return &fixture{dir: dir, store: store, clock: newClock(), echo: &scripted{}}
}

func (f *fixture) agent(t *testing.T, node string, mutate ...func(*agent.Options)) *agent.Agent {
	t.Helper()
	opts := agent.Options{
		Node:              node,
		Store:             f.store,
		Handlers:          agent.Builtin{"debugEcho": f.echo},
		SharedGracePeriod: 5 * time.Minute,
		LocalGracePeriod:  30 * time.Second,
		Log:               logr.Discard(),
		Now:               f.clock.Now,
	}
	for _, m := range mutate {
		m(&opts)
	}
	a, err := agent.New(opts)
	require.NoError(t, err)
	return a
}

func (f *fixture) write(t *testing.T, name, content string) {
	t.Helper()
	full := filepath.Join(f.dir, filepath.FromSlash(name))
	require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
}

func (f *fixture) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(name)))
	require.NoError(t, err)
	return string(b)
}

func ids(t *testing.T, inventory string) map[string][]string {
	t.Helper()
	return idsOf(t, "edge-a", inventory)
}

func TestNodeNameIsValidated(t *testing.T) {
	for _, bad := range []string{"", "../x", "a/b", "Edge-A", "edge_a", strings.Repeat("a", 254), "-edge"} {
		t.Run(bad, func(t *testing.T) {
			_, err := agent.New(agent.Options{Node: bad, Store: &gitsync.Dir{}})
			require.Error(t, err)
			require.Contains(t, err.Error(), "node name")
		})
	}
	_, err := agent.New(agent.Options{Node: "edge-a.plant-1", Store: &gitsync.Dir{}})
	require.NoError(t, err)
}

func TestInventoryFormat(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	a := f.agent(t, "edge-a", func(o *agent.Options) {
		o.Handlers = agent.Builtin{"debugEcho": agent.DebugEcho{Shared: true}}
	})
	out, err := a.Sync(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, out.Devices)
	require.Equal(t, `apiVersion: gitbroker.dev/v1alpha1
kind: NodeInventory
metadata:
  name: edge-a
spec:
  configurations:
  - devices:
    - id: foo0
      properties:
        DEBUG_ECHO_DESCRIPTION: foo0
      shared: true
    - id: foo1
      properties:
        DEBUG_ECHO_DESCRIPTION: foo1
      shared: true
    name: akri-debug-echo
    namespace: default
`, f.read(t, "inventory/edge-a.yaml"))
	require.True(t, a.Ready())

	// The same view writes nothing.
	before, err := os.Stat(filepath.Join(f.dir, "inventory/edge-a.yaml"))
	require.NoError(t, err)
	out, err = a.Sync(context.Background())
	require.NoError(t, err)
	require.Empty(t, out.Commit)
	after, err := os.Stat(filepath.Join(f.dir, "inventory/edge-a.yaml"))
	require.NoError(t, err)
	require.Equal(t, before.ModTime(), after.ModTime())
}

func TestNoDevicesWritesAnEmptyInventory(t *testing.T) {
	f := newDirFixture(t, map[string]string{})
	a := f.agent(t, "edge-a")
	_, err := a.Sync(context.Background())
	require.NoError(t, err)
	require.Equal(t, "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: edge-a\nspec: {}\n",
		f.read(t, "inventory/edge-a.yaml"))
}

func TestDebugEchoAvailabilityAndGracePeriod(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	avail := filepath.Join(t.TempDir(), "availability.txt")
	a := f.agent(t, "edge-a", func(o *agent.Options) {
		o.Handlers = agent.Builtin{"debugEcho": agent.DebugEcho{Shared: true, AvailabilityFile: avail}}
	})
	ctx := context.Background()
	_, err := a.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"default/akri-debug-echo": {"foo0", "foo1"}}, ids(t, f.read(t, "inventory/edge-a.yaml")))

	require.NoError(t, os.WriteFile(avail, []byte("OFFLINE\n"), 0o644))
	f.clock.Advance(4 * time.Minute)
	out, err := a.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, out.Devices, "offline for less than the grace period: kept")

	f.clock.Advance(time.Minute)
	out, err = a.Sync(ctx)
	require.NoError(t, err)
	require.Zero(t, out.Devices, "offline for the whole grace period: removed")
	require.Empty(t, ids(t, f.read(t, "inventory/edge-a.yaml")))

	require.NoError(t, os.WriteFile(avail, []byte(""), 0o644))
	out, err = a.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, out.Devices)
}

func TestGracePeriodPerConfiguration(t *testing.T) {
	cfg := strings.Replace(echoConfig, "  name: akri-debug-echo\n",
		"  name: akri-debug-echo\n  annotations:\n    gitbroker.dev/offline-grace-period: 10s\n", 1)
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": cfg})
	a := f.agent(t, "edge-a")
	ctx := context.Background()
	f.echo.set(device("foo0", true), device("cam-local", false))
	_, err := a.Sync(ctx)
	require.NoError(t, err)
	f.echo.set()
	f.clock.Advance(10 * time.Second)
	out, err := a.Sync(ctx)
	require.NoError(t, err)
	require.Zero(t, out.Devices, "the annotation overrides both defaults")

	// Without the annotation: a local device goes after 30s, a shared one
	// after 5m.
	f.write(t, "configurations/echo.yaml", echoConfig)
	f.echo.set(device("foo0", true), device("cam-local", false))
	_, err = a.Sync(ctx)
	require.NoError(t, err)
	f.echo.set()
	f.clock.Advance(30 * time.Second)
	_, err = a.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"default/akri-debug-echo": {"foo0"}}, ids(t, f.read(t, "inventory/edge-a.yaml")))
	f.clock.Advance(5 * time.Minute)
	_, err = a.Sync(ctx)
	require.NoError(t, err)
	require.Empty(t, ids(t, f.read(t, "inventory/edge-a.yaml")))
}

func TestHandlerErrorKeepsDevices(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	a := f.agent(t, "edge-a")
	ctx := context.Background()
	f.echo.set(device("foo0", true))
	_, err := a.Sync(ctx)
	require.NoError(t, err)
	f.echo.fail(fmt.Errorf("camera network unreachable"))
	f.clock.Advance(time.Hour)
	out, err := a.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, out.Devices, "an erroring handler does not mean the device vanished")
}

func TestInvalidConfigurationKeepsDiscovering(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	var logs strings.Builder
	a := f.agent(t, "edge-a", func(o *agent.Options) {
		o.Log = funcr.New(func(prefix, args string) { logs.WriteString(args + "\n") }, funcr.Options{})
	})
	ctx := context.Background()
	f.echo.set(device("foo0", true))
	_, err := a.Sync(ctx)
	require.NoError(t, err)

	f.write(t, "configurations/echo.yaml", echoConfig+"  bogus: 1\n")
	f.echo.set(device("foo0", true), device("foo1", true))
	f.clock.Advance(time.Hour)
	_, err = a.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"default/akri-debug-echo": {"foo0", "foo1"}}, ids(t, f.read(t, "inventory/edge-a.yaml")),
		"the last valid version of the file is still discovered")
	for i := 0; i < 3; i++ {
		_, err = a.Sync(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "invalid Configuration file"), "logged once, not every cycle:\n%s", logs.String())
	f.write(t, "configurations/echo.yaml", echoConfig+"  bogus: 2\n  other: 3\n")
	_, err = a.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(logs.String(), "invalid Configuration file"), "a new error is logged")

	// A fresh agent that never saw the file valid keeps the branch's
	// entries for Configurations it cannot know.
	fresh := f.agent(t, "edge-a")
	f.echo.set()
	_, err = fresh.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"default/akri-debug-echo": {"foo0", "foo1"}}, ids(t, f.read(t, "inventory/edge-a.yaml")))
}

func TestDeletedConfigurationDropsItsDevices(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	a := f.agent(t, "edge-a")
	ctx := context.Background()
	f.echo.set(device("foo0", true))
	_, err := a.Sync(ctx)
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(f.dir, "configurations/echo.yaml")))
	out, err := a.Sync(ctx)
	require.NoError(t, err)
	require.Zero(t, out.Devices)
}

func TestRestartKeepsDevicesForTheGracePeriod(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	ctx := context.Background()
	f.echo.set(device("foo0", true), device("foo1", true))
	_, err := f.agent(t, "edge-a").Sync(ctx)
	require.NoError(t, err)

	restarted := f.agent(t, "edge-a")
	f.echo.set(device("foo0", true))
	out, err := restarted.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, out.Devices, "foo1 was on the branch when the agent started; it gets its grace period")
	f.clock.Advance(5 * time.Minute)
	out, err = restarted.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, out.Devices)
}

// discoveryProperties reach the handler as Akri's agent sends them: inline values, valueFrom
// from the Secret and ConfigMap files mounted into the agent's Pod, "" for a property with
// neither, nothing for a missing optional reference. A missing reference keeps the
// Configuration's devices, makes the agent not ready and shows in its metrics and log, which
// name the reference and never a value.
func TestDiscoveryRequestCarriesDetailsAndProperties(t *testing.T) {
	cfg := strings.Replace(echoConfig, "  brokerSpec:\n", `    discoveryProperties:
    - name: PLANT
      value: north
    - name: PASSWORD
      valueFrom: {secretKeyRef: {name: onvif-auth, key: password}}
    - name: USER
      valueFrom: {configMapKeyRef: {name: onvif, namespace: cams, key: user}}
    - name: PROXY
      valueFrom: {secretKeyRef: {name: absent, key: k, optional: true}}
    - name: EMPTY
  brokerSpec:
`, 1)
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": cfg})
	props := t.TempDir()
	var logs strings.Builder
	reg := prometheus.NewRegistry()
	a := f.agent(t, "edge-a", func(o *agent.Options) {
		o.PropertiesDir = props
		o.Log = funcr.New(func(p, a string) { logs.WriteString(p + a + "\n") }, funcr.Options{})
		o.Metrics = agent.NewMetrics(reg)
	})
	f.echo.set(device("foo0", true))
	_, err := a.Sync(context.Background())
	require.NoError(t, err)
	require.Empty(t, f.echo.last.Configuration, "not discovered without its credential")
	require.False(t, a.Ready())
	require.Contains(t, logs.String(), `cannot resolve a discovery property`)
	require.Contains(t, logs.String(), `discoveryProperties[1] (PASSWORD): secret default/onvif-auth key \"password\": `+filepath.Join(props, "secrets/default/onvif-auth/password")+` is not mounted into the agent's Pod`)
	require.Equal(t, 1.0, gauge(t, reg, "gitbroker_agent_discovery_properties_unresolved"))

	write := func(path, v string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(props, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(props, path), []byte(v), 0o600))
	}
	write("secrets/default/onvif-auth/password", "hunter2")
	write("configmaps/cams/onvif/user", "admin")
	_, err = a.Sync(context.Background())
	require.NoError(t, err)
	require.True(t, a.Ready())
	require.Equal(t, "default/akri-debug-echo", f.echo.last.Configuration)
	require.Equal(t, "descriptions:\n- \"foo0\"\n- \"foo1\"\n", f.echo.last.Details)
	require.Equal(t, map[string][]byte{"PLANT": []byte("north"), "PASSWORD": []byte("hunter2"), "USER": []byte("admin"), "EMPTY": {}}, f.echo.last.Properties)
	require.Equal(t, 0.0, gauge(t, reg, "gitbroker_agent_discovery_properties_unresolved"))
	require.NotContains(t, logs.String(), "hunter2")
	require.NotContains(t, f.read(t, "inventory/edge-a.yaml"), "hunter2")
}

// gauge sums a gauge's samples.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func TestBadDevicesAreDroppedNotWritten(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	var logs strings.Builder
	a := f.agent(t, "edge-a", func(o *agent.Options) {
		o.Log = funcr.New(func(prefix, args string) { logs.WriteString(args + "\n") }, funcr.Options{})
	})
	f.echo.set(
		api.Device{ID: "ok", Properties: map[string]string{"DEBUG_ECHO_GOOD": "1", "bad-name": "x", "SERIAL": "7", "DEBUG_ECHO_LD_PRELOAD": "/x.so"}},
		api.Device{ID: ""},
		api.Device{ID: "ok"},
	)
	out, err := a.Sync(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, out.Devices)
	inv := f.read(t, "inventory/edge-a.yaml")
	require.Contains(t, inv, "DEBUG_ECHO_GOOD")
	require.NotContains(t, inv, "bad-name")
	require.Contains(t, logs.String(), "dropping a property")
	// Names the renderer would refuse (not its handler's, or a loader variable) are left out, so
	// an honest node's inventory is never refused for them; it is said once.
	require.NotContains(t, inv, "SERIAL")
	require.NotContains(t, inv, "LD_PRELOAD")
	_, err = a.Sync(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(logs.String(), `"property"="SERIAL"`), logs.String())
	res := render.Render(render.Request{Files: snapshotFiles(t, f)})
	require.Empty(t, res.Errors, "what the agent writes, the renderer takes")
}

// gitFixture is a fixture on a real git server.
func newGitFixture(t *testing.T, files map[string]string) (*gitsynctest.Server, *clock) {
	t.Helper()
	return gitsynctest.NewServer(t, "main", files), newClock()
}

func gitStore(t *testing.T, srv *gitsynctest.Server, b gitsync.Backoff) *gitsync.Repository {
	t.Helper()
	r, err := gitsync.New(srv.URL(), "main", gitsync.WithBackoff(b))
	require.NoError(t, err)
	return r
}

var quick = gitsync.Backoff{Initial: 5 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 100, MaxElapsed: time.Minute}

func TestFlappingDeviceMakesNoCommits(t *testing.T) {
	srv, clk := newGitFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	echo := &scripted{}
	a, err := agent.New(agent.Options{
		Node: "edge-a", Store: gitStore(t, srv, quick), Handlers: agent.Builtin{"debugEcho": echo},
		SharedGracePeriod: 5 * time.Minute, Log: logr.Discard(), Now: clk.Now,
	})
	require.NoError(t, err)
	ctx := context.Background()
	echo.set(device("foo0", true))
	_, err = a.Sync(ctx)
	require.NoError(t, err)
	commits := len(srv.Log())

	// foo0 drops out and comes back every 10 seconds for ten minutes of
	// cycles: always back within the grace period.
	for i := 0; i < 60; i++ {
		if i%2 == 0 {
			echo.set()
		} else {
			echo.set(device("foo0", true))
		}
		clk.Advance(10 * time.Second)
		out, err := a.Sync(ctx)
		require.NoError(t, err)
		require.Empty(t, out.Commit)
	}
	require.Len(t, srv.Log(), commits, "a flapping device produces no commits")
	require.Zero(t, srv.Pushes()-1, "and no pushes after the first")
}

// A person commits to configurations/ between the agent's fetch and its
// push: the agent's inventory lands on top and the person's change is
// intact.
func TestHumanCommitBetweenFetchAndPush(t *testing.T) {
	srv, clk := newGitFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	echo := &scripted{}
	a, err := agent.New(agent.Options{
		Node: "edge-a", Store: gitStore(t, srv, quick), Handlers: agent.Builtin{"debugEcho": echo},
		Log: logr.Discard(), Now: clk.Now,
	})
	require.NoError(t, err)
	person := "apiVersion: akri.sh/v0\nkind: Configuration\nmetadata:\n  name: by-a-person\nspec:\n  discoveryHandler:\n    name: onvif\n"
	srv.BeforeNextPush(func() {
		srv.Commit(map[string]string{"configurations/person.yaml": person}, nil, "a person adds a Configuration")
	})
	echo.set(device("foo0", true))
	out, err := a.Sync(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, out.Result.Conflicts)

	log := srv.Log()
	require.Len(t, log, 3)
	require.Equal(t, []string{"inventory/edge-a.yaml"}, log[0].Paths)
	require.Equal(t, []string{"configurations/person.yaml"}, log[1].Paths)
	got, _ := srv.File("configurations/person.yaml")
	require.Equal(t, person, got)
	inv, _ := srv.File("inventory/edge-a.yaml")
	require.Equal(t, map[string][]string{"default/akri-debug-echo": {"foo0"}}, ids(t, inv))
}

// The server goes away mid-push (after applying it) and stays away for a
// cycle. The agent keeps its state; when the server returns, the update is
// there exactly once.
func TestServerOutageLandsExactlyOnce(t *testing.T) {
	srv, clk := newGitFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	echo := &scripted{}
	a, err := agent.New(agent.Options{
		Node: "edge-a", Handlers: agent.Builtin{"debugEcho": echo}, Log: logr.Discard(), Now: clk.Now,
		Store: gitStore(t, srv, gitsync.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 3, MaxElapsed: time.Minute}),
	})
	require.NoError(t, err)
	ctx := context.Background()
	echo.set(device("foo0", true))
	_, err = a.Sync(ctx)
	require.NoError(t, err)

	// The push is applied, the connection dropped, and the server is down
	// for the retries of this cycle.
	echo.set(device("foo0", true), device("foo1", true))
	srv.DropNextPushes(1)
	go func() {
		for srv.Pushes() < 2 {
			time.Sleep(time.Millisecond)
		}
		srv.SetDown(true)
	}()
	_, err = a.Sync(ctx)
	require.Error(t, err)
	require.False(t, a.Ready())

	srv.SetDown(false)
	out, err := a.Sync(ctx)
	require.NoError(t, err)
	require.Empty(t, out.Commit, "the dropped push had landed; nothing is pushed twice")
	require.True(t, a.Ready())
	touched := 0
	for _, e := range srv.Log() {
		if len(e.Paths) == 1 && e.Paths[0] == "inventory/edge-a.yaml" {
			touched++
		}
	}
	require.Equal(t, 2, touched, "two updates, two commits")
	inv, _ := srv.File("inventory/edge-a.yaml")
	require.Equal(t, map[string][]string{"default/akri-debug-echo": {"foo0", "foo1"}}, ids(t, inv))

	// A cycle that fails with the server down entirely keeps the update
	// for the next one.
	echo.set(device("foo2", true))
	srv.SetDown(true)
	_, err = a.Sync(ctx)
	require.Error(t, err)
	srv.SetDown(false)
	clk.Advance(10 * time.Minute)
	_, err = a.Sync(ctx)
	require.NoError(t, err)
	inv, _ = srv.File("inventory/edge-a.yaml")
	require.Equal(t, map[string][]string{"default/akri-debug-echo": {"foo2"}}, ids(t, inv))
}

// What the agent writes is what the renderer reads: debugEcho and udev
// inventories render into broker Pods without errors.
func TestInventoryRenders(t *testing.T) {
	udevConfig := `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: akri-udev-video
spec:
  discoveryHandler:
    name: udev
    discoveryDetails: |+
      udevRules:
      - 'KERNEL=="video[0-9]*"'
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: ghcr.io/project-akri/akri/udev-video-broker:latest
`
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig, "configurations/udev.yaml": udevConfig})
	a := f.agent(t, "edge-a", func(o *agent.Options) {
		o.Handlers = agent.Builtin{
			"debugEcho": agent.DebugEcho{Shared: true},
			"udev":      agent.Udev{Root: fakeSysfs(t)},
		}
	})
	out, err := a.Sync(context.Background())
	require.NoError(t, err)
	require.Equal(t, 4, out.Devices)

	files := render.Tree{}
	snap, err := f.store.Snapshot(context.Background())
	require.NoError(t, err)
	all, err := snap.Files("")
	require.NoError(t, err)
	for k, v := range all {
		files[k] = v
	}
	res := render.Render(render.Request{Files: files})
	require.Empty(t, res.Errors)
	pods := 0
	for _, p := range res.Files.Paths() {
		if strings.Contains(p, "/deployment-") {
			pods++
		}
	}
	require.Equal(t, 4, pods, "one broker Pod per device")
	var udevPod string
	for _, p := range res.Files.Paths() {
		if strings.Contains(p, "akri-udev-video/deployment-") {
			udevPod = string(res.Files[p])
		}
	}
	require.Contains(t, udevPod, "value: /dev/video")
	require.Contains(t, udevPod, "name: UDEV_DEVPATH")
}
