package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/gitbroker/gitbroker/agent/akripb"
	"github.com/gitbroker/gitbroker/api"
)

// Akri's well-known locations: handlers find the agent's registration
// socket in DISCOVERY_HANDLERS_DIRECTORY.
const (
	DefaultDiscoveryHandlersDirectory = "/var/lib/akri"
	RegistrationSocketName            = "agent-registration.sock"
)

// AkriRegistry is the agent's side of Akri's discovery-handler protocol.
// It serves Registration on a unix socket; every handler that registers is
// a Source under its name. For each Configuration that names it, the
// registry keeps one Discover stream open and remembers the latest device
// list the handler sent.
//
// As in Akri, a handler whose stream breaks is deregistered (its devices
// then age out through the grace period) until it registers again, and
// several endpoints registering one name (a handler per network, say) are
// one handler whose devices are all of theirs.
type AkriRegistry struct {
	akripb.UnimplementedRegistrationServer

	log    logr.Logger
	notify func()

	mu sync.Mutex
	// handlers are the registered endpoints by handler name, then endpoint.
	handlers map[string]map[string]*akriHandler
}

var (
	_ Source   = &AkriRegistry{}
	_ Retainer = &AkriRegistry{}
)

// NewAkriRegistry returns a registry. notify is called whenever a handler
// sends devices or goes away, so the agent can run a cycle at once.
func NewAkriRegistry(log logr.Logger, notify func()) *AkriRegistry {
	if notify == nil {
		notify = func() {}
	}
	return &AkriRegistry{log: log, notify: notify, handlers: map[string]map[string]*akriHandler{}}
}

// Serve listens on the unix socket at path until ctx ends, then stops the
// server and closes every handler connection.
func (r *AkriRegistry) Serve(ctx context.Context, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := claimSocket(path); err != nil {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	// On exit the socket is removed only while it is still this listener's: one another agent
	// made after this one stopped listening is left alone.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	ours := inode(path)
	srv := grpc.NewServer()
	akripb.RegisterRegistrationServer(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		srv.GracefulStop()
	}()
	err = srv.Serve(lis)
	<-done
	r.closeAll()
	if ino := inode(path); ino != 0 && ino == ours {
		_ = os.Remove(path)
	}
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// claimSocket makes way for the registration socket at path: a stale socket (nothing answers) is
// removed, but one another process serves, Akri's own agent say, is never taken over: handlers
// would register with one agent or the other at random.
func claimSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("%s exists and is not a socket; not removing it", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = conn.Close()
		return fmt.Errorf("another process serves %s (Akri's agent?): gitbroker's agent does not take over a registration socket in use; "+
			"stop the other agent (see the README on replacing Akri) or give --discovery-handlers-dir another folder", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	return nil
}

// inode identifies the file at path, 0 when there is none.
func inode(path string) uint64 {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// RegisterDiscoveryHandler implements Akri's Registration service.
func (r *AkriRegistry) RegisterDiscoveryHandler(_ context.Context, req *akripb.RegisterDiscoveryHandlerRequest) (*akripb.Empty, error) {
	if req.GetName() == "" || req.GetEndpoint() == "" {
		return nil, status.Error(codes.InvalidArgument, "name and endpoint are required")
	}
	target := req.GetEndpoint()
	switch req.GetEndpointType() {
	case akripb.RegisterDiscoveryHandlerRequest_UDS:
		target = "unix://" + target
	case akripb.RegisterDiscoveryHandlerRequest_NETWORK:
		target = strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unknown endpoint type %d", req.GetEndpointType())
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "endpoint %q: %v", req.GetEndpoint(), err)
	}
	h := &akriHandler{
		registry: r,
		name:     req.GetName(),
		endpoint: req.GetEndpoint(),
		shared:   req.GetShared(),
		conn:     conn,
		client:   akripb.NewDiscoveryHandlerClient(conn),
		streams:  map[string]*akriStream{},
	}
	r.mu.Lock()
	if r.handlers[h.name] == nil {
		r.handlers[h.name] = map[string]*akriHandler{}
	}
	old := r.handlers[h.name][h.endpoint]
	r.handlers[h.name][h.endpoint] = h
	r.mu.Unlock()
	if old != nil {
		old.close()
	}
	r.log.Info("discovery handler registered", "handler", h.name, "endpoint", h.endpoint, "shared", h.shared)
	r.notify()
	return &akripb.Empty{}, nil
}

// Handler implements Source: every endpoint registered under name, as one handler.
func (r *AkriRegistry) Handler(name string) (Handler, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.handlers[name]) == 0 {
		return nil, false
	}
	return akriGroup{r, name}, true
}

// endpoints are the handlers registered under name, in endpoint order.
func (r *AkriRegistry) endpoints(name string) []*akriHandler {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.handlers[name]
	out := make([]*akriHandler, 0, len(m))
	for _, e := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[e])
	}
	return out
}

