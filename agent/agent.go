package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

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
	// Shares, when set, reads this node's slots of each shared instance from the renderer's
	// publication (publication.Shares), before every serving of Devices: a shared device
	// offers only those, so the nodes that see it offer its capacity once (docs/DESIGN.md,
	// "Devices counted once across the cluster"). A read that fails keeps the shares read
	// last; before any is read, a shared device offers none. nil offers every shared device's
	// whole capacity (a work tree, an agent that checks no publication).
	Shares func(ctx context.Context) (map[string]int, error)
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
	// cluster is the node's cluster in the published gitbroker.yaml's spec.clusters, or "".
	cluster   string
	noHandler map[string]bool
	// shares are the slots of the shared instances this node may offer (Options.Shares), and
	// sharesErr the error their last read gave, logged once.
	shares    map[string]int
	sharesErr string
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

// sharesFollowUps are when, after a push of the inventory, the agent runs a cycle again to read
// the shares the render of that push gives (Options.Shares).
var sharesFollowUps = []time.Duration{2 * time.Second, 5 * time.Second, 15 * time.Second}

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
		out, err := a.Sync(cycle)
		stop()
		cancel()
		if err != nil {
			a.opts.Log.Error(err, "cycle failed; will retry")
		}
		if out.Commit != "" && a.opts.Shares != nil {
			// The renderer renders a node's push within a second or two (the push nudges it):
			// its shares of a device it just reported are read then, not an interval later.
			// (A wake after Run returned is dropped: Notify never blocks.)
			for _, d := range sharesFollowUps {
				time.AfterFunc(d, a.Notify)
			}
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
	if digests, err := readInstanceDigests(src, a.cluster); err != nil {
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
			// With spec.clusters, the node's cluster: its longer instance digests are its own.
			a.cluster = ""
			if of := s.Clusters.Of(a.opts.Node); len(of) == 1 {
				a.cluster = of[0]
			}
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
