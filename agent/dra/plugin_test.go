package dra

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
)

func cam(healthy bool) deviceplugin.Instance {
	return deviceplugin.Instance{
		Name: "cam-a1b2c3", Namespace: "plant", Configuration: "cam", Digest: "A1B2C3", Capacity: 2, Healthy: healthy,
		DeviceSpecs: []api.DeviceSpec{{ContainerPath: "/dev/video0", HostPath: "/dev/video0"}, {ContainerPath: "/etc/passwd", HostPath: "/etc/passwd"}},
		Mounts:      []api.Mount{{ContainerPath: "/run/cam", HostPath: "/dev/shm/cam", ReadOnly: true}},
		Env:         map[string]string{"UDEV_DEVNODE": "/dev/video0", "MODE": "$(HOME)"},
	}
}

func claim(uid, pool, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "broker-claim", Namespace: "plant", UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "device", Driver: api.DRADriver, Pool: pool, Device: device}},
		}}},
	}
}

func plugin(t *testing.T) *Plugin {
	p := New(Options{Node: "edge-a", CDIDir: t.TempDir(), Log: logr.Discard()})
	require.NoError(t, os.MkdirAll(p.opts.CDIDir, 0o755))
	return p
}

// A claim allocated one of this node's devices gets a CDI device made from the agent's own
// discovery: the device node (a host path outside /dev is not served), the mount, the
// environment; unpreparing removes it.
func TestPrepareAnswersFromDiscovery(t *testing.T) {
	p := plugin(t)
	p.Update([]deviceplugin.Instance{cam(true)})
	c := claim("11111111-2222", api.DRAPool("edge-a", "plant", "cam-a1b2c3", false), api.DRADeviceName(1))
	res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	require.Equal(t, []kubeletplugin.Device{{Requests: []string{"device"}, PoolName: "edge-a/plant/cam-a1b2c3", DeviceName: "slot-1",
		CDIDeviceIDs: []string{"gitbroker.dev/device=11111111-2222-0"}}}, res[c.UID].Devices)

	data, err := os.ReadFile(filepath.Join(p.opts.CDIDir, "gitbroker.dev-11111111-2222.json"))
	require.NoError(t, err)
	var spec cdispec.Spec
	require.NoError(t, json.Unmarshal(data, &spec))
	require.Equal(t, "gitbroker.dev/device", spec.Kind)
	require.Len(t, spec.Devices, 1)
	e := spec.Devices[0].ContainerEdits
	require.Equal(t, "11111111-2222-0", spec.Devices[0].Name)
	require.Equal(t, []*cdispec.DeviceNode{{Path: "/dev/video0", HostPath: "/dev/video0", Permissions: "rwm"}}, e.DeviceNodes)
	require.Equal(t, []*cdispec.Mount{{HostPath: "/dev/shm/cam", ContainerPath: "/run/cam", Type: "bind", Options: []string{"rbind", "ro"}}}, e.Mounts)
	require.Equal(t, []string{"MODE=$(HOME)", "MODE_A1B2C3=$(HOME)", "UDEV_DEVNODE=/dev/video0", "UDEV_DEVNODE_A1B2C3=/dev/video0"}, e.Env)
	require.Equal(t, []string{"11111111-2222"}, p.Prepared())

	// A UID that would name a path outside the CDI folder removes nothing there.
	outside := filepath.Join(filepath.Dir(p.opts.CDIDir), "victim.json")
	require.NoError(t, os.WriteFile(outside, []byte("{}"), 0o644))
	out, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID}, {UID: "never-prepared"}, {UID: "/../../victim"}})
	require.NoError(t, err)
	require.NoError(t, out[c.UID])
	require.NoError(t, out["never-prepared"])
	require.ErrorContains(t, out["/../../victim"], "names no CDI spec")
	require.FileExists(t, outside)
	require.Empty(t, p.Prepared())
}

// What the scheduler allocated is prepared only when this node sees it now: a device gone since
// the allocation, one not seen in the latest discovery, another node's, a slot past the capacity
// or a pool gitbroker does not make each fail the claim with why, and write nothing.
func TestPrepareRefusesWhatTheNodeDoesNotSee(t *testing.T) {
	for _, tc := range []struct {
		name, pool, device, why string
		instances               []deviceplugin.Instance
	}{
		{"gone", api.DRAPool("edge-a", "plant", "cam-a1b2c3", false), "slot-0", "not discovered on node edge-a", nil},
		{"unhealthy", api.DRAPool("edge-a", "plant", "cam-a1b2c3", false), "slot-0", "latest discovery", []deviceplugin.Instance{cam(false)}},
		{"other node", api.DRAPool("edge-b", "plant", "cam-a1b2c3", false), "slot-0", "node edge-b's", []deviceplugin.Instance{cam(true)}},
		{"other namespace", api.DRAPool("", "factory", "cam-a1b2c3", true), "slot-0", "not discovered", []deviceplugin.Instance{cam(true)}},
		{"past capacity", api.DRAPool("edge-a", "plant", "cam-a1b2c3", false), "slot-2", "no slot", []deviceplugin.Instance{cam(true)}},
		{"not a slot", api.DRAPool("edge-a", "plant", "cam-a1b2c3", false), "slot-01", "no slot", []deviceplugin.Instance{cam(true)}},
		{"not our pool", "edge-a", "slot-0", "not a gitbroker pool", []deviceplugin.Instance{cam(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plugin(t)
			p.Update(tc.instances)
			c := claim("uid-1", tc.pool, tc.device)
			res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
			require.NoError(t, err)
			require.ErrorContains(t, res[c.UID].Err, tc.why)
			require.Empty(t, p.Prepared())
		})
	}
}

// A shared device's pool names no node: any node that sees it prepares it. Devices of other
// drivers in the same claim are not this plugin's.
func TestPrepareSharedDevice(t *testing.T) {
	p := plugin(t)
	in := cam(true)
	p.Update([]deviceplugin.Instance{in})
	c := claim("uid-2", api.DRAPool("", "plant", "cam-a1b2c3", true), "slot-0")
	c.Status.Allocation.Devices.Results = append([]resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.example.com", Pool: "x", Device: "y"}}, c.Status.Allocation.Devices.Results...)
	res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	require.Len(t, res[c.UID].Devices, 1)
	require.Equal(t, []string{"gitbroker.dev/device=uid-2-1"}, res[c.UID].Devices[0].CDIDeviceIDs)
}

// The CDI file is renamed into place: a symlink an attacker put where it goes is replaced, and
// the file it pointed at is untouched.
func TestPrepareNeverWritesThroughASymlink(t *testing.T) {
	p := plugin(t)
	p.Update([]deviceplugin.Instance{cam(true)})
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o644))
	require.NoError(t, os.Symlink(victim, filepath.Join(p.opts.CDIDir, "gitbroker.dev-uid-3.json")))
	c := claim("uid-3", api.DRAPool("edge-a", "plant", "cam-a1b2c3", false), "slot-0")
	res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res[c.UID].Err)
	data, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "keep", string(data))
	fi, err := os.Lstat(filepath.Join(p.opts.CDIDir, "gitbroker.dev-uid-3.json"))
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular())
}

