// Package dra owns the agent's side of Dynamic Resource Allocation (docs/DESIGN.md, "Devices
// counted once across the cluster", DRA mode): the agent is the node's DRA kubelet plugin for
// driver gitbroker.dev (k8s.io/dynamic-resource-allocation/kubeletplugin). The ResourceSlices
// come from git, rendered and reviewed like brokers, so the plugin publishes none; the scheduler
// allocates their devices, and kubelet asks the plugin to prepare what it allocated for a Pod on
// this node.
//
// NodePrepareResources answers from the agent's current discovery, never from the claim or from
// git: each allocated device must be an instance this node sees now (a device gone since the
// allocation fails the preparation, which kubelet reports as an event on the Pod and retries),
// and what the container gets is a CDI device (tags.cncf.io/container-device-interface) written
// into the runtime's CDI folder: the device nodes, with the host node's owner and group, and
// mounts, each only under /dev or a prefix the Configuration allows, and the device's properties
// as environment variables, as the device plugin serves them. NodeUnprepareResources removes the
// claim's CDI file. The plugin reads ResourceClaims with its API credential, which may only read
// them (docs/TRUST.md).
package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
)

// Defaults for Options.
const (
	DefaultPluginsDir  = kubeletplugin.KubeletPluginsDir
	DefaultRegistryDir = kubeletplugin.KubeletRegistryDir
	DefaultCDIDir      = "/var/run/cdi"
	// cdiKind is the kind of the CDI devices the plugin writes: <vendor>/<class>.
	cdiKind = api.DRADriver + "/device"
	// cdiVersion is the CDI spec version the files declare: device nodes with a host path
	// (0.5.0) and annotations (0.6.0).
	cdiVersion = "0.6.0"
)

// Options configures a Plugin.
type Options struct {
	// Node is this node's name.
	Node string
	// Client reads the ResourceClaims kubelet asks to prepare.
	Client kubernetes.Interface
	// PluginsDir holds the plugin's socket folder (PluginsDir/gitbroker.dev), RegistryDir the
	// kubelet's plugin registration folder: both as kubelet sees them.
	PluginsDir, RegistryDir string
	// CDIDir is the container runtime's CDI spec folder the plugin writes to.
	CDIDir string
	// DevRoot, when set, is where the host's /dev is seen (the agent's --udev-root): a device
	// node's owner and group are read there, so the container's node has them as the host's has
	// (runtimes give a device plugin's nodes the host's owner and group; a CDI device has only
	// what its spec says).
	DevRoot string
	Log     logr.Logger
}

// Plugin is the node's DRA kubelet plugin.
type Plugin struct {
	opts Options

	mu        sync.Mutex
	instances map[string]deviceplugin.Instance // by namespace/name
	refused   map[string]bool

	// helper is the running kubelet plugin, startErr why it last failed to start.
	state    sync.Mutex
	helper   *kubeletplugin.Helper
	startErr error
}

// New returns a Plugin; Run serves it.
func New(opts Options) *Plugin {
	if opts.PluginsDir == "" {
		opts.PluginsDir = DefaultPluginsDir
	}
	if opts.RegistryDir == "" {
		opts.RegistryDir = DefaultRegistryDir
	}
	if opts.CDIDir == "" {
		opts.CDIDir = DefaultCDIDir
	}
	return &Plugin{opts: opts, instances: map[string]deviceplugin.Instance{}, refused: map[string]bool{}}
}

// Update replaces what the node sees, after every discovery.
func (p *Plugin) Update(list []deviceplugin.Instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.instances = make(map[string]deviceplugin.Instance, len(list))
	for _, in := range list {
		p.instances[in.Namespace+"/"+in.Name] = in
	}
}