// akriGroup is the endpoints of one handler name: their devices merged, as Akri merges them. A
// device two endpoints report is the first endpoint's. While some endpoint has not reported
// yet, the others' devices still count: a vanished device ages out through its grace period,
// never at once.
type akriGroup struct {
	r    *AkriRegistry
	name string
}

func (g akriGroup) Discover(ctx context.Context, req Request) ([]api.Device, error) {
	var out []api.Device
	seen := map[string]bool{}
	var firstErr error
	answered := false
	for _, h := range g.r.endpoints(g.name) {
		devices, err := h.Discover(ctx, req)
		if err != nil {
			if firstErr == nil || errors.Is(firstErr, ErrNotReady) {
				firstErr = err
			}
			continue
		}
		answered = true
		for _, d := range devices {
			if !seen[d.ID] {
				seen[d.ID] = true
				out = append(out, d)
			}
		}
	}
	if !answered {
		if firstErr == nil {
			firstErr = fmt.Errorf("discovery handler %s is gone", g.name)
		}
		return nil, firstErr
	}
	return out, nil
}

// Retain implements Retainer: streams for requests no longer wanted are
// closed.
func (r *AkriRegistry) Retain(keys map[string]bool) {
	for _, h := range r.all() {
		h.retain(keys)
	}
}

// Registered lists the names of the registered handlers.
func (r *AkriRegistry) Registered() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.handlers))
}

// Endpoints lists the endpoints registered under name, in order.
func (r *AkriRegistry) Endpoints(name string) []string {
	var out []string
	for _, h := range r.endpoints(name) {
		out = append(out, h.endpoint)
	}
	return out
}

// all lists every registered endpoint.
func (r *AkriRegistry) all() []*akriHandler {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*akriHandler
	for _, m := range r.handlers {
		for _, h := range m {
			out = append(out, h)
		}
	}
	return out
}

func (r *AkriRegistry) deregister(h *akriHandler, err error) {
	r.mu.Lock()
	if r.handlers[h.name][h.endpoint] != h {
		r.mu.Unlock()
		return
	}
	delete(r.handlers[h.name], h.endpoint)
	if len(r.handlers[h.name]) == 0 {
		delete(r.handlers, h.name)
	}
	r.mu.Unlock()
	h.close()
	r.log.Error(err, "discovery handler lost; its devices age out until it registers again", "handler", h.name, "endpoint", h.endpoint)
	r.notify()
}

func (r *AkriRegistry) closeAll() {
	handlers := r.all()
	r.mu.Lock()
	r.handlers = map[string]map[string]*akriHandler{}
	r.mu.Unlock()
	for _, h := range handlers {
		h.close()
	}
}

type akriHandler struct {
	registry *AkriRegistry
	name     string
	endpoint string
	shared   bool
	conn     *grpc.ClientConn
	client   akripb.DiscoveryHandlerClient

	mu      sync.Mutex
	closed  bool
	streams map[string]*akriStream
}

