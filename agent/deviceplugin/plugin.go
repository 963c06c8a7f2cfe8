// Package deviceplugin owns the agent's side of the kubelet device-plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), as Akri's agent serves it: for every instance
// its node reports, akri.sh/<instance> with the Configuration's capacity in slots (of a shared
// device, only this node's share of them Healthy: the other nodes offer the rest), and for every
// Configuration akri.sh/<configuration> with one device per instance on the node, so a user's own
// workload can request any of them and a request for N gets N different devices (Akri's
// configuration-level resources): it is Healthy while the instance has a slot free, and
// allocating it takes that slot. A device that was not seen in the latest discovery is
// Unhealthy, so kubelet stops giving it out.
//
// Allocate answers from the agent's current discovery, never from git: the device's device
// nodes (with the handler's cgroup permissions, rwm when it gave none) and mounts, each only
// under /dev or a prefix the Configuration allows, and its properties as environment variables.
// A slot given out through one resource is withheld from the other until kubelet's
// pod-resources API no longer lists it, so a device never has more users than its capacity on
// the node. The plugin re-registers when kubelet restarts (kubelet removes every socket in its
// device-plugin folder when it starts). It needs no API credential.
package deviceplugin

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gitbroker/gitbroker/api"
)

// Defaults for Options.
const (
	DefaultDir          = pluginapi.DevicePluginPath
	DefaultPodResources = "/var/lib/kubelet/pod-resources/kubelet.sock"
	// claimPolls is how long, in polls, a slot stays withheld after Allocate before pod-resources
	// must list it: kubelet records an allocation before it starts the container.
	claimPolls = 30
	// removeAfter is how long a resource with no slots is still served (with none), so kubelet
	// sees its capacity drop to zero before the socket goes.
	removeAfter = 5 * time.Minute
)

// Instance is one device the node reports, as the plugin serves it.
type Instance struct {
	// Name is Akri's instance name; the plugin serves akri.sh/<Name>.
	Name string
	// Namespace is the Configuration's namespace.
	Namespace string
	// Configuration is the Configuration's name; the plugin serves akri.sh/<Configuration>.
	Configuration string
	// Digest is the instance's digest, upper case: properties are also given as KEY_<Digest>.
	Digest string
	// Capacity is the number of slots.
	Capacity int
	// Elsewhere is how many of them the other nodes that see a shared device offer: this node
	// offers the first Capacity-Elsewhere slots (Healthy while the device is), the others are
	// Unhealthy here.
	Elsewhere int
	// Healthy is true when the device was seen in the latest discovery.
	Healthy     bool
	DeviceSpecs []api.DeviceSpec
	Mounts      []api.Mount
	// Env holds the device's properties and the Configuration's broker properties (which win).
	Env map[string]string
	// HostPathAllowed says whether a device node or mount's host path may be served.
	HostPathAllowed func(string) bool
}

// Options configures a Plugin.
type Options struct {
	// Dir is kubelet's device-plugin folder: kubelet.sock is there and the plugin's sockets go there.
	Dir string
	// PodResources is kubelet's pod-resources socket, "" to go without it: slots given through
	// one resource are then not withheld from the other.
	PodResources string
	Log          logr.Logger
	// Poll is how often the plugin checks its sockets and kubelet's (default 1s).
	Poll time.Duration
	Now  func() time.Time
}

// Plugin serves the node's devices to kubelet.
type Plugin struct {
	opts Options

	mu        sync.Mutex
	instances map[string]Instance
	slots     map[string]slot
	claims    map[string]claim
	servers   map[string]*server
	changed   chan struct{}
	refused   map[string]bool
	// waiting is set while kubelet's folder is missing (read and written by Run only).
	waiting bool
}

type slot struct {
	instance string
	index    int
}

// claim is a slot given out: through resource, as the device kubelet knows by deviceID (the
// slot's id through akri.sh/<instance>, the instance's through akri.sh/<configuration>).
type claim struct {
	resource string
	deviceID string
	at       time.Time
}

// New returns a Plugin; Run serves it.
func New(opts Options) *Plugin {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Plugin{
		opts:      opts,
		instances: map[string]Instance{},
		slots:     map[string]slot{},
		claims:    map[string]claim{},
		servers:   map[string]*server{},
		changed:   make(chan struct{}),
		refused:   map[string]bool{},
	}
}