// Run registers the plugin with kubelet and serves it until ctx ends. Kubelet finds the
// registration socket in its plugin registry when it starts, so a restarted kubelet finds the
// plugin again by itself. A plugin that cannot start (kubelet's folders not there yet) tries
// again every retry, saying why each time the reason changes.
func (p *Plugin) Run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, p.opts.Log)
	last := ""
	for {
		helper, err := p.start(ctx)
		p.state.Lock()
		p.helper, p.startErr = helper, err
		p.state.Unlock()
		if err == nil {
			p.opts.Log.Info("serving the node's DRA kubelet plugin", "driver", api.DRADriver, "registry", p.opts.RegistryDir, "cdi", p.opts.CDIDir)
			<-ctx.Done()
			helper.Stop()
			p.state.Lock()
			p.helper = nil
			p.state.Unlock()
			return nil
		}
		if err.Error() != last {
			p.opts.Log.Error(err, "the DRA plugin could not start; trying again", "every", retry.String())
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// Ready says why the plugin does not serve kubelet yet: not started, or kubelet has not
// registered it (a node's kubelet without DRA never does). nil once kubelet has.
func (p *Plugin) Ready() error {
	p.state.Lock()
	defer p.state.Unlock()
	switch {
	case p.startErr != nil:
		return fmt.Errorf("the DRA plugin could not start: %w", p.startErr)
	case p.helper == nil:
		return errors.New("the DRA plugin has not started")
	}
	st := p.helper.RegistrationStatus()
	switch {
	case st == nil:
		return errors.New("kubelet has not registered the DRA plugin " + api.DRADriver + " yet")
	case !st.PluginRegistered:
		return fmt.Errorf("kubelet refused the DRA plugin %s: %s", api.DRADriver, st.Error)
	}
	return nil
}

// retry is how long Run waits before it tries to start again.
const retry = 5 * time.Second

func (p *Plugin) start(ctx context.Context) (*kubeletplugin.Helper, error) {
	if err := os.MkdirAll(p.opts.CDIDir, 0o755); err != nil {
		return nil, fmt.Errorf("CDI folder: %w", err)
	}
	dataDir := filepath.Join(p.opts.PluginsDir, api.DRADriver)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, err
	}
	if _, err := os.Stat(p.opts.RegistryDir); err != nil {
		return nil, fmt.Errorf("kubelet's plugin registry: %w", err)
	}
	return kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(api.DRADriver),
		kubeletplugin.NodeName(p.opts.Node),
		kubeletplugin.KubeClient(p.opts.Client),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.RegistrarDirectoryPath(p.opts.RegistryDir),
		kubeletplugin.HealthService(false),
	)
}

// PrepareResourceClaims gives each claim the CDI devices of what was allocated to it from this
// node's devices; a claim with a device this node does not see now fails with why.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devices, err := p.prepare(c)
		if err != nil {
			p.opts.Log.Error(err, "not preparing a claim", "claim", klog.KObj(c))
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

// cdiName is a valid CDI device name made of a claim's UID and one of its devices.
var cdiName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

func (p *Plugin) prepare(c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	spec := cdispec.Spec{
		Version:     cdiVersion,
		Kind:        cdiKind,
		Annotations: map[string]string{"gitbroker.dev/claim": c.Namespace + "/" + c.Name},
	}
	var devices []kubeletplugin.Device
	var taken []string
	p.mu.Lock()
	defer p.mu.Unlock()
	held, err := p.held(c.UID)
	if err != nil {
		return nil, err
	}
	for i, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != api.DRADriver {
			continue
		}
		in, err := p.allocated(r)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s, device %s of pool %s: %w", c.Namespace, c.Name, r.Device, r.Pool, err)
		}
		device := r.Pool + "/" + r.Device
		if other, ok := held[device]; ok {
			// The scheduler never allocates a device twice; the node is the last line of
			// defence should anything have gone wrong.
			return nil, fmt.Errorf("claim %s/%s: device %s of pool %s is prepared for claim %s already", c.Namespace, c.Name, r.Device, r.Pool, other)
		}
		taken = append(taken, device)
		name := fmt.Sprintf("%s-%d", c.UID, i)
		if !cdiName.MatchString(name) {
			return nil, fmt.Errorf("claim %s/%s: UID %q makes no CDI device name", c.Namespace, c.Name, c.UID)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: p.edits(in)})
		devices = append(devices, kubeletplugin.Device{
			Requests:     []string{r.Request},
			PoolName:     r.Pool,
			DeviceName:   r.Device,
			CDIDeviceIDs: []string{cdiKind + "=" + name},
		})
	}
	if len(devices) == 0 {
		return nil, nil
	}
	spec.Annotations[annotationDevices] = strings.Join(taken, ",")
	if err := p.writeSpec(c.UID, &spec); err != nil {
		return nil, err
	}
	return devices, nil
}

// annotationDevices lists, in a claim's CDI spec, the devices prepared for it (pool/device,
// comma-separated): what the node's other claims may not be given.
const annotationDevices = "gitbroker.dev/devices"

// held are the devices prepared for claims other than uid, by pool/device, each with its claim,
// read from the CDI specs in the folder (so a restarted agent knows them too).
func (p *Plugin) held(uid types.UID) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(p.opts.CDIDir, api.DRADriver+"-*.json"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, f := range files {
		if f == p.specFile(uid) {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("reading the prepared claims: %w", err)
		}
		var spec cdispec.Spec
		if err := json.Unmarshal(data, &spec); err != nil {
			return nil, fmt.Errorf("reading the prepared claims: %s: %w", f, err)
		}
		for _, d := range strings.Split(spec.Annotations[annotationDevices], ",") {
			if d != "" {
				out[d] = spec.Annotations["gitbroker.dev/claim"]
			}
		}
	}
	return out, nil
}

