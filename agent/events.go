package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// Device events: how soon after an event the agent rescans, and how often at most.
const (
	// eventSettle is how long the agent waits after a device event for the ones that come with
	// it (a USB device brings several: the device, its interfaces, its tty), so one rescan
	// sees them all.
	eventSettle = 100 * time.Millisecond
	// eventSpacing and eventBurst bound the rescans that events start: a few devices plugged
	// one after the other are each rescanned at once, while a host whose devices report
	// changes without end (a battery, a thermal zone) costs one rescan a second, not one per
	// event.
	eventSpacing = time.Second
	eventBurst   = 5
)

// Netlink multicast groups of NETLINK_KOBJECT_UEVENT: the kernel's uevents, and udevd's after
// its rules ran (libudev's monitor "udev").
const (
	uevGroupKernel = 1
	uevGroupUdev   = 2
)

// DeviceEvents follows the node's device events and calls wake shortly after each burst of
// them (DESIGN.md, "Seconds, not minutes"), so a plugged device is discovered within a second
// instead of at the next interval; the interval's rescan stays, the safety net. It follows:
//
//   - the kernel's and udevd's uevents over netlink (NETLINK_KOBJECT_UEVENT), which reach a
//     process in the host's network namespace (the agent's DaemonSet runs with hostNetwork);
//   - the udev database, <root>/run/udev/data, which udevd writes after its rules ran, and
//     which is what the udev handler reads the properties from (a node whose /run/udev is
//     mounted but whose netlink events do not reach the agent still gets them, and so do the
//     tests' fixture roots).
//
// It returns the sources it follows ("netlink", "udev-database"); an unavailable one is
// logged and left out. They stop when ctx ends.
func DeviceEvents(ctx context.Context, root string, log logr.Logger, wake func()) []string {
	d := &debouncer{wake: wake, settle: eventSettle, limit: rate.NewLimiter(rate.Every(eventSpacing), eventBurst)}
	var sources []string
	if err := watchNetlink(ctx, d.event); err != nil {
		log.Info("kernel device events (netlink) are not available; rescanning on the udev database and the interval", "reason", err.Error())
	} else {
		sources = append(sources, "netlink")
	}
	dir := filepath.Join(root, "run", "udev", "data")
	if err := watchDir(ctx, dir, d.event); err != nil {
		log.Info("the udev database cannot be watched; rescanning on netlink events and the interval", "dir", dir, "reason", err.Error())
	} else {
		sources = append(sources, "udev-database")
	}
	go func() {
		<-ctx.Done()
		d.stop()
	}()
	return sources
}

// debouncer turns a stream of events into wakes: a wake settle after an event, with the
// events until then, and no more wakes than limit allows (the later ones wait their turn).
type debouncer struct {
	wake   func()
	settle time.Duration
	limit  *rate.Limiter

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func (d *debouncer) event() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.timer != nil {
		return // a wake is already coming, and will see this event's change
	}
	delay := max(d.settle, d.limit.Reserve().Delay())
	d.timer = time.AfterFunc(delay, func() {
		d.mu.Lock()
		d.timer = nil
		stopped := d.stopped
		d.mu.Unlock()
		if !stopped {
			d.wake()
		}
	})
}

func (d *debouncer) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
}

// watchNetlink calls event for every device uevent (any action on any device: the rescan
// decides what changed).
func watchNetlink(ctx context.Context, event func()) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: uevGroupKernel | uevGroupUdev}); err != nil {
		unix.Close(fd)
		return err
	}
	// A read returns at least every second, so the loop sees ctx end (closing a socket another
	// thread reads from does not wake that read).
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		unix.Close(fd)
		return err
	}
	go func() {
		defer unix.Close(fd)
		buf := make([]byte, 64<<10)
		for ctx.Err() == nil {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			switch {
			case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ENOBUFS):
				// Events were lost while the socket's buffer was full: rescan anyway.
				event()
				continue
			case err != nil:
				return
			}
			if isUevent(buf[:n]) {
				event()
			}
		}
	}()
	return nil
}

// isUevent reports whether a netlink message is a device uevent: the kernel's
// ("<action>@<devpath>\0KEY=value\0...") or udevd's ("libudev\0" and a header, then the
// same keys); both carry ACTION=.
func isUevent(msg []byte) bool {
	return bytes.Contains(msg, []byte("\x00ACTION="))
}

// watchDir calls event for every file created, written, renamed or removed in dir.
func watchDir(ctx context.Context, dir string, event func()) error {
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return err
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				event()
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				event() // an overflow: something changed that was not reported
			}
		}
	}()
	return nil
}
