package agent

import (
	"context"
	"errors"
	"path/filepath"
	"sync"

	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/notify"
)

// DaemonOptions is how a node's agent runs there: the discovery loop's Options (whose Handlers,
// Devices and Pushed the daemon fills in) and the parts around it.
type DaemonOptions struct {
	Options
	// Builtins chooses the handlers the agent serves itself.
	Builtins BuiltinOptions
	// RegistrationDir is where Akri's discovery handlers register (RegistrationSocketName in
	// it, Akri's agent-registration.sock); "" serves no registration.
	RegistrationDir string
	// DevicePlugin, when set, serves kubelet's device-plugin API for the node's instances.
	DevicePlugin *deviceplugin.Options
	// NodePlugin, when set, serves the node's devices to kubelet instead of DevicePlugin: the DRA
	// kubelet plugin (agent/dra, docs/DESIGN.md "Devices counted once across the cluster").
	NodePlugin NodePlugin
	// DeviceEvents rescans on the kernel's and udev's device events (DeviceEvents), not only
	// every Interval.
	DeviceEvents bool
	// Nudge, when set, wakes the renderer after each push of the inventory.
	Nudge *notify.Nudge
}

// NodePlugin serves the node's devices to kubelet from what each discovery gives it (Update),
// until Run's context ends.
type NodePlugin interface {
	DeviceSink
	Run(ctx context.Context) error
}

// Daemon is a node's agent as it runs there: the discovery loop, Akri's discovery-handler
// registration beside the built-in handlers, kubelet's device plugin, the device events that
// wake the loop and the nudge that wakes the renderer after each push, started together and
// stopped together. The agent command only reads its flags and opens its repositories.
type Daemon struct {
	opts   DaemonOptions
	agent  *Agent
	akri   *AkriRegistry
	plugin *deviceplugin.Plugin

	mu  sync.Mutex
	ctx context.Context // Run's or Once's, for the nudges it sends
}

// NewDaemon builds the agent and what runs around it; nothing starts before Run or Once.
func NewDaemon(o DaemonOptions) (*Daemon, error) {
	d := &Daemon{opts: o}
	// The registry wakes the agent when a handler reports; the agent is built after the
	// registry and never runs before NewDaemon returns.
	d.akri = NewAkriRegistry(o.Log.WithName("akri"), func() { d.agent.Notify() })
	o.Handlers = Sources{d.akri, Builtins(o.Builtins)}
	if o.DevicePlugin != nil {
		dp := *o.DevicePlugin
		if dp.Log.GetSink() == nil {
			dp.Log = o.Log.WithName("device-plugin")
		}
		d.plugin = deviceplugin.New(dp)
		o.Devices = d.plugin
	}
	if o.NodePlugin != nil {
		if o.DevicePlugin != nil {
			return nil, errors.New("the device plugin and the DRA plugin serve the same devices: choose one")
		}
		o.Devices = o.NodePlugin
	}
	if o.Nudge != nil {
		o.Pushed = d.nudge
	}
	a, err := New(o.Options)
	if err != nil {
		return nil, err
	}
	d.agent = a
	return d, nil
}

// Agent is the discovery loop, for the probes that watch it.
func (d *Daemon) Agent() *Agent { return d.agent }

// Nudging reports whether the renderer is told of each push.
func (d *Daemon) Nudging() bool { return d.opts.Nudge != nil }

// Once runs one discovery cycle and no server: `agent --once`.
func (d *Daemon) Once(ctx context.Context) (Outcome, error) {
	d.setContext(ctx)
	return d.agent.Sync(ctx)
}

// Run serves Akri's registration and the device plugin, follows the device events and runs the
// discovery loop until ctx ends, then waits for the servers to stop. It logs "agent started"
// with fields added to what it knows itself.
func (d *Daemon) Run(ctx context.Context, fields ...any) error {
	d.setContext(ctx)
	log := d.opts.Log
	var wg sync.WaitGroup
	if d.opts.RegistrationDir != "" {
		sock := filepath.Join(d.opts.RegistrationDir, RegistrationSocketName)
		wg.Go(func() {
			if err := d.akri.Serve(ctx, sock); err != nil && !errors.Is(err, context.Canceled) {
				log.Error(err, "registration server stopped")
			}
		})
		log.Info("serving Akri's discovery-handler registration", "socket", sock)
	}
	if d.plugin != nil {
		wg.Go(func() {
			if err := d.plugin.Run(ctx); err != nil {
				log.Error(err, "device plugin stopped")
			}
		})
		log.Info("serving kubelet's device-plugin API", "dir", d.opts.DevicePlugin.Dir)
	}
	if np := d.opts.NodePlugin; np != nil {
		wg.Go(func() {
			if err := np.Run(ctx); err != nil {
				log.Error(err, "the node's kubelet plugin stopped")
			}
		})
	}
	var events []string
	if d.opts.DeviceEvents {
		events = DeviceEvents(ctx, d.opts.Builtins.UdevRoot, log, d.agent.Notify)
	}
	log.Info("agent started", append([]any{"interval", d.opts.Interval.String(), "deviceEvents", events, "nudge", d.Nudging()}, fields...)...)
	err := d.agent.Run(ctx)
	wg.Wait()
	log.Info("agent stopped")
	return err
}

func (d *Daemon) setContext(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctx = ctx
}

// nudge tells the renderer of a push without holding the cycle: a nudge lost costs only
// latency (the renderer's interval picks the push up).
func (d *Daemon) nudge(commit string) {
	d.mu.Lock()
	ctx := d.ctx
	d.mu.Unlock()
	ref := "refs/heads/" + api.InventoryBranch(d.opts.Node)
	go func() {
		if err := d.opts.Nudge.Send(ctx, ref, commit); err != nil {
			d.opts.Log.Info("the renderer was not nudged; its interval picks the push up", "reason", err.Error())
		}
	}()
}
