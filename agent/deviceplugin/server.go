package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gitbroker/gitbroker/api"
)

// start serves resource on a socket of its own in the device-plugin folder.
func (p *Plugin) start(resource string) (*server, error) {
	s := &server{p: p, resource: resource, socket: filepath.Join(p.opts.Dir, socketName(resource))}
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	lis, err := net.Listen("unix", s.socket)
	if err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(lis) }()
	return s, nil
}

// socketName is the resource's socket: short and fixed, so a restart serves the same path.
func socketName(resource string) string {
	return "gitbroker-" + api.AkriDigest(api.DeviceKey{ID: resource, Shared: true}, 8) + ".sock"
}

// server is one resource's device-plugin endpoint.
type server struct {
	pluginapi.UnimplementedDevicePluginServer
	p          *Plugin
	resource   string
	socket     string
	grpc       *grpc.Server
	registered bool
	kubelet    uint64
	reported   string
	emptySince time.Time
}

func (s *server) register(ctx context.Context, kubelet uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(s.p.opts.Dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socket),
		ResourceName: s.resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("registering %s with kubelet: %w", s.resource, err)
	}
	s.registered, s.kubelet, s.reported = true, kubelet, ""
	s.p.opts.Log.Info("device plugin registered with kubelet", "resource", s.resource, "socket", s.socket)
	return nil
}

func (s *server) stop() {
	s.grpc.Stop()
	_ = os.Remove(s.socket)
}

// GetDevicePluginOptions implements pluginapi.DevicePluginServer.
func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch implements pluginapi.DevicePluginServer: the resource's slots, again at every change.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	var last []*pluginapi.Device
	for sent := false; ; sent = true {
		devs, changed := s.p.devices(s.resource)
		if !sent || !sameDevices(last, devs) {
			if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
			last = devs
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

func sameDevices(a, b []*pluginapi.Device) bool {
	return slices.EqualFunc(a, b, func(x, y *pluginapi.Device) bool { return x.ID == y.ID && x.Health == y.Health })
}

// Allocate implements pluginapi.DevicePluginServer.
func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		r, err := s.p.allocate(s.resource, c.GetDevicesIds(), s.p.opts.PodResources != "")
		if err != nil {
			s.p.opts.Log.Error(err, "refused an allocation", "resource", s.resource)
			return nil, err
		}
		s.p.opts.Log.Info("allocated", "resource", s.resource, "devices", c.GetDevicesIds(), "deviceNodes", len(r.Devices), "mounts", len(r.Mounts))
		out.ContainerResponses = append(out.ContainerResponses, r)
	}
	return out, nil
}

// GetPreferredAllocation implements pluginapi.DevicePluginServer; the plugin does not ask for it.
func (s *server) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// PreStartContainer implements pluginapi.DevicePluginServer; the plugin does not ask for it.
func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
