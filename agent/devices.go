package agent

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
)

// DeviceSink receives, after every discovery, the instances the node serves to kubelet: the
// device plugin (deviceplugin.Plugin).
type DeviceSink interface {
	Update([]deviceplugin.Instance)
}

// serveDevices gives the device plugin what the node sees now: every tracked device of every
// Configuration, named as the renderer names its instance, healthy when this cycle's discovery
// saw it. Properties a device may not set (api.RefusedDeviceProperty) are left out as the
// renderer leaves them out, unless the Configuration allows them.
func (a *Agent) serveDevices(configs map[string]*api.ParsedConfiguration, now time.Time) {
	if a.opts.Devices == nil {
		return
	}
	var out []deviceplugin.Instance
	for _, key := range slices.Sorted(maps.Keys(configs)) {
		c, m := configs[key], a.tracked[key]
		if len(m) == 0 {
			continue
		}
		keys := make([]api.DeviceKey, 0, len(m))
		byKey := map[api.DeviceKey]*trackedDevice{}
		for _, id := range slices.Sorted(maps.Keys(m)) {
			t := m[id]
			k := api.DeviceKey{ID: t.device.ID, Shared: t.device.Shared}
			if !k.Shared {
				k.Node = a.opts.Node
			}
			keys = append(keys, k)
			byKey[k] = t
		}
		digests, _ := api.InstanceDigests(keys)
		for _, k := range keys {
			t := byKey[k]
			env := map[string]string{}
			for name, v := range t.device.Properties {
				if !api.RefusedDeviceProperty(name) || c.AllowsDeviceProperty(name) {
					env[name] = v
				}
			}
			maps.Copy(env, c.Spec.BrokerProperties)
			out = append(out, deviceplugin.Instance{
				Name:            api.InstanceName(c.Name, digests[k]),
				Configuration:   c.Name,
				Digest:          strings.ToUpper(digests[k]),
				Capacity:        c.Policy.Capacity,
				Healthy:         t.lastSeen.Equal(now),
				DeviceSpecs:     t.device.DeviceSpecs,
				Mounts:          t.device.Mounts,
				Env:             env,
				HostPathAllowed: c.Policy.HostPathAllowed,
			})
		}
	}
	a.opts.Devices.Update(out)
}
