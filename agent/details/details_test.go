package details_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent/details"
)

// TestCheck: the built-in handlers' details are parsed as the agent parses them (agent's
// TestUdevRuleErrors covers every rule error through Discover); any other handler's are its own.
func TestCheck(t *testing.T) {
	require.NoError(t, details.Check(details.Udev, `udevRules: ['SUBSYSTEM=="video4linux", ATTRS{idVendor}!="046d"']`))
	require.ErrorContains(t, details.Check(details.Udev, `udevRules: ['KERNEL="video0"']`), "is an assignment")
	require.ErrorContains(t, details.Check(details.Udev, ""), "udevRules is required")
	// Akri's full udev details: permissions (its Helm chart always writes rwm), groupRecursive.
	d, err := details.ParseUdev("udevRules: ['KERNEL==\"video*\"']\ngroupRecursive: true\npermissions: rw\n")
	require.NoError(t, err)
	require.Equal(t, "rw", d.Permissions)
	require.True(t, d.GroupRecursive)
	d, err = details.ParseUdev("udevRules: ['KERNEL==\"video*\"']\n")
	require.NoError(t, err)
	require.Equal(t, "rwm", d.Permissions)
	require.ErrorContains(t, details.Check(details.Udev, "udevRules: []\npermissions: rwx\n"), `permissions "rwx": want one or more of r, w and m`)
	require.ErrorContains(t, details.Check(details.Udev, "udevRules: []\nvfioPassthrough: true\n"), "vfioPassthrough is not supported")
	require.NoError(t, details.Check(details.Udev, "udevRules: []\nvfioPassthrough: false\n"))
	require.NoError(t, details.Check(details.DebugEcho, `descriptions: [foo0]`))
	require.ErrorContains(t, details.Check(details.DebugEcho, `description: [foo0]`), "descriptions is required")
	require.NoError(t, details.Check("zeroconf", "not: [yaml"), "a handler of its own parses its own")
	require.True(t, details.Builtin("udev"))
	require.False(t, details.Builtin("onvif"))
}

// Akri's onvif and opcua handlers parse their details with serde into the types of their
// source (OnvifDiscoveryDetails, OpcuaDiscoveryDetails, FilterList): review refuses what they
// would refuse, and takes what they take, unknown fields included.
func TestCheckAkriHandlers(t *testing.T) {
	// As Akri's Helm chart writes them.
	require.NoError(t, details.Check(details.ONVIF, "ipAddresses:\n  action: Exclude\n  items: []\nscopes:\n  items: [onvif://www.onvif.org/name/cam]\ndiscoveryTimeoutSeconds: 1\n"))
	require.NoError(t, details.Check(details.ONVIF, "{}"))
	require.NoError(t, details.Check(details.ONVIF, "somethingNew: 1\n"), "serde ignores a field it does not know")
	require.ErrorContains(t, details.Check(details.ONVIF, "ipAddresses: [10.0.0.1]\n"), "onvif discoveryDetails")
	require.ErrorContains(t, details.Check(details.ONVIF, "macAddresses:\n  action: Exclude\n"), "macAddresses.items is required")
	require.ErrorContains(t, details.Check(details.ONVIF, "scopes:\n  action: exclude\n  items: []\n"), `scopes.action is "exclude"`)
	require.ErrorContains(t, details.Check(details.ONVIF, "discoveryTimeoutSeconds: soon\n"), "onvif discoveryDetails")

	require.NoError(t, details.Check(details.OPCUA, "opcuaDiscoveryMethod:\n  standard:\n    discoveryUrls: [opc.tcp://10.0.0.1:4840/]\napplicationNames:\n  action: Include\n  items: [Some app]\n"))
	require.NoError(t, details.Check(details.OPCUA, "opcuaDiscoveryMethod:\n  standard: {}\n"), "the host's local discovery server")
	require.ErrorContains(t, details.Check(details.OPCUA, "applicationNames:\n  items: []\n"), "opcuaDiscoveryMethod is required")
	require.ErrorContains(t, details.Check(details.OPCUA, "opcuaDiscoveryMethod:\n  scan: {}\n"), "names no method Akri knows")
	require.ErrorContains(t, details.Check(details.OPCUA, "opcuaDiscoveryMethod:\n  standard:\n    discoveryUrls: opc.tcp://10.0.0.1:4840/\n"), "opcua discoveryDetails")
	require.True(t, details.Checked(details.OPCUA))
	require.False(t, details.Checked("zeroconf"))
}
