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
	require.NoError(t, details.Check(details.ONVIF, "not: [yaml"), "onvif parses its own")
	require.True(t, details.Builtin("udev"))
	require.False(t, details.Builtin("onvif"))
}
