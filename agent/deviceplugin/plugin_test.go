package deviceplugin_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
)

// fakeKubelet is kubelet's side of the device-plugin API at a unit seam: it accepts
// registrations on kubelet.sock and serves pod-resources; the e2e suite runs the real kubelet.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	podresourcesapi.UnimplementedPodResourcesListerServer
	dir string
	srv *grpc.Server

	mu      sync.Mutex
	regs    map[string]*pluginapi.RegisterRequest
	inUse   map[string][]string // resource -> device ids
	regWake chan struct{}
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	k := &fakeKubelet{dir: dir, regs: map[string]*pluginapi.RegisterRequest{}, inUse: map[string][]string{}, regWake: make(chan struct{}, 100)}
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	require.NoError(t, err)
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(lis) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.regs[r.ResourceName] = r
	k.mu.Unlock()
	k.regWake <- struct{}{}
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := &podresourcesapi.ContainerResources{Name: "c"}
	for r, ids := range k.inUse {
		c.Devices = append(c.Devices, &podresourcesapi.ContainerDevices{ResourceName: r, DeviceIds: ids})
	}
	return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "p", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{c}}}}, nil
}

// plugin dials the endpoint a resource registered, as kubelet does.
func (k *fakeKubelet) plugin(t *testing.T, resource string) pluginapi.DevicePluginClient {
	t.Helper()
	require.Eventually(t, func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.regs[resource] != nil
	}, 10*time.Second, 10*time.Millisecond, "%s never registered", resource)
	k.mu.Lock()
	r := k.regs[resource]
	k.mu.Unlock()
	require.Equal(t, pluginapi.Version, r.Version)
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// watch follows a resource's ListAndWatch stream; next returns the next list as id -> health.
func watch(t *testing.T, c pluginapi.DevicePluginClient) func() map[string]string {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	require.NoError(t, err)
	return func() map[string]string {
		resp, err := stream.Recv()
		require.NoError(t, err)
		out := map[string]string{}
		for _, d := range resp.Devices {
			out[d.ID] = d.Health
		}
		return out
	}
}

func camera(name string, healthy bool) deviceplugin.Instance {
	pol := api.Policy{AllowedHostPaths: []string{"/sys/class/video4linux"}}
	return deviceplugin.Instance{
		Name: name, Configuration: "cam", Digest: "8120FE", Capacity: 2, Healthy: healthy,
		DeviceSpecs: []api.DeviceSpec{
			{ContainerPath: "/dev/video0", HostPath: "/dev/video0"},
			{ContainerPath: "/dev/shadow", HostPath: "/dev/../etc/shadow", Permissions: "rw"},
			{ContainerPath: "/dev/odd", HostPath: "/dev/odd", Permissions: "rwx"},
		},
		Mounts: []api.Mount{
			{ContainerPath: "/sys/video", HostPath: "/sys/class/video4linux/video0", ReadOnly: true},
			{ContainerPath: "/host", HostPath: "/"},
		},
		Env:             map[string]string{"UDEV_DEVNODE": "/dev/video0"},
		HostPathAllowed: pol.HostPathAllowed,
	}
}

// startPlugin runs a Plugin serving instances to a fake kubelet, whose pod-resources socket it
// asks which slots are in use.
func startPlugin(t *testing.T, instances ...deviceplugin.Instance) (*fakeKubelet, *deviceplugin.Plugin) {
	t.Helper()
	dir := shortTemp(t)
	k := startKubelet(t, dir)
	p := deviceplugin.New(deviceplugin.Options{Dir: dir, PodResources: filepath.Join(dir, "pod-resources.sock"), Log: testr.New(t), Poll: 20 * time.Millisecond})
	podres := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(podres, k)
	lis, err := net.Listen("unix", filepath.Join(dir, "pod-resources.sock"))
	require.NoError(t, err)
	go func() { _ = podres.Serve(lis) }()
	t.Cleanup(podres.Stop)
	p.Update(instances)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return k, p
}