// allocated is the instance an allocated device is a slot of, if this node sees it now.
func (p *Plugin) allocated(r resourceapi.DeviceRequestAllocationResult) (deviceplugin.Instance, error) {
	node, ns, name, err := api.ParseDRAPool(r.Pool)
	if err != nil {
		return deviceplugin.Instance{}, err
	}
	if node != "" && node != p.opts.Node {
		return deviceplugin.Instance{}, fmt.Errorf("the device is node %s's, not %s's", node, p.opts.Node)
	}
	in, ok := p.instances[ns+"/"+name]
	switch {
	case !ok:
		return in, fmt.Errorf("instance %s is not discovered on node %s (the device is gone, or this node does not reach it)", name, p.opts.Node)
	case !in.Healthy:
		return in, fmt.Errorf("instance %s was not seen in node %s's latest discovery", name, p.opts.Node)
	}
	slot := api.ParseDRADeviceName(r.Device)
	if slot < 0 || slot >= in.Capacity {
		return in, fmt.Errorf("instance %s has no slot %q (capacity %d)", name, r.Device, in.Capacity)
	}
	return in, nil
}

// edits are what a container gets of an instance: its device nodes with the host node's owner
// and group, its mounts, and its properties and broker properties as KEY and KEY_<DIGEST>.
func (p *Plugin) edits(in deviceplugin.Instance) cdispec.ContainerEdits {
	var e cdispec.ContainerEdits
	devs, mounts := in.Served(p.refuse)
	for _, d := range devs {
		node := &cdispec.DeviceNode{Path: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions}
		if uid, gid, ok := p.owner(d.HostPath); ok {
			node.UID, node.GID = &uid, &gid
		}
		e.DeviceNodes = append(e.DeviceNodes, node)
	}
	for _, m := range mounts {
		opts := []string{"rbind", "rw"}
		if m.ReadOnly {
			opts = []string{"rbind", "ro"}
		}
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: "bind", Options: opts})
	}
	keys := make([]string, 0, len(in.Env))
	for k := range in.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.Env = append(e.Env, k+"="+in.Env[k], k+"_"+in.Digest+"="+in.Env[k])
	}
	return e
}

// owner is a host device node's owner and group, read under DevRoot.
func (p *Plugin) owner(hostPath string) (uint32, uint32, bool) {
	if p.opts.DevRoot == "" {
		return 0, 0, false
	}
	fi, err := os.Lstat(filepath.Join(p.opts.DevRoot, filepath.Clean("/"+hostPath)))
	if err != nil {
		return 0, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi.Mode()&os.ModeDevice == 0 {
		return 0, 0, false
	}
	return st.Uid, st.Gid, true
}

// refuse logs a path the plugin does not serve, once per instance and path.
func (p *Plugin) refuse(in deviceplugin.Instance, hostPath string, why error) {
	key := in.Name + "\x00" + hostPath
	if !p.refused[key] {
		p.refused[key] = true
		p.opts.Log.Error(why, "not serving a path a discovery handler reported", "instance", in.Name, "hostPath", hostPath)
	}
}

// specFile is a claim's CDI file; its name says which driver wrote it, as CDI asks.
func (p *Plugin) specFile(uid types.UID) string {
	return filepath.Join(p.opts.CDIDir, api.DRADriver+"-"+string(uid)+".json")
}

// writeSpec writes a claim's CDI file whole, by a rename in the folder: the runtime never reads
// half of one, and a symlink put where the file goes is replaced, never written through.
func (p *Plugin) writeSpec(uid types.UID, spec *cdispec.Spec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(p.opts.CDIDir, ".gitbroker-*.tmp")
	if err != nil {
		return fmt.Errorf("writing the CDI spec: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the CDI spec: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p.specFile(uid))
}

// UnprepareResourceClaims removes the claims' CDI files; a claim never prepared has none.
func (p *Plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		if !cdiName.MatchString(string(c.UID)) {
			// A UID is the API server's; one that could name a path elsewhere is nobody's file.
			out[c.UID] = fmt.Errorf("claim %s: UID %q names no CDI spec of this plugin", c.String(), c.UID)
			continue
		}
		err := os.Remove(p.specFile(c.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError logs what the helper met in the background; nothing it does is fatal to the agent
// (the plugin publishes no ResourceSlices, whose errors are the fatal kind).
func (p *Plugin) HandleError(_ context.Context, err error, msg string) {
	p.opts.Log.Error(err, msg)
}

// WatchHealthStatus is not served (HealthService is off): a device the agent stops seeing fails
// its next preparation, and its ResourceSlice goes with the next render.
func (p *Plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Prepared lists the claims whose CDI files are on the node, by UID, for tests and probes.
func (p *Plugin) Prepared() []string {
	files, _ := filepath.Glob(filepath.Join(p.opts.CDIDir, api.DRADriver+"-*.json"))
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), api.DRADriver+"-"), ".json"))
	}
	return slices.Sorted(slices.Values(out))
}
