package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
)

// Akri's udev names.
const (
	UdevName = "udev"
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

type udevDetails struct {
	UdevRules      []string `json:"udevRules"`
	GroupRecursive bool     `json:"groupRecursive,omitempty"`
}

// Discover implements Handler.
func (u Udev) Discover(_ context.Context, req Request) ([]api.Device, error) {
	var details udevDetails
	if err := yaml.UnmarshalStrict([]byte(req.Details), &details); err != nil {
		return nil, fmt.Errorf("udev discoveryDetails: %w", err)
	}
	if details.UdevRules == nil {
		return nil, errors.New("udev discoveryDetails: udevRules is required")
	}
	rules := make([][]udevFilter, len(details.UdevRules))
	for i, r := range details.UdevRules {
		f, err := parseUdevRule(r)
		if err != nil {
			return nil, fmt.Errorf("udev discoveryDetails: udevRules[%d]: %w", i, err)
		}
		rules[i] = f
	}
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
		if details.GroupRecursive {
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
			if details.GroupRecursive {
				key = fmt.Sprintf("%s_%d", UdevDevnode, i)
			}
			dev.Properties[key] = d.devnode
			dev.DeviceSpecs = append(dev.DeviceSpecs, api.DeviceSpec{ContainerPath: d.devnode, HostPath: d.devnode, Permissions: "rwm"})
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

// udevFilter is one match key of a rule.
type udevFilter struct {
	field  string // KERNEL, ATTR, ...
	attr   string // the {…} part
	negate bool
	match  *regexp.Regexp
}

var (
	udevKeyRe = regexp.MustCompile(`^\s*([A-Z]+)(?:\{([^}]*)\})?\s*(==|!=|\+=|-=|:=|=)\s*"([^"]*)"\s*(?:,|$)`)
	// udevFields lists the match keys and whether they take {attr}.
	udevFields = map[string]bool{
		"DEVPATH": false, "KERNEL": false, "KERNELS": false, "SUBSYSTEM": false, "SUBSYSTEMS": false,
		"DRIVER": false, "DRIVERS": false, "TAG": false, "TAGS": false,
		"ATTR": true, "ATTRS": true, "ENV": true,
	}
)

// parseUdevRule parses one udev rule into its match keys. Assignment keys
// and operators are refused, as Akri does: discovery only matches.
func parseUdevRule(rule string) ([]udevFilter, error) {
	rest := strings.TrimSpace(rule)
	if rest == "" {
		return nil, errors.New("empty udev rule")
	}
	var out []udevFilter
	for rest != "" {
		m := udevKeyRe.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("cannot parse udev rule %q near %q: expected KEY==\"value\" or KEY!=\"value\"", rule, rest)
		}
		field, attr, op, value := m[1], m[2], m[3], m[4]
		takesAttr, known := udevFields[field]
		switch {
		case !known:
			return nil, fmt.Errorf("udev rule %q: unsupported field %s (supported: DEVPATH, KERNEL, KERNELS, SUBSYSTEM, SUBSYSTEMS, DRIVER, DRIVERS, TAG, TAGS, ATTR{…}, ATTRS{…}, ENV{…})", rule, field)
		case takesAttr && attr == "":
			return nil, fmt.Errorf("udev rule %q: %s needs a {name}", rule, field)
		case !takesAttr && strings.Contains(m[0][:strings.Index(m[0], op)], "{"):
			return nil, fmt.Errorf("udev rule %q: %s takes no {name}", rule, field)
		case op != "==" && op != "!=":
			return nil, fmt.Errorf("udev rule %q: %s%s is an assignment; discovery rules only match with == or !=", rule, field, op)
		}
		re, err := globRegexp(value)
		if err != nil {
			return nil, fmt.Errorf("udev rule %q: pattern %q: %w", rule, value, err)
		}
		out = append(out, udevFilter{field: field, attr: attr, negate: op == "!=", match: re})
		rest = strings.TrimSpace(rest[len(m[0]):])
	}
	return out, nil
}

// globRegexp turns a udev pattern (*, ?, [...], alternatives with |) into
// an anchored regular expression. Unlike shell globs, * crosses "/", as in
// udev.
func globRegexp(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^(?:")
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '|':
			b.WriteString("|")
		case '[':
			end := strings.IndexByte(pattern[i+1:], ']')
			if end < 0 {
				return nil, errors.New("unclosed [")
			}
			class := pattern[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(")$")
	return regexp.Compile(b.String())
}

func matchAll(db *udevDB, d *udevDevice, filters []udevFilter) bool {
	for _, f := range filters {
		if matchOne(db, d, f) == f.negate {
			return false
		}
	}
	return true
}

// matchOne reports whether the key matches; the caller applies negation.
func matchOne(db *udevDB, d *udevDevice, f udevFilter) bool {
	self := func(dev *udevDevice) bool {
		switch f.field {
		case "DEVPATH":
			return f.match.MatchString(dev.devpath)
		case "KERNEL", "KERNELS":
			return f.match.MatchString(dev.sysname)
		case "SUBSYSTEM", "SUBSYSTEMS":
			return f.match.MatchString(dev.subsystem)
		case "DRIVER", "DRIVERS":
			return dev.driver != "" && f.match.MatchString(dev.driver)
		case "TAG", "TAGS":
			for _, t := range dev.tags {
				if f.match.MatchString(t) {
					return true
				}
			}
			return false
		case "ATTR", "ATTRS":
			v, ok := dev.attr(f.attr)
			return ok && f.match.MatchString(v)
		case "ENV":
			// An unset property compares as empty, as in udev.
			return f.match.MatchString(dev.env[f.attr])
		}
		return false
	}
	switch f.field {
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
