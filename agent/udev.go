package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/gitbroker/gitbroker/agent/details"
	"github.com/gitbroker/gitbroker/api"
)

// Akri's udev names.
const (
	UdevName = details.Udev
	// UdevDevnode and UdevDevpath are the properties of a udev device, as
	// Akri sets them.
	UdevDevnode = "UDEV_DEVNODE"
	UdevDevpath = "UDEV_DEVPATH"
)

// Udev is Akri's udev discovery handler. Its discoveryDetails hold
// udevRules, each a udev rule of match keys (KERNEL, SUBSYSTEM, DRIVER,
// DEVPATH, TAG, ATTR{…}, ENV{…} and the parent-walking KERNELS,
// SUBSYSTEMS, DRIVERS, ATTRS{…}, TAGS, with == or != and glob patterns);
// a device matching any rule is discovered, its id is its devpath.
//
// Devices are read from sysfs (<Root>/sys/devices) and the udev database
// (<Root>/run/udev/data), so tests point Root at a directory they build.
type Udev struct {
	// Root is the filesystem root; "/" on a node.
	Root string
}

// Discover implements Handler.
func (u Udev) Discover(_ context.Context, req Request) ([]api.Device, error) {
	spec, err := details.ParseUdev(req.Details)
	if err != nil {
		return nil, err
	}
	rules := spec.Rules
	db, err := scanSysfs(u.root())
	if err != nil {
		return nil, err
	}
	matched := map[string]*udevDevice{}
	for _, d := range db.devices {
		for _, r := range rules {
			if matchAll(db, d, r) {
				matched[d.devpath] = d
				break
			}
		}
	}
	// Group children under their top-most matched ancestor when asked,
	// as Akri's groupRecursive does.
	groups := map[string][]*udevDevice{}
	paths := slices.Sorted(maps.Keys(matched))
	for _, path := range paths {
		id := path
		if spec.GroupRecursive {
			for _, other := range paths {
				if strings.HasPrefix(path, other+"/") && len(other) < len(id) {
					id = other
				}
			}
		}
		groups[id] = append(groups[id], matched[path])
	}
	devices := make([]api.Device, 0, len(groups))
	for _, id := range slices.Sorted(maps.Keys(groups)) {
		dev := api.Device{ID: id, Properties: map[string]string{UdevDevpath: id}}
		for i, d := range groups[id] {
			if d.devnode == "" {
				continue
			}
			key := UdevDevnode
			if spec.GroupRecursive {
				key = fmt.Sprintf("%s_%d", UdevDevnode, i)
			}
			dev.Properties[key] = d.devnode
			dev.DeviceSpecs = append(dev.DeviceSpecs, api.DeviceSpec{ContainerPath: d.devnode, HostPath: d.devnode, Permissions: spec.Permissions})
		}
		devices = append(devices, dev)
	}
	return devices, nil
}

func (u Udev) root() string {
	if u.Root == "" {
		return "/"
	}
	return u.Root
}

func matchAll(db *udevDB, d *udevDevice, filters []details.UdevMatch) bool {
	for _, f := range filters {
		if matchOne(db, d, f) == f.Negate {
			return false
		}
	}
	return true
}

// matchOne reports whether the key matches; the caller applies negation.
func matchOne(db *udevDB, d *udevDevice, f details.UdevMatch) bool {
	self := func(dev *udevDevice) bool {
		switch f.Field {
		case "DEVPATH":
			return f.Pattern.MatchString(dev.devpath)
		case "KERNEL", "KERNELS":
			return f.Pattern.MatchString(dev.sysname)
		case "SUBSYSTEM", "SUBSYSTEMS":
			return f.Pattern.MatchString(dev.subsystem)
		case "DRIVER", "DRIVERS":
			return dev.driver != "" && f.Pattern.MatchString(dev.driver)
		case "TAG", "TAGS":
			for _, t := range dev.tags {
				if f.Pattern.MatchString(t) {
					return true
				}
			}
			return false
		case "ATTR", "ATTRS":
			v, ok := dev.attr(f.Attr)
			return ok && f.Pattern.MatchString(v)
		case "ENV":
			// An unset property compares as empty, as in udev.
			return f.Pattern.MatchString(dev.env[f.Attr])
		}
		return false
	}
	switch f.Field {
	case "KERNELS", "SUBSYSTEMS", "DRIVERS", "ATTRS", "TAGS":
		for dev := d; dev != nil; dev = db.parent(dev) {
			if self(dev) {
				return true
			}
		}
		return false
	}
	return self(d)
}

