package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/agent/akripb"
)

// onvifHandler is a discovery handler as Akri's containers are: it serves
// DiscoveryHandler on its own unix socket, registers with the agent's
// registration socket, and streams the full device list whenever it
// changes.
type onvifHandler struct {
	akripb.UnimplementedDiscoveryHandlerServer

	mu       sync.Mutex
	requests []*akripb.DiscoverRequest
	lists    chan []*akripb.Device
	ended    int
	srv      *grpc.Server
}

func (h *onvifHandler) Discover(req *akripb.DiscoverRequest, stream akripb.DiscoveryHandler_DiscoverServer) error {
	h.mu.Lock()
	h.requests = append(h.requests, req)
	h.mu.Unlock()
	for {
		select {
		case <-stream.Context().Done():
			h.mu.Lock()
			h.ended++
			h.mu.Unlock()
			return nil
		case devices := <-h.lists:
			if err := stream.Send(&akripb.DiscoverResponse{Devices: devices}); err != nil {
				return err
			}
		}
	}
}

func (h *onvifHandler) seen() []*akripb.DiscoverRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*akripb.DiscoverRequest(nil), h.requests...)
}

// startHandler serves the handler on dir/onvif.sock and registers it.
func startHandler(t *testing.T, dir, registration string) *onvifHandler {
	t.Helper()
	return startHandlerAt(t, filepath.Join(dir, "onvif.sock"), registration)
}

