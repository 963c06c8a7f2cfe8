package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
)

// Defaults for Options.
const (
	DefaultInterval = 30 * time.Second
	// DefaultSharedGracePeriod is Akri's grace period for shared devices.
	DefaultSharedGracePeriod = 5 * time.Minute
	// DefaultLocalGracePeriod absorbs a local device re-enumerating (a USB
	// reset) without keeping an unplugged one for long.
	DefaultLocalGracePeriod = 30 * time.Second
)

// Options configures an Agent.
type Options struct {
	// Node is this node's name; it names inventory/<node>.yaml.
	Node string
	// Store is the node's own ref (or a directory) the inventory is written to.
	Store gitsync.Store
	// Configurations is where the Configurations are read from: the renderer's verified
	// publication (publication.Configurations) or, unverified, the people's branch; Store when nil (a
	// directory holds both). A read that returns a snapshot with an error (a publication
	// refused, the last accepted one standing in) is logged, and discovery goes on with it.
	// nil (a directory holds both).
	Configurations ConfigurationSource
	// Handlers finds discovery handlers by name.
	Handlers Source
	// Interval is the time between discovery cycles.
	Interval time.Duration
	// SharedGracePeriod and LocalGracePeriod are how long a vanished
	// shared or local device stays in the inventory. A Configuration's
	// gitbroker.dev/offline-grace-period annotation overrides both.
	SharedGracePeriod time.Duration
	LocalGracePeriod  time.Duration
	// Author signs the agent's commits; the time is filled in per commit.
	Author gitsync.Signature
	Log    logr.Logger
	// Devices, when set, is given the node's instances after every discovery: the kubelet
	// device plugin that serves akri.sh/<instance> and akri.sh/<configuration>.
	Devices DeviceSink
	// PropertiesDir holds the values of discoveryProperties[].valueFrom, mounted from their
	// Secrets and ConfigMaps (DefaultPropertiesDir); "" resolves none.
	PropertiesDir string
	// Enrolment, when set, is checked each cycle against the Configurations' allowed_signers:
	// an agent the renderer would ignore is not ready and says why. nil checks nothing (a work
	// tree, where no commit is made).
	Enrolment *Enrolment
	// Metrics may be nil.
	Metrics *Metrics
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// CycleTimeout bounds one cycle (fetch, discovery, write).
	CycleTimeout time.Duration
	// ShutdownGrace is how long a cycle in flight may go on after Run's
	// context ends.
	ShutdownGrace time.Duration
	// Pushed, when set, is called after each commit of the inventory lands, with the commit:
	// the nudge that wakes the renderer (notify.Nudge). It must not block the cycle for long.
	Pushed func(commit string)
}

// ConfigurationSource returns the snapshot the Configurations are read from.
type ConfigurationSource interface {
	Snapshot(ctx context.Context) (gitsync.Snapshot, error)
}

// publication is a ConfigurationSource that is the renderer's signed publication
// (publication.Configurations): the agent names the one it used in its commits and, restarted, gives it
// back as the floor below which nothing is taken.
type publication interface {
	Used() (string, time.Time)
	SetFloor(commit string, when time.Time)
}

// configurationsKey keys the reported error of the Configurations' source.
const configurationsKey = "(configurations)"

// Agent keeps one node's inventory in step with what its handlers see.
type Agent struct {
	opts Options
	path string

	mu sync.Mutex
	// tracked holds every device the node reports, per Configuration key.
	tracked map[string]map[string]*trackedDevice
	// lastGood is the last valid parse of each Configuration file, used
	// while the file is invalid.
	lastGood map[string][]*api.ParsedConfiguration
	// reported is the error last logged for each invalid input file, so one invalid file is
	// logged once per change, not every cycle.
	reported map[string]string
	loaded   bool
	floorSet bool // the publication floor was read from the agent's own last commit
	// instanceDigests are the publication's instance digests that are not Akri's 3-byte ones,
	// by Configuration key (digestsOf).
	instanceDigests map[string]map[api.DeviceKey]string
	noHandler       map[string]bool
	// nothingFound are the Configurations whose last discovery found no device, so that it is
	// said once, when it starts.
	nothingFound map[string]bool

	wake  chan struct{}
	ready atomic.Bool
	// propertiesOK is false while a Configuration's discovery property cannot be resolved.
	propertiesOK atomic.Bool
	// enrolled is false while the renderer would ignore what the agent writes.
	enrolled atomic.Bool
	last     atomic.Int64
}

