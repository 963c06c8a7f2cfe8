package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
)

// loadInventory seeds the agent's state from the branch, so a restart
// does not drop devices before the grace period has passed.
func (a *Agent) loadInventory(head gitsync.Snapshot) error {
	b, err := head.ReadFile(a.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	inv, errs := api.ParseInventory(a.path, b, api.DefaultNamespace)
	if len(errs) > 0 {
		return errs
	}
	now := a.opts.Now()
	for _, ic := range inv.Spec.Configurations {
		key := ic.Namespace + "/" + ic.Name
		m := map[string]*trackedDevice{}
		for _, d := range ic.Devices {
			m[d.ID] = &trackedDevice{device: d, lastSeen: now}
		}
		a.tracked[key] = m
	}
	return nil
}

// inventory renders the node's inventory from the tracked devices. When
// unsure (a Configuration file was invalid from the start), entries on
// head for Configurations the agent does not know are carried over.
func (a *Agent) inventory(head gitsync.Snapshot, configs map[string]*api.ParsedConfiguration, unsure bool) ([]byte, int, error) {
	inv := api.NodeInventory{}
	inv.APIVersion = api.APIVersion
	inv.Kind = api.KindNodeInventory
	inv.Name = a.opts.Node
	count := 0
	entries := map[string]api.InventoryConfiguration{}
	for key, m := range a.tracked {
		if _, ok := configs[key]; !ok || len(m) == 0 {
			continue
		}
		ns, name, _ := strings.Cut(key, "/")
		ic := api.InventoryConfiguration{Name: name, Namespace: ns}
		for _, id := range slices.Sorted(maps.Keys(m)) {
			ic.Devices = append(ic.Devices, normalize(m[id].device))
		}
		count += len(ic.Devices)
		entries[key] = ic
	}
	if unsure {
		if b, err := head.ReadFile(a.path); err == nil {
			if prev, errs := api.ParseInventory(a.path, b, api.DefaultNamespace); len(errs) == 0 {
				for _, ic := range prev.Spec.Configurations {
					key := ic.Namespace + "/" + ic.Name
					if _, known := configs[key]; !known {
						entries[key] = ic
						count += len(ic.Devices)
					}
				}
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(entries)) {
		inv.Spec.Configurations = append(inv.Spec.Configurations, entries[key])
	}
	counts := map[[2]string]int{}
	for _, ic := range inv.Spec.Configurations {
		counts[[2]string{ic.Namespace, ic.Name}] = len(ic.Devices)
	}
	a.opts.Metrics.setDevices(counts)
	b, err := yaml.Marshal(&inv)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding inventory: %w", err)
	}
	b = bytes.Replace(b, []byte("  creationTimestamp: null\n"), nil, 1)
	if _, errs := api.ParseInventory(a.path, b, api.DefaultNamespace); len(errs) > 0 {
		return nil, 0, fmt.Errorf("refusing to write an inventory the renderer would reject: %w", errs)
	}
	return b, count, nil
}

// normalize orders a device's lists so the inventory's bytes depend only on
// what the handler reported, not on its order.
func normalize(d api.Device) api.Device {
	sort.Slice(d.Mounts, func(i, j int) bool { return d.Mounts[i].ContainerPath < d.Mounts[j].ContainerPath })
	sort.Slice(d.DeviceSpecs, func(i, j int) bool { return d.DeviceSpecs[i].ContainerPath < d.DeviceSpecs[j].ContainerPath })
	if len(d.Mounts) == 0 {
		d.Mounts = nil
	}
	if len(d.DeviceSpecs) == 0 {
		d.DeviceSpecs = nil
	}
	return d
}