// startHandlerAt serves an onvif handler on the socket sock and registers it.
func startHandlerAt(t *testing.T, sock, registration string) *onvifHandler {
	t.Helper()
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	h := &onvifHandler{lists: make(chan []*akripb.Device), srv: grpc.NewServer()}
	akripb.RegisterDiscoveryHandlerServer(h.srv, h)
	go func() { _ = h.srv.Serve(lis) }()
	t.Cleanup(h.srv.Stop)

	conn, err := grpc.NewClient("unix://"+registration, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = akripb.NewRegistrationClient(conn).RegisterDiscoveryHandler(ctx, &akripb.RegisterDiscoveryHandlerRequest{
		Name:         "onvif",
		Endpoint:     sock,
		EndpointType: akripb.RegisterDiscoveryHandlerRequest_UDS,
		Shared:       true,
	}, grpc.WaitForReady(true))
	require.NoError(t, err)
	return h
}

const onvifConfig = `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: akri-onvif
spec:
  discoveryHandler:
    name: onvif
    discoveryDetails: |+
      ipAddresses:
        action: Exclude
        items: []
      discoveryTimeoutSeconds: 1
    discoveryProperties:
    - name: USERNAME
      value: admin
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: ghcr.io/project-akri/akri/onvif-video-broker:latest
`

// serveRegistry serves an AkriRegistry on a registration socket in a short temporary folder; it
// returns the folder, the socket and a channel that receives the registry's notifications.
func serveRegistry(t *testing.T) (*agent.AkriRegistry, string, string, chan struct{}) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gb-akri-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	registration := filepath.Join(dir, agent.RegistrationSocketName)
	notified := make(chan struct{}, 100)
	reg := agent.NewAkriRegistry(logr.Discard(), func() {
		select {
		case notified <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- reg.Serve(ctx, registration) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
	})
	return reg, dir, registration, notified
}

func TestAkriDiscoveryHandlerProtocol(t *testing.T) {
	reg, dir, registration, notified := serveRegistry(t)

	f := newDirFixture(t, map[string]string{"configurations/onvif.yaml": onvifConfig})
	a := f.agent(t, "edge-a", func(o *agent.Options) { o.Handlers = agent.Sources{reg, agent.Builtin{}} })
	sync := func() agent.Outcome {
		t.Helper()
		out, err := a.Sync(context.Background())
		require.NoError(t, err)
		return out
	}
	waitNotify := func() {
		t.Helper()
		select {
		case <-notified:
		case <-time.After(10 * time.Second):
			t.Fatal("the registry never reported a change")
		}
	}

	// Before the handler registers, the Configuration has no handler.
	require.Zero(t, sync().Devices)

	h := startHandler(t, dir, registration)
	require.Equal(t, []string{"onvif"}, reg.Registered())
	drain(notified)

	// The first cycle opens the stream; nothing has arrived yet.
	require.Zero(t, sync().Devices)
	require.Eventually(t, func() bool { return len(h.seen()) == 1 }, 10*time.Second, 5*time.Millisecond)
	req := h.seen()[0]
	require.Equal(t, "ipAddresses:\n  action: Exclude\n  items: []\ndiscoveryTimeoutSeconds: 1\n", req.GetDiscoveryDetails())
	require.Equal(t, []byte("admin"), req.GetDiscoveryProperties()["USERNAME"].GetVec())

	h.lists <- []*akripb.Device{
		{
			Id:          "uuid:cam-2",
			Properties:  map[string]string{"ONVIF_DEVICE_SERVICE_URL": "http://10.0.0.2/onvif/device_service", "ONVIF_DEVICE_IP_ADDRESS": "10.0.0.2"},
			Mounts:      []*akripb.Mount{{ContainerPath: "/var/cam", HostPath: "/srv/cam", ReadOnly: true}},
			DeviceSpecs: []*akripb.DeviceSpec{{ContainerPath: "/dev/video9", HostPath: "/dev/video9", Permissions: "r"}},
		},
		{Id: "uuid:cam-1", Properties: map[string]string{"ONVIF_DEVICE_IP_ADDRESS": "10.0.0.1"}},
	}
	waitNotify()
	require.Equal(t, 2, sync().Devices)
	require.Equal(t, `apiVersion: gitbroker.dev/v1alpha1
kind: NodeInventory
metadata:
  name: edge-a
spec:
  configurations:
  - devices:
    - id: uuid:cam-1
      properties:
        ONVIF_DEVICE_IP_ADDRESS: 10.0.0.1
      shared: true
    - deviceSpecs:
      - containerPath: /dev/video9
        hostPath: /dev/video9
        permissions: r
      id: uuid:cam-2
      mounts:
      - containerPath: /var/cam
        hostPath: /srv/cam
        readOnly: true
      properties:
        ONVIF_DEVICE_IP_ADDRESS: 10.0.0.2
        ONVIF_DEVICE_SERVICE_URL: http://10.0.0.2/onvif/device_service
      shared: true
    name: akri-onvif
    namespace: default
`, f.read(t, "inventory/edge-a.yaml"))

	// Each response replaces the list; cam-2 vanishes and, being shared,
	// stays for the grace period.
	h.lists <- []*akripb.Device{{Id: "uuid:cam-1", Properties: map[string]string{"ONVIF_DEVICE_IP_ADDRESS": "10.0.0.1"}}}
	waitNotify()
	require.Equal(t, 2, sync().Devices)
	f.clock.Advance(5 * time.Minute)
	require.Equal(t, 1, sync().Devices)
	require.Len(t, h.seen(), 1, "one stream per Configuration, kept open across cycles")

	// The handler dies: it is deregistered and its devices age out.
	h.srv.Stop()
	waitNotify()
	require.Eventually(t, func() bool { return len(reg.Registered()) == 0 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, sync().Devices)
	f.clock.Advance(5 * time.Minute)
	require.Zero(t, sync().Devices)

	// It comes back and registers again, as Akri's handlers do.
	h2 := startHandler(t, dir, registration)
	drain(notified)
	require.Zero(t, sync().Devices)
	require.Eventually(t, func() bool { return len(h2.seen()) == 1 }, 10*time.Second, 5*time.Millisecond)
	h2.lists <- []*akripb.Device{{Id: "uuid:cam-3"}}
	waitNotify()
	require.Equal(t, 1, sync().Devices)

	// Removing the Configuration closes its stream.
	require.NoError(t, os.Remove(filepath.Join(f.dir, "configurations/onvif.yaml")))
	require.Zero(t, sync().Devices)
	require.Eventually(t, func() bool {
		h2.mu.Lock()
		defer h2.mu.Unlock()
		return h2.ended == 1
	}, 10*time.Second, 5*time.Millisecond, "the stream is closed once its Configuration is gone")
}

func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// Several endpoints registering one handler name are one handler, as in Akri: their devices are
// merged, and one going away leaves the others'. Changed discoveryProperties open a new stream
// with them, and the old one is closed.
func TestAkriEndpointsMergeAndPropertiesRestartStreams(t *testing.T) {
	reg, dir, registration, _ := serveRegistry(t)
	f := newDirFixture(t, map[string]string{"configurations/onvif.yaml": onvifConfig})
	a := f.agent(t, "edge-a", func(o *agent.Options) { o.Handlers = agent.Sources{reg, agent.Builtin{}} })
	devices := func() int {
		t.Helper()
		out, err := a.Sync(context.Background())
		require.NoError(t, err)
		return out.Devices
	}
	north := startHandlerAt(t, filepath.Join(dir, "north.sock"), registration)
	south := startHandlerAt(t, filepath.Join(dir, "south.sock"), registration)
	require.Equal(t, []string{"onvif"}, reg.Registered())
	require.Zero(t, devices())
	for _, h := range []*onvifHandler{north, south} {
		require.Eventually(t, func() bool { return len(h.seen()) == 1 }, 10*time.Second, 5*time.Millisecond)
	}
	north.lists <- []*akripb.Device{{Id: "uuid:n1"}, {Id: "uuid:both"}}
	south.lists <- []*akripb.Device{{Id: "uuid:s1"}, {Id: "uuid:both"}}
	require.Eventually(t, func() bool { return devices() == 3 }, 10*time.Second, 10*time.Millisecond, "both endpoints' devices, once each")

	south.srv.Stop()
	require.Eventually(t, func() bool { return len(reg.Endpoints("onvif")) == 1 }, 10*time.Second, 5*time.Millisecond, "south is deregistered")
	require.Equal(t, []string{"onvif"}, reg.Registered())
	require.Equal(t, 3, devices(), "south's device stays for its grace period")
	f.clock.Advance(5 * time.Minute)
	require.Equal(t, 2, devices(), "south's device aged out; north's stay")

	f.write(t, "configurations/onvif.yaml", strings.Replace(onvifConfig, "value: admin", "value: operator", 1))
	devices()
	require.Eventually(t, func() bool { return len(north.seen()) == 2 }, 10*time.Second, 5*time.Millisecond, "a new stream for the new properties")
	require.Equal(t, []byte("operator"), north.seen()[1].GetDiscoveryProperties()["USERNAME"].GetVec())
	require.Eventually(t, func() bool {
		north.mu.Lock()
		defer north.mu.Unlock()
		return north.ended == 1
	}, 10*time.Second, 5*time.Millisecond, "the stream with the old properties is closed")
}

// Akri's own agent serving the registration socket is never taken over (it was removed and
// replaced, so handlers registered with one agent or the other); a stale socket is; a file that
// is not a socket is left alone. On exit the agent removes only its own socket.
func TestRegistrySocketIsNotTakenOver(t *testing.T) {
	dir, err := os.MkdirTemp("", "gb-akri-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, agent.RegistrationSocketName)
	reg := agent.NewAkriRegistry(logr.Discard(), nil)

	akri, err := net.Listen("unix", path)
	require.NoError(t, err)
	err = reg.Serve(context.Background(), path)
	require.ErrorContains(t, err, "another process serves "+path)
	conn, err := net.Dial("unix", path)
	require.NoError(t, err, "Akri's socket still answers")
	conn.Close()

	// Akri's agent died without removing its socket: the gitbroker agent takes the path.
	akri.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, akri.Close())
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- reg.Serve(ctx, path) }()
	require.Eventually(t, func() bool {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-served)
	_, err = os.Lstat(path)
	require.True(t, os.IsNotExist(err), "its own socket is removed on exit")

	require.NoError(t, os.WriteFile(path, []byte("x"), 0o600))
	require.ErrorContains(t, reg.Serve(context.Background(), path), "is not a socket; not removing it")
}