func TestPluginServesSlotsAndAllocatesFromDiscovery(t *testing.T) {
	k, p := startPlugin(t, camera("cam-8120fe", true))

	inst := k.plugin(t, "akri.sh/cam-8120fe")
	cfg := k.plugin(t, "akri.sh/cam")
	nextInst, nextCfg := watch(t, inst), watch(t, cfg)
	require.Equal(t, map[string]string{"cam-8120fe-0": "Healthy", "cam-8120fe-1": "Healthy"}, nextInst())
	require.Equal(t, map[string]string{"cam-8120fe": "Healthy"}, nextCfg(), "the Configuration's resource offers each instance once")

	// Allocate answers with the device node (rwm by default) and the allowed mount only: a
	// path that climbs out of /dev, a bad permission and a mount of / are not served.
	resp, err := inst.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-8120fe-0"}}}})
	require.NoError(t, err)
	c := resp.ContainerResponses[0]
	require.Equal(t, []*pluginapi.DeviceSpec{{ContainerPath: "/dev/video0", HostPath: "/dev/video0", Permissions: "rwm"}}, c.Devices)
	require.Equal(t, []*pluginapi.Mount{{ContainerPath: "/sys/video", HostPath: "/sys/class/video4linux/video0", ReadOnly: true}}, c.Mounts)
	require.Equal(t, map[string]string{"UDEV_DEVNODE": "/dev/video0", "UDEV_DEVNODE_8120FE": "/dev/video0"}, c.Envs)

	// The Configuration's device stays Healthy while the instance has a slot free; allocating it
	// takes that slot (the second), which is withheld from the instance's resource ...
	resp, err = cfg.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-8120fe"}}}})
	require.NoError(t, err)
	require.Equal(t, "/dev/video0", resp.ContainerResponses[0].Envs["UDEV_DEVNODE"])
	require.Equal(t, map[string]string{"cam-8120fe-0": "Healthy", "cam-8120fe-1": "Unhealthy"}, nextInst())
	// ... and kubelet allocating it again (a restarted container) gets the same slot.
	_, err = cfg.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-8120fe"}}}})
	require.NoError(t, err)
	_, err = inst.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-8120fe-1"}}}})
	require.ErrorContains(t, err, "in use through akri.sh/cam")
	// While kubelet lists both in use (past the claims' grace of 30 polls) they stay withheld,
	// and are returned after.
	k.mu.Lock()
	k.inUse["akri.sh/cam-8120fe"] = []string{"cam-8120fe-0"}
	k.inUse["akri.sh/cam"] = []string{"cam-8120fe"}
	k.mu.Unlock()
	time.Sleep(time.Second)
	require.Equal(t, map[string]string{"cam-8120fe-0": "Healthy", "cam-8120fe-1": "Unhealthy"}, watch(t, inst)())
	k.mu.Lock()
	delete(k.inUse, "akri.sh/cam")
	k.mu.Unlock()
	require.Equal(t, map[string]string{"cam-8120fe-0": "Healthy", "cam-8120fe-1": "Healthy"}, nextInst())
	k.mu.Lock()
	delete(k.inUse, "akri.sh/cam-8120fe")
	k.mu.Unlock()

	// Two slots of one device in one container are still one device: its plain names are set.
	resp, err = inst.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-8120fe-0", "cam-8120fe-1"}}}})
	require.NoError(t, err)
	require.Equal(t, "/dev/video0", resp.ContainerResponses[0].Envs["UDEV_DEVNODE"])
	require.Len(t, resp.ContainerResponses[0].Devices, 1)

	// A device not seen in the latest discovery turns Unhealthy and is not allocated.
	p.Update([]deviceplugin.Instance{camera("cam-8120fe", false)})
	require.Equal(t, map[string]string{"cam-8120fe-0": "Unhealthy", "cam-8120fe-1": "Unhealthy"}, nextInst())
	_, err = inst.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-8120fe-1"}}}})
	require.ErrorContains(t, err, "not seen in the latest discovery")
}

// kubelet removes every socket in its folder when it starts: the plugin serves and registers
// again.
func TestPluginRegistersAgainWhenKubeletRestarts(t *testing.T) {
	dir := shortTemp(t)
	k := startKubelet(t, dir)
	p := deviceplugin.New(deviceplugin.Options{Dir: dir, Log: testr.New(t), Poll: 20 * time.Millisecond})
	p.Update([]deviceplugin.Instance{camera("cam-8120fe", true)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	k.plugin(t, "akri.sh/cam-8120fe")

	k.srv.Stop()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, os.Remove(filepath.Join(dir, e.Name())))
	}
	k = startKubelet(t, dir)
	next := watch(t, k.plugin(t, "akri.sh/cam-8120fe"))
	require.Equal(t, map[string]string{"cam-8120fe-0": "Healthy", "cam-8120fe-1": "Healthy"}, next())
}

// shortTemp is a folder whose socket paths fit in a unix socket address (108 bytes).
func shortTemp(t *testing.T) string {
	dir, err := os.MkdirTemp("", "dp")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// akri.sh/<configuration> offers each instance once, as Akri's configuration-level resources do:
// a request for two gets two different devices, and an instance whose slots are all given out
// through akri.sh/<instance> is not offered (and not allocated) through it.
func TestConfigurationResourceOffersEachInstanceOnce(t *testing.T) {
	b := camera("cam-a2fbb4", true)
	b.Digest = "A2FBB4"
	k, _ := startPlugin(t, camera("cam-8120fe", true), b)

	cfg := k.plugin(t, "akri.sh/cam")
	nextCfg := watch(t, cfg)
	require.Equal(t, map[string]string{"cam-8120fe": "Healthy", "cam-a2fbb4": "Healthy"}, nextCfg())
	resp, err := cfg.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-8120fe", "cam-a2fbb4"}}}})
	require.NoError(t, err)
	envs := resp.ContainerResponses[0].Envs
	require.Equal(t, "/dev/video0", envs["UDEV_DEVNODE_8120FE"])
	require.Equal(t, "/dev/video0", envs["UDEV_DEVNODE_A2FBB4"])
	require.NotContains(t, envs, "UDEV_DEVNODE", "two devices: only their digest names")

	// Both of b's slots given out through its own resource: b is not offered through cam.
	inst := k.plugin(t, "akri.sh/cam-a2fbb4")
	_, err = inst.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-a2fbb4-1"}}}})
	require.NoError(t, err)
	k.mu.Lock()
	k.inUse["akri.sh/cam"] = []string{"cam-8120fe"}
	k.inUse["akri.sh/cam-a2fbb4"] = []string{"cam-a2fbb4-1"}
	k.mu.Unlock()
	// cam's claim on b's slot 0 ends (kubelet no longer lists it, past the grace of 30 polls);
	// b's slot 0 is free again, then taken through b's resource.
	require.Eventually(t, func() bool {
		_, err := inst.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-a2fbb4-0"}}}})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		devs := watch(t, cfg)()
		return devs["cam-a2fbb4"] == "Unhealthy" && devs["cam-8120fe"] == "Healthy"
	}, 10*time.Second, 50*time.Millisecond, "no slot of b is free")
	_, err = cfg.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cam-a2fbb4"}}}})
	require.ErrorContains(t, err, "every slot of instance cam-a2fbb4 is in use")
}