// udevDB is one scan of sysfs and the udev database.
type udevDB struct {
	root    string
	devices []*udevDevice
	bySys   map[string]*udevDevice
}

type udevDevice struct {
	syspath   string // on disk
	devpath   string // "/devices/..."
	sysname   string
	subsystem string
	driver    string
	devnode   string
	env       map[string]string
	tags      []string

	attrMu sync.Mutex
	attrs  map[string]*string
}

func (d *udevDevice) attr(name string) (string, bool) {
	d.attrMu.Lock()
	defer d.attrMu.Unlock()
	if v, ok := d.attrs[name]; ok {
		if v == nil {
			return "", false
		}
		return *v, true
	}
	if d.attrs == nil {
		d.attrs = map[string]*string{}
	}
	if strings.Contains(name, "..") {
		d.attrs[name] = nil
		return "", false
	}
	b, err := os.ReadFile(filepath.Join(d.syspath, filepath.FromSlash(name)))
	if err != nil {
		d.attrs[name] = nil
		return "", false
	}
	v := strings.TrimRight(string(b), " \t\r\n")
	d.attrs[name] = &v
	return v, true
}

func (db *udevDB) parent(d *udevDevice) *udevDevice {
	for p := filepath.Dir(d.syspath); strings.HasPrefix(p, filepath.Join(db.root, "sys", "devices")+string(filepath.Separator)); p = filepath.Dir(p) {
		if parent, ok := db.bySys[p]; ok {
			return parent
		}
	}
	return nil
}

// scanSysfs reads every device under <root>/sys/devices: each folder with
// a uevent file is one. Symlinks are not followed, so the walk ends.
func scanSysfs(root string) (*udevDB, error) {
	db := &udevDB{root: root, bySys: map[string]*udevDevice{}}
	sys := filepath.Join(root, "sys")
	base := filepath.Join(sys, "devices")
	err := filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == base {
				return err
			}
			return nil // unreadable corners of sysfs are skipped
		}
		if !e.IsDir() || p == base {
			return nil
		}
		uevent, err := os.ReadFile(filepath.Join(p, "uevent"))
		if err != nil {
			return nil
		}
		d := &udevDevice{
			syspath: p,
			devpath: "/" + filepath.ToSlash(strings.TrimPrefix(p, sys+string(filepath.Separator))),
			sysname: filepath.Base(p),
			env:     map[string]string{},
		}
		d.subsystem = linkBase(filepath.Join(p, "subsystem"))
		d.driver = linkBase(filepath.Join(p, "driver"))
		sc := bufio.NewScanner(bytes.NewReader(uevent))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				d.env[k] = v
			}
		}
		if name := d.env["DEVNAME"]; name != "" {
			if strings.HasPrefix(name, "/") {
				d.devnode = name
			} else {
				d.devnode = "/dev/" + name
			}
		}
		d.env["DEVPATH"] = d.devpath
		if d.subsystem != "" {
			d.env["SUBSYSTEM"] = d.subsystem
		}
		readUdevData(root, d)
		db.devices = append(db.devices, d)
		db.bySys[p] = d
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading sysfs at %s: %w", base, err)
	}
	sort.Slice(db.devices, func(i, j int) bool { return db.devices[i].devpath < db.devices[j].devpath })
	return db, nil
}

// readUdevData adds the udev database's properties (E:) and tags (G:, Q:).
func readUdevData(root string, d *udevDevice) {
	var id string
	switch {
	case d.env["MAJOR"] != "" && d.subsystem == "block":
		id = "b" + d.env["MAJOR"] + ":" + d.env["MINOR"]
	case d.env["MAJOR"] != "":
		id = "c" + d.env["MAJOR"] + ":" + d.env["MINOR"]
	case d.env["IFINDEX"] != "":
		id = "n" + d.env["IFINDEX"]
	default:
		id = "+" + d.subsystem + ":" + d.sysname
	}
	b, err := os.ReadFile(filepath.Join(root, "run", "udev", "data", id))
	if err != nil {
		return
	}
	tags := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "E:"):
			if k, v, ok := strings.Cut(line[2:], "="); ok {
				d.env[k] = v
			}
		case strings.HasPrefix(line, "G:"), strings.HasPrefix(line, "Q:"):
			tags[line[2:]] = true
		}
	}
	d.tags = slices.Sorted(maps.Keys(tags))
}

func linkBase(p string) string {
	target, err := os.Readlink(p)
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}