// Update replaces what the node reports. Resources are started and registered by Run.
func (p *Plugin) Update(list []Instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.instances = make(map[string]Instance, len(list))
	p.slots = map[string]slot{}
	for _, in := range list {
		p.instances[in.Name] = in
		for i := range in.Capacity {
			p.slots[slotID(in.Name, i)] = slot{in.Name, i}
		}
	}
	for id := range p.claims {
		if _, ok := p.slots[id]; !ok {
			delete(p.claims, id)
		}
	}
	p.broadcast()
}

// slotID names slot i of an instance; kubelet takes device ids of at most 63 characters.
func slotID(instance string, i int) string {
	return api.Shorten(instance + "-" + strconv.Itoa(i))
}

// broadcast wakes every ListAndWatch stream; p.mu is held.
func (p *Plugin) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// wanted lists the resources the node's instances call for, each a valid resource name.
func (p *Plugin) wanted() map[string]bool {
	out := map[string]bool{}
	for _, in := range p.instances {
		for _, name := range []string{in.Name, in.Configuration} {
			r := api.AkriResourcePrefix + name
			if msgs := validation.IsQualifiedName(r); len(msgs) > 0 {
				if !p.refused[r] {
					p.refused[r] = true
					p.opts.Log.Error(errors.New(strings.Join(msgs, "; ")), "cannot serve this resource: not a valid resource name", "resource", r)
				}
				continue
			}
			out[r] = true
		}
	}
	return out
}

// devices lists resource's devices as kubelet sees them, and the channel closed at the next
// change: the slots of an instance, or one device per instance of a Configuration.
func (p *Plugin) devices(resource string) ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := strings.TrimPrefix(resource, api.AkriResourcePrefix)
	var out []*pluginapi.Device
	if p.isConfiguration(name) {
		for _, in := range p.sortedInstances() {
			if in.Configuration != name {
				continue
			}
			health := pluginapi.Unhealthy
			if _, taken := p.claimOf(resource, configDeviceID(in.Name)); in.Healthy && (taken || p.freeSlot(in) >= 0) {
				health = pluginapi.Healthy
			}
			out = append(out, &pluginapi.Device{ID: configDeviceID(in.Name), Health: health})
		}
		return out, p.changed
	}
	for _, id := range slices.Sorted(maps.Keys(p.slots)) {
		in := p.instances[p.slots[id].instance]
		if in.Name != name {
			continue
		}
		health := pluginapi.Healthy
		if c, ok := p.claims[id]; !in.Healthy || ok && c.resource != resource || p.slots[id].index >= in.offered() {
			health = pluginapi.Unhealthy
		}
		out = append(out, &pluginapi.Device{ID: id, Health: health})
	}
	return out, p.changed
}

// configDeviceID is the id of an instance's device in akri.sh/<configuration>.
func configDeviceID(instance string) string { return api.Shorten(instance) }

// isConfiguration reports whether name is a Configuration's resource (not an instance's); p.mu
// is held.
func (p *Plugin) isConfiguration(name string) bool {
	for _, in := range p.instances {
		if in.Configuration == name {
			return true
		}
	}
	return false
}

func (p *Plugin) sortedInstances() []Instance {
	out := make([]Instance, 0, len(p.instances))
	for _, name := range slices.Sorted(maps.Keys(p.instances)) {
		out = append(out, p.instances[name])
	}
	return out
}

// offered is how many of in's slots this node offers.
func (in Instance) offered() int { return max(in.Capacity-in.Elsewhere, 0) }

// freeSlot is the lowest slot of in's share that no claim holds, -1 when none; p.mu is held.
func (p *Plugin) freeSlot(in Instance) int {
	for i := range in.offered() {
		if _, ok := p.claims[slotID(in.Name, i)]; !ok {
			return i
		}
	}
	return -1
}

// claimOf finds the slot a claim gives out through resource as deviceID; p.mu is held.
func (p *Plugin) claimOf(resource, deviceID string) (string, bool) {
	for id, c := range p.claims {
		if c.resource == resource && c.deviceID == deviceID {
			return id, true
		}
	}
	return "", false
}

