package api

import (
	"fmt"
	"strconv"
	"strings"
)

// How brokers and users' workloads get devices: gitbroker.yaml spec.deviceAllocation, and the
// agent's --device-allocation.
const (
	DeviceAllocationDevicePlugin = "devicePlugin"
	DeviceAllocationDRA          = "dra"
)

// The names DRA mode shares between the renderer, which writes the ResourceSlices, DeviceClasses
// and ResourceClaimTemplates, and the agent, which prepares what the scheduler allocated from
// them (docs/FORMATS.md, "DRA mode").
const (
	// DRADriver is the driver of every rendered ResourceSlice, the name the agent registers
	// with the kubelet as a DRA plugin, and the domain of the devices' own attributes.
	DRADriver = "gitbroker.dev"
	// DRAPropertyDomain is the domain of the attributes made from a device's properties, which a
	// node reports: never DRADriver's, so no property can pass for an instance or Configuration
	// attribute that selectors trust.
	DRAPropertyDomain = "property.gitbroker.dev"
	// The attributes of every device, in DRADriver's domain.
	DRAAttributeInstance      = "instance"
	DRAAttributeNamespace     = "namespace"
	DRAAttributeConfiguration = "configuration"
	DRAAttributeShared        = "shared"
	// DRAClaimName is the name under which a broker's Pod and containers refer to the claim of
	// their device.
	DRAClaimName = "gitbroker-device"
	// DRADriverSelector is the CEL selector, exactly, that every rendered DeviceClass has: its
	// devices are gitbroker's, whatever its other selectors say.
	DRADriverSelector = `device.driver == "gitbroker.dev"`
	// DRAMaxCapacity is the most devices a ResourceSlice may hold (resource.k8s.io/v1), so the
	// highest capacity a Configuration may have in DRA mode: each slot is a device.
	DRAMaxCapacity = 128
)

// DRAPool is the pool of an instance's devices: "<namespace>/<instance>" for a shared device
// (one ResourceSlice that selects every node that reports it), "<node>/<namespace>/<instance>"
// for a node's own. One instance, one pool, one ResourceSlice: a device changes only its own
// file, and a pool is never split across the folders that shard a Configuration.
func DRAPool(node, namespace, instance string, shared bool) string {
	if shared {
		return namespace + "/" + instance
	}
	return node + "/" + namespace + "/" + instance
}

// ParseDRAPool is the inverse of DRAPool: the node ("" for a shared device), namespace and
// instance of a pool, or an error for a pool DRAPool does not make.
func ParseDRAPool(pool string) (node, namespace, instance string, err error) {
	parts := strings.Split(pool, "/")
	switch len(parts) {
	case 2:
		namespace, instance = parts[0], parts[1]
	case 3:
		node, namespace, instance = parts[0], parts[1], parts[2]
	default:
		return "", "", "", fmt.Errorf("pool %q is not a gitbroker pool (<node>/<namespace>/<instance> or <namespace>/<instance>)", pool)
	}
	for _, p := range parts {
		if p == "" {
			return "", "", "", fmt.Errorf("pool %q has an empty part", pool)
		}
	}
	return node, namespace, instance, nil
}

// DRADeviceName names slot i of an instance in its pool.
func DRADeviceName(i int) string { return "slot-" + strconv.Itoa(i) }

// ParseDRADeviceName is the slot DRADeviceName named, or -1.
func ParseDRADeviceName(name string) int {
	s, ok := strings.CutPrefix(name, "slot-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || DRADeviceName(i) != name {
		return -1
	}
	return i
}

// DRAResourceSliceName is the cluster-wide name of an instance's ResourceSlice: instance names
// are unique in their namespace only.
func DRAResourceSliceName(namespace, instance string) string {
	return instance + "." + namespace
}

// DRAConfigurationValue is the value of a device's configuration attribute: the Configuration's
// name, shortened as names are to fit an attribute's 64 characters.
func DRAConfigurationValue(configuration string) string { return Shorten(configuration) }

// DRADeviceClassName is the DeviceClass of a Configuration, through which users' own workloads
// claim its devices: "<configuration>.<namespace>.gitbroker.dev" (a namespace holds no dot, so
// the name is never another Configuration's).
func DRADeviceClassName(namespace, configuration string) string {
	return DRAConfigurationValue(configuration) + "." + namespace + "." + DRADriver
}
