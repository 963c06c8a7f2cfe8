package agent

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// A file udevd writes into the udev database wakes the agent within the settle time; a burst
// of them wakes it once.
func TestDeviceEventsFollowTheUdevDatabase(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "run", "udev", "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	var wakes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sources := DeviceEvents(ctx, root, logr.Discard(), func() { wakes.Add(1) })
	require.Contains(t, sources, "udev-database")
	start := time.Now()
	for i := range 20 {
		require.NoError(t, os.WriteFile(filepath.Join(data, "c189:"+string(rune('0'+i%10))), []byte("E:ID_VENDOR=x\n"), 0o644))
	}
	require.Eventually(t, func() bool { return wakes.Load() >= 1 }, 5*time.Second, 5*time.Millisecond)
	t.Logf("udev database write to wake: %s", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)
	require.LessOrEqual(t, wakes.Load(), int64(2), "a burst of events wakes the agent once (or twice, if it straddles the settle time)")
}

// A kernel uevent (here a synthetic one, written to a device's uevent file as udevadm trigger
// does) wakes the agent, where the process may open the netlink socket and write to sysfs.
func TestDeviceEventsFollowKernelUevents(t *testing.T) {
	const trigger = "/sys/devices/virtual/mem/null/uevent"
	if os.Geteuid() != 0 {
		t.Skip("synthetic uevents need root")
	}
	var wakes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sources := DeviceEvents(ctx, t.TempDir(), logr.Discard(), func() { wakes.Add(1) })
	if len(sources) == 0 || sources[0] != "netlink" {
		t.Skip("no netlink uevents in this network namespace")
	}
	if err := os.WriteFile(trigger, []byte("change"), 0); err != nil {
		t.Skipf("cannot synthesize a uevent: %v", err)
	}
	require.Eventually(t, func() bool { return wakes.Load() >= 1 }, 5*time.Second, 5*time.Millisecond)
}

// Events that never stop (a battery reporting its charge) cost one wake per spacing, not one
// per event.
func TestDebouncerSpacesWakes(t *testing.T) {
	var wakes atomic.Int64
	d := &debouncer{wake: func() { wakes.Add(1) }, settle: 10 * time.Millisecond, limit: rate.NewLimiter(rate.Every(200*time.Millisecond), 2)}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		d.event()
		time.Sleep(time.Millisecond)
	}
	d.stop()
	// The burst of two, then one every 200 ms for the second.
	require.GreaterOrEqual(t, wakes.Load(), int64(4))
	require.LessOrEqual(t, wakes.Load(), int64(8))
}

func TestIsUevent(t *testing.T) {
	require.True(t, isUevent([]byte("add@/devices/x\x00ACTION=add\x00DEVPATH=/devices/x\x00")))
	require.True(t, isUevent([]byte("libudev\x00\xfe\xed\xca\xfe....\x00ACTION=remove\x00")))
	require.False(t, isUevent([]byte("garbage")))
}