// allocate answers kubelet's Allocate for one container.
func (p *Plugin) allocate(resource string, ids []string, claimSlots bool) (*pluginapi.ContainerAllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	seenDev, seenMount := map[string]bool{}, map[string]bool{}
	var used []Instance
	claims := map[string]string{} // slot -> the device id kubelet gave
	config := p.isConfiguration(strings.TrimPrefix(resource, api.AkriResourcePrefix))
	for _, id := range ids {
		slotOf := id
		if config {
			var err error
			if slotOf, err = p.configSlot(resource, id, claimSlots); err != nil {
				return nil, err
			}
		}
		s, ok := p.slots[slotOf]
		in := p.instances[s.instance]
		switch {
		case !ok:
			return nil, status.Errorf(codes.NotFound, "%s: device %s is no longer discovered on this node", resource, id)
		case !in.Healthy:
			return nil, status.Errorf(codes.Unavailable, "%s: instance %s was not seen in the latest discovery", resource, in.Name)
		}
		if c, ok := p.claims[slotOf]; ok && c.resource != resource {
			return nil, status.Errorf(codes.ResourceExhausted, "%s: slot %s is in use through %s", resource, slotOf, c.resource)
		}
		claims[slotOf] = id
		if !slices.ContainsFunc(used, func(u Instance) bool { return u.Name == in.Name }) {
			used = append(used, in)
		}
		devs, mounts := in.Served(p.refuse)
		for _, d := range devs {
			if !seenDev[d.ContainerPath] {
				seenDev[d.ContainerPath] = true
				resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
			}
		}
		for _, m := range mounts {
			if !seenMount[m.ContainerPath] {
				seenMount[m.ContainerPath] = true
				resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
			}
		}
	}
	for _, in := range used {
		for k, v := range in.Env {
			resp.Envs[k+"_"+in.Digest] = v
			if len(used) == 1 {
				resp.Envs[k] = v
			}
		}
	}
	if claimSlots {
		now := p.opts.Now()
		for slotOf, id := range claims {
			p.claims[slotOf] = claim{resource: resource, deviceID: id, at: now}
		}
		p.broadcast()
	}
	return resp, nil
}

// configSlot is the slot an instance's device in akri.sh/<configuration> is given as: the one
// it was given before (kubelet allocates again when a container restarts), else the lowest free
// one; p.mu is held.
func (p *Plugin) configSlot(resource, id string, claimed bool) (string, error) {
	if slot, ok := p.claimOf(resource, id); ok {
		return slot, nil
	}
	for _, in := range p.instances {
		if in.Configuration != strings.TrimPrefix(resource, api.AkriResourcePrefix) || configDeviceID(in.Name) != id {
			continue
		}
		i := p.freeSlot(in)
		if !claimed && i < 0 {
			i = 0 // without kubelet's pod-resources nothing is withheld
		}
		if i < 0 {
			return "", status.Errorf(codes.ResourceExhausted, "%s: every slot of instance %s is in use", resource, in.Name)
		}
		return slotID(in.Name, i), nil
	}
	return "", status.Errorf(codes.NotFound, "%s: device %s is no longer discovered on this node", resource, id)
}

// Served is what a container that uses the instance gets of it: its device nodes (with the
// handler's cgroup permissions, rwm when it gave none) and mounts, host paths cleaned, each only
// under /dev or a prefix the Configuration allows. What is not served is passed to refuse with
// why. Kubelet's device plugin and the DRA plugin (agent/dra) serve the same.
func (in Instance) Served(refuse func(in Instance, hostPath string, why error)) ([]api.DeviceSpec, []api.Mount) {
	allowed := func(hostPath string) bool {
		ok := in.HostPathAllowed != nil && in.HostPathAllowed(hostPath) || in.HostPathAllowed == nil && (api.Policy{}).HostPathAllowed(hostPath)
		if !ok {
			refuse(in, hostPath, errors.New("host path outside /dev and the Configuration's allowedHostPaths"))
		}
		return ok
	}
	var devs []api.DeviceSpec
	for _, d := range in.DeviceSpecs {
		if !allowed(d.HostPath) {
			continue
		}
		perms := d.Permissions
		if perms == "" {
			perms = "rwm"
		}
		if strings.Trim(perms, "rwm") != "" {
			refuse(in, d.HostPath, fmt.Errorf("permissions %q are not a subset of rwm", perms))
			continue
		}
		devs = append(devs, api.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: filepath.Clean(d.HostPath), Permissions: perms})
	}
	var mounts []api.Mount
	for _, m := range in.Mounts {
		if allowed(m.HostPath) {
			mounts = append(mounts, api.Mount{ContainerPath: m.ContainerPath, HostPath: filepath.Clean(m.HostPath), ReadOnly: m.ReadOnly})
		}
	}
	return devs, mounts
}

// refuse logs a path the plugin does not serve, once per instance and path.
func (p *Plugin) refuse(in Instance, hostPath string, why error) {
	key := in.Name + "\x00" + hostPath
	if !p.refused[key] {
		p.refused[key] = true
		p.opts.Log.Error(why, "not serving a path a discovery handler reported", "instance", in.Name, "hostPath", hostPath)
	}
}
