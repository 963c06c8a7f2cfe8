package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gitbroker/gitbroker/agent/details"
	"github.com/gitbroker/gitbroker/api"
)

// discover runs each Configuration's handler and updates the tracked
// devices. A handler error keeps that Configuration's devices as they
// were: not knowing is not the same as seeing nothing.
func (a *Agent) discover(ctx context.Context, configs map[string]*api.ParsedConfiguration) {
	now := a.opts.Now()
	unresolved := 0
	defer func() { a.propertiesOK.Store(unresolved == 0) }()
	wanted := map[string]bool{}
	for _, key := range slices.Sorted(maps.Keys(configs)) {
		c := configs[key]
		name := c.Spec.DiscoveryHandler.Name
		h, ok := a.opts.Handlers.Handler(name)
		if !ok {
			if !a.noHandler[key] {
				why := "no Akri discovery handler of that name has registered on this node"
				if row, ok := details.Lookup(name); ok && row.NotServed != "" {
					why = row.NotServed
				}
				a.opts.Log.Info("no discovery handler registered for this Configuration; its devices age out",
					"configuration", key, "handler", name, "why", why)
				a.noHandler[key] = true
			}
			a.expire(key, nil, c, now)
			continue
		}
		delete(a.noHandler, key)
		props, err := a.properties(c)
		a.opts.Metrics.unresolvedProperties(key, err != nil)
		if err != nil {
			// Discovering without a credential would find nothing and drop the devices.
			unresolved++
			if a.report(key+"\x00properties", err) {
				a.opts.Log.Error(err, "cannot resolve a discovery property; keeping this Configuration's devices", "configuration", key, "handler", name)
			}
			continue
		}
		delete(a.reported, key+"\x00properties")
		req := Request{Configuration: key, Details: c.Spec.DiscoveryHandler.DiscoveryDetails, Properties: props}
		wanted[requestKey(req)] = true
		devices, err := h.Discover(ctx, req)
		if err != nil {
			a.opts.Metrics.discoveryError(name)
			if !errors.Is(err, ErrNotReady) {
				a.opts.Log.Error(err, "discovery failed; keeping this Configuration's devices", "configuration", key, "handler", name)
			}
			continue
		}
		a.noteNothingFound(key, name, len(devices) == 0)
		a.expire(key, a.sanitize(key, c, devices), c, now)
	}

	for key := range a.tracked {
		if _, ok := configs[key]; !ok {
			delete(a.tracked, key)
		}
	}
	if r, ok := a.opts.Handlers.(Retainer); ok {
		r.Retain(wanted)
	}
	a.readShares(ctx)
	a.serveDevices(configs, now)
}

// readShares reads this node's shares of its shared devices (Options.Shares); a read that fails
// keeps the last, and is logged once until it changes.
func (a *Agent) readShares(ctx context.Context) {
	if a.opts.Shares == nil || a.opts.Devices == nil {
		return
	}
	shares, err := a.opts.Shares(ctx)
	if err != nil {
		if err.Error() != a.sharesErr {
			a.sharesErr = err.Error()
			a.opts.Log.Error(err, "reading this node's shares of its shared devices; the shares read last stand", "shares", a.shares)
		}
		return
	}
	a.sharesErr = ""
	a.shares = shares
}

// noteNothingFound logs, once when it starts, that a Configuration's discovery finds no device on
// this node: a udev rule that matches nothing, say, gave no sign at all.
func (a *Agent) noteNothingFound(key, handler string, none bool) {
	if !none {
		delete(a.nothingFound, key)
		return
	}
	if a.nothingFound[key] {
		return
	}
	a.nothingFound[key] = true
	hint := "the handler reports no device for its discoveryDetails"
	if row, ok := details.Lookup(handler); ok && row.NothingFound != "" {
		hint = row.NothingFound
	}
	a.opts.Log.Info("discovery found no device for this Configuration on this node", "configuration", key, "handler", handler, "why", hint)
}

// expire records the devices seen now and drops those unseen for longer
// than their grace period.
func (a *Agent) expire(key string, seen []api.Device, c *api.ParsedConfiguration, now time.Time) {
	m := a.tracked[key]
	if m == nil {
		m = map[string]*trackedDevice{}
		a.tracked[key] = m
	}
	present := map[string]bool{}
	for _, d := range seen {
		present[d.ID] = true
		m[d.ID] = &trackedDevice{device: d, lastSeen: now}
	}
	for id, t := range m {
		if present[id] {
			continue
		}
		if now.Sub(t.lastSeen) >= a.grace(c, t.device.Shared) {
			delete(m, id)
		}
	}
}

func (a *Agent) grace(c *api.ParsedConfiguration, shared bool) time.Duration {
	if d, ok := c.OfflineGracePeriod(); ok {
		return d
	}
	if shared {
		return a.opts.SharedGracePeriod
	}
	return a.opts.LocalGracePeriod
}

// sanitize drops what the renderer would reject, so one odd device from a
// handler never invalidates the node's whole inventory.
func (a *Agent) sanitize(key string, c *api.ParsedConfiguration, devices []api.Device) []api.Device {
	out := make([]api.Device, 0, len(devices))
	seen := map[string]bool{}
	for _, d := range devices {
		switch {
		case d.ID == "":
			a.opts.Log.Info("dropping a device without an id", "configuration", key)
			continue
		case seen[d.ID]:
			a.opts.Log.Info("dropping a device reported twice", "configuration", key, "device", d.ID)
			continue
		}
		seen[d.ID] = true
		for k := range d.Properties {
			if msgs := validation.IsCIdentifier(k); len(msgs) > 0 {
				a.opts.Log.Info("dropping a property that is not a valid environment variable name",
					"configuration", key, "device", d.ID, "property", k)
				delete(d.Properties, k)
				continue
			}
			if !c.DeviceMaySet(k) {
				// The renderer refuses an inventory with it (the node's part stays as it was): an
				// honest agent leaves it out, and says so once.
				p := api.HandlerPropertyPrefix(c.Spec.DiscoveryHandler.Name)
				why := fmt.Errorf("devices of discovery handler %s may set only names starting %s or AKRI_%s, and no loader or proxy variable, unless the Configuration allows them by name (annotation %s)",
					c.Spec.DiscoveryHandler.Name, p, p, api.AnnotationAllowedDeviceProperties)
				if a.report(key+"\x00property\x00"+k, why) {
					a.opts.Log.Info("leaving out a device property its Configuration does not let devices set", "configuration", key, "property", k, "why", why.Error())
				}
				delete(d.Properties, k)
			}
		}
		if len(d.Properties) == 0 {
			d.Properties = nil
		}
		mounts := d.Mounts[:0:0]
		for _, m := range d.Mounts {
			if m.ContainerPath != "" && m.HostPath != "" {
				mounts = append(mounts, m)
			}
		}
		d.Mounts = mounts
		specs := d.DeviceSpecs[:0:0]
		for _, s := range d.DeviceSpecs {
			if s.ContainerPath != "" && s.HostPath != "" {
				specs = append(specs, s)
			}
		}
		d.DeviceSpecs = specs
		out = append(out, d)
	}
	return out
}
