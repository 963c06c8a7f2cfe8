package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
)

// fakeSysfs builds a small sysfs and udev database: a USB webcam (the USB
// device, its interface and a video4linux node), a USB serial adapter and
// a virtual tty.
func fakeSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dev := func(path string, uevent string, subsystem, driver string, attrs map[string]string) {
		full := filepath.Join(root, "sys", filepath.FromSlash(path))
		require.NoError(t, os.MkdirAll(full, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(full, "uevent"), []byte(uevent), 0o644))
		if subsystem != "" {
			require.NoError(t, os.Symlink("../../../../../class/"+subsystem, filepath.Join(full, "subsystem")))
		}
		if driver != "" {
			require.NoError(t, os.Symlink("../../../../bus/usb/drivers/"+driver, filepath.Join(full, "driver")))
		}
		for k, v := range attrs {
			require.NoError(t, os.WriteFile(filepath.Join(full, k), []byte(v+"\n"), 0o644))
		}
	}
	usb := "devices/pci0000:00/0000:00:14.0/usb1/1-1"
	dev(usb, "MAJOR=189\nMINOR=1\nDEVNAME=bus/usb/001/002\nDEVTYPE=usb_device\n", "usb", "usb",
		map[string]string{"idVendor": "046d", "idProduct": "0825", "product": "HD Webcam C270"})
	dev(usb+"/1-1:1.0", "DEVTYPE=usb_interface\nINTERFACE=14/1/0\n", "usb", "uvcvideo", nil)
	dev(usb+"/1-1:1.0/video4linux/video0", "MAJOR=81\nMINOR=0\nDEVNAME=video0\n", "video4linux", "",
		map[string]string{"name": "HD Webcam C270: HD Webcam C270", "index": "0"})
	dev(usb+"/1-1:1.0/video4linux/video1", "MAJOR=81\nMINOR=1\nDEVNAME=video1\n", "video4linux", "",
		map[string]string{"name": "HD Webcam C270: HD Webcam C270", "index": "1"})
	serial := "devices/pci0000:00/0000:00:14.0/usb1/1-2"
	dev(serial, "MAJOR=189\nMINOR=2\nDEVNAME=bus/usb/001/003\nDEVTYPE=usb_device\n", "usb", "usb",
		map[string]string{"idVendor": "0403", "idProduct": "6001"})
	dev(serial+"/1-2:1.0/ttyUSB0/tty/ttyUSB0", "MAJOR=188\nMINOR=0\nDEVNAME=ttyUSB0\n", "tty", "", nil)
	dev("devices/virtual/tty/tty0", "MAJOR=4\nMINOR=0\nDEVNAME=tty0\n", "tty", "", nil)
	// Power folders are not devices: no uevent.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sys", usb, "power"), 0o755))

	data := filepath.Join(root, "run", "udev", "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "c81:0"),
		[]byte("S:v4l/by-id/usb-046d_0825-video-index0\nE:ID_VENDOR=Logitech\nE:ID_V4L_CAPABILITIES=:capture:\nG:uaccess\nQ:uaccess\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(data, "c81:1"),
		[]byte("E:ID_VENDOR=Logitech\nE:ID_V4L_CAPABILITIES=:\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(data, "c188:0"),
		[]byte("E:ID_VENDOR=FTDI\nE:ID_SERIAL_SHORT=A50285BI\nG:systemd\n"), 0o644))
	return root
}

const (
	webcam  = "/devices/pci0000:00/0000:00:14.0/usb1/1-1"
	video0  = webcam + "/1-1:1.0/video4linux/video0"
	video1  = webcam + "/1-1:1.0/video4linux/video1"
	ttyUSB0 = "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/ttyUSB0/tty/ttyUSB0"
	tty0    = "/devices/virtual/tty/tty0"
)

func udevIDs(t *testing.T, root string, details string) []string {
	t.Helper()
	devices, err := agent.Udev{Root: root}.Discover(context.Background(), agent.Request{Details: details})
	require.NoError(t, err)
	ids := []string{}
	for _, d := range devices {
		ids = append(ids, d.ID)
	}
	return ids
}