type akriStream struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	devices []api.Device
	ready   bool
}

// Discover implements Handler: it returns the latest list the handler's
// stream for this request sent, opening the stream on first use.
func (h *akriHandler) Discover(_ context.Context, req Request) ([]api.Device, error) {
	key := requestKey(req)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, fmt.Errorf("discovery handler %s is gone", h.name)
	}
	s, ok := h.streams[key]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		s = &akriStream{cancel: cancel}
		h.streams[key] = s
		go h.run(ctx, s, req)
	}
	h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		return nil, ErrNotReady
	}
	return cloneDevices(s.devices), nil
}

// run holds one Discover stream open and records each list it receives.
func (h *akriHandler) run(ctx context.Context, s *akriStream, req Request) {
	msg := &akripb.DiscoverRequest{DiscoveryDetails: req.Details}
	if len(req.Properties) > 0 {
		msg.DiscoveryProperties = map[string]*akripb.ByteData{}
		for k, v := range req.Properties {
			msg.DiscoveryProperties[k] = &akripb.ByteData{Vec: v}
		}
	}
	stream, err := h.client.Discover(ctx, msg)
	for err == nil {
		var resp *akripb.DiscoverResponse
		resp, err = stream.Recv()
		if err != nil {
			break
		}
		devices := make([]api.Device, 0, len(resp.GetDevices()))
		for _, d := range resp.GetDevices() {
			devices = append(devices, fromProto(d, h.shared))
		}
		s.mu.Lock()
		s.devices, s.ready = devices, true
		s.mu.Unlock()
		h.registry.notify()
	}
	if ctx.Err() != nil {
		return // closed on purpose
	}
	if status.Code(err) == codes.InvalidArgument {
		// The handler rejected this Configuration's discoveryDetails;
		// the handler itself is fine.
		h.registry.log.Error(err, "discovery handler rejected the Configuration's discoveryDetails",
			"handler", h.name, "configuration", req.Configuration)
		return
	}
	h.registry.deregister(h, fmt.Errorf("discover stream for %s ended: %w", req.Configuration, err))
}

func (h *akriHandler) retain(keys map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, s := range h.streams {
		if !keys[k] {
			s.cancel()
			delete(h.streams, k)
		}
	}
}

func (h *akriHandler) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for k, s := range h.streams {
		s.cancel()
		delete(h.streams, k)
	}
	h.mu.Unlock()
	_ = h.conn.Close()
}

func fromProto(d *akripb.Device, shared bool) api.Device {
	out := api.Device{ID: d.GetId(), Shared: shared}
	if len(d.GetProperties()) > 0 {
		out.Properties = make(map[string]string, len(d.GetProperties()))
		for k, v := range d.GetProperties() {
			out.Properties[k] = v
		}
	}
	for _, m := range d.GetMounts() {
		out.Mounts = append(out.Mounts, api.Mount{ContainerPath: m.GetContainerPath(), HostPath: m.GetHostPath(), ReadOnly: m.GetReadOnly()})
	}
	for _, s := range d.GetDeviceSpecs() {
		out.DeviceSpecs = append(out.DeviceSpecs, api.DeviceSpec{ContainerPath: s.GetContainerPath(), HostPath: s.GetHostPath(), Permissions: s.GetPermissions()})
	}
	return out
}

func cloneDevices(in []api.Device) []api.Device {
	out := make([]api.Device, len(in))
	for i, d := range in {
		c := d
		if d.Properties != nil {
			c.Properties = make(map[string]string, len(d.Properties))
			for k, v := range d.Properties {
				c.Properties[k] = v
			}
		}
		c.Mounts = append([]api.Mount(nil), d.Mounts...)
		c.DeviceSpecs = append([]api.DeviceSpec(nil), d.DeviceSpecs...)
		out[i] = c
	}
	return out
}