// A device node's owner and group are the host's, read under the dev root: an unprivileged
// broker in the node's group opens it as it would through the device plugin.
func TestDeviceNodeKeepsTheHostGroup(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	// A FIFO stands in for the device node (making one needs no privilege): not a device, so no
	// owner is given; then /dev/null, a real device, under a root that is the host's.
	require.NoError(t, mkfifo(filepath.Join(root, "dev", "video0")))
	p := plugin(t)
	p.opts.DevRoot = root
	_, _, ok := p.owner("/dev/video0")
	require.False(t, ok, "only device nodes give their owner")
	p.opts.DevRoot = "/"
	uid, gid, ok := p.owner("/dev/null")
	require.True(t, ok)
	require.Equal(t, uint32(0), uid)
	require.Equal(t, uint32(0), gid)
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }

// The plugin is ready only once kubelet has registered it: the test plays kubelet's plugin
// watcher on the registration socket, as kubelet does when the socket appears in its registry.
// Until then, and when kubelet refuses it, the agent says why it is not ready.
func TestReadyOnceKubeletRegistersIt(t *testing.T) {
	dir := t.TempDir()
	registry, plugins := filepath.Join(dir, "reg"), filepath.Join(dir, "plugins")
	p := New(Options{Node: "edge-a", Client: fake.NewClientset(), PluginsDir: plugins, RegistryDir: registry, CDIDir: filepath.Join(dir, "cdi"), Log: logr.Discard()})
	require.ErrorContains(t, p.Ready(), "has not started")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	// No registry folder: kubelet is not there yet; the plugin tries again.
	require.Eventually(t, func() bool {
		err := p.Ready()
		return err != nil && strings.Contains(err.Error(), "plugin registry")
	}, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, os.MkdirAll(registry, 0o755))
	sock := filepath.Join(registry, api.DRADriver+"-reg.sock")
	require.Eventually(t, func() bool { _, err := os.Stat(sock); return err == nil }, 20*time.Second, 50*time.Millisecond)
	require.ErrorContains(t, p.Ready(), "has not registered")

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	require.NoError(t, err)
	require.Equal(t, api.DRADriver, info.Name)
	require.Equal(t, filepath.Join(plugins, api.DRADriver, "dra.sock"), info.Endpoint)
	_, err = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "DRA is off"})
	require.ErrorContains(t, err, "DRA is off", "the helper answers a refusal with the error it was told")
	require.ErrorContains(t, p.Ready(), "kubelet refused the DRA plugin gitbroker.dev: DRA is off")
	_, err = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)
	require.NoError(t, p.Ready())
}

// A device prepared for one claim is not prepared for another until the first is unprepared,
// whatever the allocation says: the node is the last line of defence against a device given
// twice. A restarted agent knows the prepared claims from their CDI specs.
func TestPrepareNeverGivesADeviceTwice(t *testing.T) {
	p := plugin(t)
	p.Update([]deviceplugin.Instance{cam(true)})
	pool := api.DRAPool("edge-a", "plant", "cam-a1b2c3", false)
	first, second := claim("uid-a", pool, "slot-0"), claim("uid-b", pool, "slot-0")
	res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{first})
	require.NoError(t, err)
	require.NoError(t, res[first.UID].Err)
	// Prepared again (kubelet retries, or restarted): the same claim, the same answer.
	res, err = p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{first})
	require.NoError(t, err)
	require.NoError(t, res[first.UID].Err)

	restarted := New(p.opts)
	restarted.Update([]deviceplugin.Instance{cam(true)})
	res, err = restarted.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{second})
	require.NoError(t, err)
	require.ErrorContains(t, res[second.UID].Err, "is prepared for claim plant/broker-claim already")
	// Another slot of the device is another device.
	other := claim("uid-c", pool, "slot-1")
	res, err = restarted.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{other})
	require.NoError(t, err)
	require.NoError(t, res[other.UID].Err)

	_, err = restarted.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: first.UID}})
	require.NoError(t, err)
	res, err = restarted.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{second})
	require.NoError(t, err)
	require.NoError(t, res[second.UID].Err)
}