type trackedDevice struct {
	device   api.Device
	lastSeen time.Time
}

// ValidateNodeName refuses names that cannot be a Kubernetes node name or
// would escape inventory/.
func ValidateNodeName(node string) error {
	if node == "" {
		return errors.New("node name is empty: set --node or NODE_NAME")
	}
	if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
		return fmt.Errorf("node name %q is not a valid DNS-1123 name: %s", node, strings.Join(msgs, "; "))
	}
	return nil
}

// New validates opts and returns an Agent.
func New(opts Options) (*Agent, error) {
	if err := ValidateNodeName(opts.Node); err != nil {
		return nil, err
	}
	if opts.Store == nil {
		return nil, errors.New("agent needs a store")
	}
	if opts.Handlers == nil {
		opts.Handlers = Builtin{}
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.SharedGracePeriod < 0 || opts.LocalGracePeriod < 0 {
		return nil, errors.New("grace periods must not be negative")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CycleTimeout <= 0 {
		opts.CycleTimeout = 5 * time.Minute
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 20 * time.Second
	}
	if opts.Author.Name == "" {
		opts.Author = gitsync.Signature{Name: "gitbroker-agent", Email: "agent@gitbroker.dev"}
	}
	return &Agent{
		opts:         opts,
		path:         api.InventoryPath(opts.Node),
		tracked:      map[string]map[string]*trackedDevice{},
		lastGood:     map[string][]*api.ParsedConfiguration{},
		reported:     map[string]string{},
		noHandler:    map[string]bool{},
		nothingFound: map[string]bool{},
		wake:         make(chan struct{}, 1),
	}, nil
}

// Notify asks for a cycle now, for handlers that learn of changes by
// themselves (a gRPC stream).
func (a *Agent) Notify() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Ready reports whether the inventory on the branch matches what the
// agent sees, as of the last cycle. A node not enrolled yet is ready: it
// writes its inventory and serves its devices all the same (Enrolled, the
// log and gitbroker_agent_enrolled say it), and an unready agent would stop
// a DaemonSet's rolling update at that node, for every node after it.
func (a *Agent) Ready() bool { return a.ready.Load() && a.propertiesOK.Load() }

// Enrolled reports whether the last cycle found the agent's key enrolled (or nothing to check).
func (a *Agent) Enrolled() bool { return a.enrolled.Load() }

// PropertiesResolved reports whether every discovery property could be resolved in the last cycle.
func (a *Agent) PropertiesResolved() bool { return a.propertiesOK.Load() }

// LastCycle is when the last cycle ended, for liveness checks.
func (a *Agent) LastCycle() time.Time { return time.Unix(0, a.last.Load()) }

// Run cycles until ctx ends. A failed cycle is logged and retried at the
// next tick; the agent's state survives it, so nothing is dropped. When
// ctx ends during a cycle, the cycle may finish its write for up to
// ShutdownGrace, so a SIGTERM right after a device changed still lands it.
func (a *Agent) Run(ctx context.Context) error {
	t := time.NewTicker(a.opts.Interval)
	defer t.Stop()
	for {
		cycle, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.CycleTimeout)
		stop := context.AfterFunc(ctx, func() { time.AfterFunc(a.opts.ShutdownGrace, cancel) })
		_, err := a.Sync(cycle)
		stop()
		cancel()
		if err != nil {
			a.opts.Log.Error(err, "cycle failed; will retry")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.wake:
		}
	}
}

// Outcome says what one cycle did.
type Outcome struct {
	// Commit is the commit that wrote the inventory, "" when nothing
	// changed.
	Commit string
	// Devices counts the devices in the inventory.
	Devices int
	Result  gitsync.Result
	// NotEnrolled is why the renderer would ignore the inventory (Options.Enrolment), or nil.
	NotEnrolled error
}

// Sync runs one cycle: read the head, discover, and write the inventory if
// it changed.
func (a *Agent) Sync(ctx context.Context) (Outcome, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer func() { a.last.Store(a.opts.Now().UnixNano()) }()
	a.opts.Metrics.cycle()

	head, err := a.opts.Store.Snapshot(ctx)
	if err != nil {
		a.ready.Store(false)
		return Outcome{}, fmt.Errorf("reading the inventory's head: %w", err)
	}
	src := head
	pub, published := a.opts.Configurations.(publication)
	if published && !a.floorSet {
		// A restarted agent never takes a publication older than the one its own last commit
		// used: the renderer's publication can be moved back by anyone who can push to it.
		if c := gitsync.HeadCommit(head); c != nil {
			if v, ok := gitsync.TrailerValue(c.Raw, api.TrailerPublication); ok {
				if commit, when, ok := api.ParsePublication(v); ok {
					pub.SetFloor(commit, when)
				}
			}
		}
		a.floorSet = true
	}
	if a.opts.Configurations != nil {
		src, err = a.opts.Configurations.Snapshot(ctx)
		switch {
		case err != nil && src == nil:
			a.ready.Store(false)
			return Outcome{}, fmt.Errorf("reading the Configurations: %w", err)
		case err != nil:
			a.opts.Metrics.refusedConfigurations(true)
			if a.report(configurationsKey, err) {
				a.opts.Log.Error(err, "discovering with the Configurations accepted before", "commit", src.Commit())
			}
		default:
			a.opts.Metrics.refusedConfigurations(false)
			delete(a.reported, configurationsKey)
		}
	}
	enrolErr := a.enrolment(src)
	configs, unsure, err := a.configurations(src)
	if err != nil {
		a.ready.Store(false)
		return Outcome{NotEnrolled: enrolErr}, err
	}
	if digests, err := readInstanceDigests(src); err != nil {
		a.opts.Log.Error(err, "naming instances by Akri's digests alone")
		a.instanceDigests = nil
	} else {
		a.instanceDigests = digests
	}
	if !a.loaded {
		if err := a.loadInventory(head); err != nil {
			a.opts.Log.Error(err, "ignoring the inventory on the branch", "file", a.path)
		}
		a.loaded = true
	}
	a.discover(ctx, configs)

	want, count, err := a.inventory(head, configs, unsure)
	if err != nil {
		a.ready.Store(false)
		return Outcome{}, err
	}
	out := Outcome{Devices: count, NotEnrolled: enrolErr}
	if have, err := head.ReadFile(a.path); err == nil && bytes.Equal(have, want) && !gitsync.Replaces(head) {
		a.ready.Store(true)
		return out, nil
	}
	trailers := []gitsync.Trailer{{Key: "Gitbroker-Node", Value: a.opts.Node}}
	if published {
		if commit, when := pub.Used(); commit != "" {
			trailers = append(trailers, gitsync.Trailer{Key: api.TrailerPublication, Value: api.FormatPublication(commit, when)})
		}
	}
	res, err := a.opts.Store.Update(ctx, func(_ context.Context, h gitsync.Snapshot) (*gitsync.Change, error) {
		b, _, err := a.inventory(h, configs, unsure)
		if err != nil {
			return nil, err
		}
		author := a.opts.Author
		author.When = a.opts.Now()
		return &gitsync.Change{
			Owned:    []string{a.path},
			Files:    map[string][]byte{a.path: b},
			Message:  fmt.Sprintf("inventory: %s sees %d device(s)", a.opts.Node, count),
			Trailers: trailers,
			Author:   author,
		}, nil
	})
	out.Result = res
	a.opts.Metrics.push(res, err)
	switch {
	case errors.Is(err, gitsync.ErrNoChanges):
		a.ready.Store(true)
		return out, nil
	case err != nil:
		a.ready.Store(false)
		return out, fmt.Errorf("writing %s: %w", a.path, err)
	}
	a.ready.Store(true)
	out.Commit = res.Commit
	if a.opts.Pushed != nil {
		a.opts.Pushed(res.Commit)
	}
	a.opts.Log.Info("inventory written", "devices", count,
		"commit", res.Commit, "attempts", res.Attempts, "conflicts", res.Conflicts, "retries", res.Retries,
		"duration", res.Elapsed.String())
	if res.Replaced != "" {
		a.opts.Log.Error(errors.New("the branch held commits this agent did not sign"), "dropped what someone else pushed on the node's ref", "replaced", res.Replaced, "commit", res.Commit)
	}
	return out, nil
}

// configurations parses every Configuration file at head. An invalid file
// is logged and its last good parse stands in for it; with no good parse
// (the agent just started), unsure is true: the agent then cannot tell
// which Configurations the file held, and keeps the branch's inventory
// entries of any Configuration it does not know.
func (a *Agent) configurations(head gitsync.Snapshot) (map[string]*api.ParsedConfiguration, bool, error) {
	defaultNS := api.DefaultNamespace
	if b, err := head.ReadFile(api.SettingsPath); err == nil {
		s, errs := api.ParseSettings(api.SettingsPath, b)
		if len(errs) == 0 {
			defaultNS = s.DefaultNamespace
			delete(a.reported, api.SettingsPath)
		} else if a.report(api.SettingsPath, errs) {
			a.opts.Log.Error(errs, "invalid settings; using the default namespace", "file", api.SettingsPath)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	files, err := head.Files(api.ConfigurationsDir)
	if err != nil {
		return nil, false, err
	}
	unsure := false
	out := map[string]*api.ParsedConfiguration{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !api.IsConfigurationPath(name) {
			continue
		}
		parsed, errs := api.ParseConfigurations(name, files[name], defaultNS)
		if len(errs) > 0 {
			a.opts.Metrics.invalid()
			prev, ok := a.lastGood[name]
			if a.report(name, errs) {
				a.opts.Log.Error(errs, "invalid Configuration file; discovering with its last valid version",
					"file", name, "lastValidKnown", ok)
			}
			if !ok {
				unsure = true
			}
			parsed = prev
		} else {
			a.lastGood[name] = parsed
			delete(a.reported, name)
		}
		for _, c := range parsed {
			if _, dup := out[c.Key()]; !dup {
				out[c.Key()] = c
			}
		}
	}
	for name := range a.lastGood {
		if _, ok := files[name]; !ok {
			delete(a.lastGood, name)
		}
	}
	for name := range a.reported {
		// Keys in parentheses (the Configurations' source, the enrolment) are not files.
		if _, ok := files[name]; !ok && name != api.SettingsPath && !strings.HasPrefix(name, "(") {
			delete(a.reported, name)
		}
	}
	return out, unsure, nil
}

// report says whether errs for file are new since the last report, and remembers them.
func (a *Agent) report(file string, errs error) bool {
	msg := errs.Error()
	if a.reported[file] == msg {
		return false
	}
	a.reported[file] = msg
	return true
}

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

// discover runs each Configuration's handler and updates the tracked
// devices. A handler error keeps that Configuration's devices as they
// were: not knowing is not the same as seeing nothing.
func (a *Agent) discover(ctx context.Context, configs map[string]*api.ParsedConfiguration) {
	now := a.opts.Now()
	unresolved := 0
	defer func() { a.propertiesOK.Store(unresolved == 0) }()
	wanted := map[string]bool{}
	for _, key := range slices.Sorted(maps.Keys(configs)) {
		c := configs[key]
		name := c.Spec.DiscoveryHandler.Name
		h, ok := a.opts.Handlers.Handler(name)
		if !ok {
			if !a.noHandler[key] {
				why := "no Akri discovery handler of that name has registered on this node"
				if name == DebugEchoName {
					why = "debugEcho is a test handler, served only with --allow-debug-echo (Akri's agent.allowDebugEcho)"
				}
				a.opts.Log.Info("no discovery handler registered for this Configuration; its devices age out",
					"configuration", key, "handler", name, "why", why)
				a.noHandler[key] = true
			}
			a.expire(key, nil, c, now)
			continue
		}
		delete(a.noHandler, key)
		props, err := a.properties(c)
		a.opts.Metrics.unresolvedProperties(key, err != nil)
		if err != nil {
			// Discovering without a credential would find nothing and drop the devices.
			unresolved++
			if a.report(key+"\x00properties", err) {
				a.opts.Log.Error(err, "cannot resolve a discovery property; keeping this Configuration's devices", "configuration", key, "handler", name)
			}
			continue
		}
		delete(a.reported, key+"\x00properties")
		req := Request{Configuration: key, Details: c.Spec.DiscoveryHandler.DiscoveryDetails, Properties: props}
		wanted[requestKey(req)] = true
		devices, err := h.Discover(ctx, req)
		if err != nil {
			a.opts.Metrics.discoveryError(name)
			if !errors.Is(err, ErrNotReady) {
				a.opts.Log.Error(err, "discovery failed; keeping this Configuration's devices", "configuration", key, "handler", name)
			}
			continue
		}
		a.noteNothingFound(key, name, len(devices) == 0)
		a.expire(key, a.sanitize(key, c, devices), c, now)
	}

	for key := range a.tracked {
		if _, ok := configs[key]; !ok {
			delete(a.tracked, key)
		}
	}
	if r, ok := a.opts.Handlers.(Retainer); ok {
		r.Retain(wanted)
	}
	a.serveDevices(configs, now)
}

// noteNothingFound logs, once when it starts, that a Configuration's discovery finds no device on
// this node: a udev rule that matches nothing, say, gave no sign at all.
func (a *Agent) noteNothingFound(key, handler string, none bool) {
	if !none {
		delete(a.nothingFound, key)
		return
	}
	if a.nothingFound[key] {
		return
	}
	a.nothingFound[key] = true
	hint := "the handler reports no device for its discoveryDetails"
	if handler == UdevName {
		hint = "no device on this node matches its udevRules (udevadm info --export-db shows what each rule can match)"
	}
	a.opts.Log.Info("discovery found no device for this Configuration on this node", "configuration", key, "handler", handler, "why", hint)
}

// expire records the devices seen now and drops those unseen for longer
// than their grace period.
func (a *Agent) expire(key string, seen []api.Device, c *api.ParsedConfiguration, now time.Time) {
	m := a.tracked[key]
	if m == nil {
		m = map[string]*trackedDevice{}
		a.tracked[key] = m
	}
	present := map[string]bool{}
	for _, d := range seen {
		present[d.ID] = true
		m[d.ID] = &trackedDevice{device: d, lastSeen: now}
	}
	for id, t := range m {
		if present[id] {
			continue
		}
		if now.Sub(t.lastSeen) >= a.grace(c, t.device.Shared) {
			delete(m, id)
		}
	}
}

func (a *Agent) grace(c *api.ParsedConfiguration, shared bool) time.Duration {
	if d, ok := c.OfflineGracePeriod(); ok {
		return d
	}
	if shared {
		return a.opts.SharedGracePeriod
	}
	return a.opts.LocalGracePeriod
}

// sanitize drops what the renderer would reject, so one odd device from a
// handler never invalidates the node's whole inventory.
func (a *Agent) sanitize(key string, c *api.ParsedConfiguration, devices []api.Device) []api.Device {
	out := make([]api.Device, 0, len(devices))
	seen := map[string]bool{}
	for _, d := range devices {
		switch {
		case d.ID == "":
			a.opts.Log.Info("dropping a device without an id", "configuration", key)
			continue
		case seen[d.ID]:
			a.opts.Log.Info("dropping a device reported twice", "configuration", key, "device", d.ID)
			continue
		}
		seen[d.ID] = true
		for k := range d.Properties {
			if msgs := validation.IsCIdentifier(k); len(msgs) > 0 {
				a.opts.Log.Info("dropping a property that is not a valid environment variable name",
					"configuration", key, "device", d.ID, "property", k)
				delete(d.Properties, k)
				continue
			}
			if !c.DeviceMaySet(k) {
				// The renderer refuses an inventory with it (the node's part stays as it was): an
				// honest agent leaves it out, and says so once.
				p := api.HandlerPropertyPrefix(c.Spec.DiscoveryHandler.Name)
				why := fmt.Errorf("devices of discovery handler %s may set only names starting %s or AKRI_%s, and no loader or proxy variable, unless the Configuration allows them by name (annotation %s)",
					c.Spec.DiscoveryHandler.Name, p, p, api.AnnotationAllowedDeviceProperties)
				if a.report(key+"\x00property\x00"+k, why) {
					a.opts.Log.Info("leaving out a device property its Configuration does not let devices set", "configuration", key, "property", k, "why", why.Error())
				}
				delete(d.Properties, k)
			}
		}
		if len(d.Properties) == 0 {
			d.Properties = nil
		}
		mounts := d.Mounts[:0:0]
		for _, m := range d.Mounts {
			if m.ContainerPath != "" && m.HostPath != "" {
				mounts = append(mounts, m)
			}
		}
		d.Mounts = mounts
		specs := d.DeviceSpecs[:0:0]
		for _, s := range d.DeviceSpecs {
			if s.ContainerPath != "" && s.HostPath != "" {
				specs = append(specs, s)
			}
		}
		d.DeviceSpecs = specs
		out = append(out, d)
	}
	return out
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