func TestUdevRules(t *testing.T) {
	root := fakeSysfs(t)
	cases := map[string]struct {
		rules string
		want  []string
	}{
		"kernel glob":             {`['KERNEL=="video[0-9]*"']`, []string{video0, video1}},
		"subsystem":               {`['SUBSYSTEM=="tty"']`, []string{ttyUSB0, tty0}},
		"not equal":               {`['SUBSYSTEM=="tty", KERNEL!="tty[0-9]*"']`, []string{ttyUSB0}},
		"attribute":               {`['SUBSYSTEM=="video4linux", ATTR{index}=="0"']`, []string{video0}},
		"attribute glob":          {`['ATTR{name}=="*C270*"']`, []string{video0, video1}},
		"parent attribute":        {`['SUBSYSTEM=="tty", ATTRS{idVendor}=="0403"']`, []string{ttyUSB0}},
		"parent attr not matched": {`['SUBSYSTEM=="video4linux", ATTRS{idVendor}=="0403"']`, []string{}},
		"property from udev db":   {`['ENV{ID_V4L_CAPABILITIES}==":capture:"']`, []string{video0}},
		"property from uevent":    {`['ENV{DEVTYPE}=="usb_device"']`, []string{webcam, "/devices/pci0000:00/0000:00:14.0/usb1/1-2"}},
		"driver":                  {`['DRIVER=="uvcvideo"']`, []string{webcam + "/1-1:1.0"}},
		"parent driver":           {`['SUBSYSTEM=="video4linux", DRIVERS=="uvcvideo"']`, []string{video0, video1}},
		"parent kernel":           {`['SUBSYSTEM=="tty", KERNELS=="1-2"']`, []string{ttyUSB0}},
		"parent subsystem":        {`['KERNEL=="tty*", SUBSYSTEMS=="usb"']`, []string{ttyUSB0}},
		"tag":                     {`['TAG=="uaccess"']`, []string{video0}},
		"alternatives":            {`['KERNEL=="video0|ttyUSB0"']`, []string{video0, ttyUSB0}},
		"devpath glob":            {`['DEVPATH=="/devices/virtual/*"']`, []string{tty0}},
		"any of several rules":    {`['KERNEL=="video1"', 'KERNEL=="tty0"']`, []string{video1, tty0}},
		"nothing":                 {`['KERNEL=="nvme*"']`, []string{}},
		"unset property is empty": {`['SUBSYSTEM=="tty", ENV{ID_SERIAL_SHORT}==""']`, []string{tty0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, udevIDs(t, root, "udevRules: "+tc.rules))
		})
	}
}

func TestUdevDeviceProperties(t *testing.T) {
	root := fakeSysfs(t)
	devices, err := agent.Udev{Root: root}.Discover(context.Background(), agent.Request{Details: `udevRules: ['KERNEL=="video0"']`})
	require.NoError(t, err)
	require.Equal(t, []api.Device{{
		ID:          video0,
		Properties:  map[string]string{"UDEV_DEVNODE": "/dev/video0", "UDEV_DEVPATH": video0},
		DeviceSpecs: []api.DeviceSpec{{ContainerPath: "/dev/video0", HostPath: "/dev/video0", Permissions: "rwm"}},
	}}, devices)

	// A device without a devnode has only its devpath.
	devices, err = agent.Udev{Root: root}.Discover(context.Background(), agent.Request{Details: `udevRules: ['DRIVER=="uvcvideo"']`})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"UDEV_DEVPATH": webcam + "/1-1:1.0"}, devices[0].Properties)
	require.Empty(t, devices[0].DeviceSpecs)
}

func TestUdevGroupRecursive(t *testing.T) {
	root := fakeSysfs(t)
	devices, err := agent.Udev{Root: root}.Discover(context.Background(), agent.Request{
		Details: "udevRules: ['ATTRS{idVendor}==\"046d\", ENV{DEVNAME}==\"?*\"']\ngroupRecursive: true\n",
	})
	require.NoError(t, err)
	require.Len(t, devices, 1)
	require.Equal(t, webcam, devices[0].ID)
	require.Equal(t, map[string]string{
		"UDEV_DEVPATH":   webcam,
		"UDEV_DEVNODE_0": "/dev/bus/usb/001/002",
		"UDEV_DEVNODE_1": "/dev/video0",
		"UDEV_DEVNODE_2": "/dev/video1",
	}, devices[0].Properties)
}

func TestUdevRuleErrors(t *testing.T) {
	root := fakeSysfs(t)
	cases := map[string]string{
		`udevRules: ['NAME=="x"']`:                "unsupported field NAME",
		`udevRules: ['KERNEL="video0"']`:          "assignment",
		`udevRules: ['ENV{ID}+="x"']`:             "assignment",
		`udevRules: ['ATTR=="x"']`:                "needs a {name}",
		`udevRules: ['KERNEL{x}=="x"']`:           "takes no {name}",
		`udevRules: ['KERNEL=="video0" junk']`:    "cannot parse",
		`udevRules: ['KERNEL=="video[0"']`:        "unclosed [",
		`udevRules: ['']`:                         "empty udev rule",
		`descriptions: [a]`:                       "unknown field",
		``:                                        "udevRules is required",
		`udevRules: ['KERNEL=="a"'], extra: true`: "did not find expected key",
	}
	for details, want := range cases {
		t.Run(details, func(t *testing.T) {
			_, err := agent.Udev{Root: root}.Discover(context.Background(), agent.Request{Details: details})
			require.ErrorContains(t, err, want)
		})
	}
	_, err := agent.Udev{Root: filepath.Join(root, "missing")}.Discover(context.Background(), agent.Request{Details: `udevRules: ['KERNEL=="x"']`})
	require.ErrorContains(t, err, "reading sysfs")
}
