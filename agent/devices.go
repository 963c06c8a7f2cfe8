package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
)

// DeviceSink receives, after every discovery, the instances the node serves to kubelet: the
// device plugin (deviceplugin.Plugin).
type DeviceSink interface {
	Update([]deviceplugin.Instance)
}

// serveDevices gives the device plugin what the node sees now: every tracked device of every
// Configuration, named as the renderer names its instance, healthy when this cycle's discovery
// saw it, a shared one with this node's share of its slots. Properties a device may not set
// (ParsedConfiguration.DeviceMaySet) are left out as the renderer leaves them out, unless the
// Configuration allows them.
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
		digests := a.digestsOf(key, keys)
		for _, k := range keys {
			t := byKey[k]
			env := map[string]string{}
			for name, v := range t.device.Properties {
				if c.DeviceMaySet(name) {
					env[name] = v
				}
			}
			maps.Copy(env, c.Spec.BrokerProperties)
			name := api.InstanceName(c.Name, digests[k])
			elsewhere := 0
			if k.Shared && a.opts.Shares != nil {
				elsewhere = max(c.Policy.Capacity-a.shares[name], 0)
			}
			out = append(out, deviceplugin.Instance{
				Name:            name,
				Namespace:       c.Namespace,
				Configuration:   c.Name,
				Digest:          strings.ToUpper(digests[k]),
				Capacity:        c.Policy.Capacity,
				Elsewhere:       elsewhere,
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

// digestsOf names the instances of one Configuration's devices on this node as the renderer
// named them: the digests its publication lists (api.InstanceDigestsPath: names are sticky, so
// a device that collided keeps the name it was rendered with), else Akri's 3-byte digest, else,
// for devices of this node that collide with each other and are not listed yet, the longer
// digests api.InstanceDigests gives.
func (a *Agent) digestsOf(config string, keys []api.DeviceKey) map[api.DeviceKey]string {
	digests, _ := api.InstanceDigests(keys)
	listed := a.instanceDigests[config]
	for _, k := range keys {
		if d, ok := listed[k]; ok {
			digests[k] = d
			continue
		}
		short := api.AkriDigest(k, 3)
		if digests[k] == short {
			continue
		}
		// A collision on this node: the short name is this device's unless another device of
		// it, not listed either, shares it.
		alone := true
		for _, o := range keys {
			if _, ok := listed[o]; o != k && !ok && api.AkriDigest(o, 3) == short {
				alone = false
			}
		}
		if alone {
			digests[k] = short
		}
	}
	return digests
}

// readInstanceDigests reads api.InstanceDigestsPath from the Configurations' source: by
// Configuration, the device keys whose instance digests are not Akri's 3-byte ones in cluster
// (the node's, with gitbroker.yaml spec.clusters; entries of other clusters are theirs).
func readInstanceDigests(src gitsync.Snapshot, cluster string) (map[string]map[api.DeviceKey]string, error) {
	data, err := src.ReadFile(api.InstanceDigestsPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(data) > api.MaxInstanceDigestsSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", api.InstanceDigestsPath, api.MaxInstanceDigestsSize)
	}
	var lists map[string][]api.InstanceDigest
	if err := yaml.UnmarshalStrict(data, &lists); err != nil {
		return nil, fmt.Errorf("%s: %w", api.InstanceDigestsPath, err)
	}
	out := make(map[string]map[api.DeviceKey]string, len(lists))
	for cfg, l := range lists {
		m := make(map[api.DeviceKey]string, len(l))
		for _, d := range l {
			if len(d.Digest) != 12 && len(d.Digest) != 32 || strings.Trim(d.Digest, "0123456789abcdef") != "" {
				return nil, fmt.Errorf("%s: %s: device %q: digest %q is not 12 or 32 lower-case hex characters", api.InstanceDigestsPath, cfg, d.Device, d.Digest)
			}
			if d.Cluster != "" && d.Cluster != cluster {
				continue
			}
			m[d.Key()] = d.Digest
		}
		out[cfg] = m
	}
	return out, nil
}
