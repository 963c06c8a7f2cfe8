package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/agent/deviceplugin"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/notify"
	"github.com/gitbroker/gitbroker/publication"
	"github.com/gitbroker/gitbroker/trust"
)

// Flag names of the agent.
const (
	flagNode                  = "node"
	flagInterval              = "interval"
	flagDeviceEvents          = "device-events"
	flagRendererURL           = "renderer-url"
	flagNudgeSecretFile       = "nudge-secret-file"
	flagNotifySecretsDir      = "notify-secrets-dir"
	flagGracePeriod           = "grace-period"
	flagLocalGracePeriod      = "local-grace-period"
	flagOnce                  = "once"
	flagDiscoveryHandlersDir  = "discovery-handlers-dir"
	flagUdevRoot              = "udev-root"
	flagDebugEchoShared       = "debug-echo-shared"
	flagAllowDebugEcho        = "allow-debug-echo"
	flagDebugEchoAvailability = "debug-echo-availability-file"
	FlagAuthorName            = "git-author-name"
	FlagAuthorEmail           = "git-author-email"
	// FlagInventoryPrefix prefixes the flags of the node refs' own repository (--inventory-git).
	FlagInventoryPrefix = "inventory-"
	flagAgentDir        = "dir"
	flagShutdownGrace   = "shutdown-grace"
	// FlagRendererKey pins the renderer's public key: the agent then reads the Configurations
	// the renderer verified, from api.ConfigurationsBranch.
	FlagRendererKey            = "renderer-key"
	flagDevicePluginDir        = "device-plugin-dir"
	flagPodResourcesSocket     = "pod-resources-socket"
	flagPropertiesDir          = "discovery-properties-dir"
	flagDeviceAllocation       = "device-allocation"
	registrationSocketEnvLabel = "DISCOVERY_HANDLERS_DIRECTORY"
)

// agentOptions are the agent's flags, one struct per concern.
type agentOptions struct {
	Git       gitsync.RemoteFlags
	Inventory gitsync.RemoteFlags
	Signing   SigningOptions
	Endpoints EndpointOptions
	Log       LogOptions
	// DRA makes the DRA kubelet plugin; nil in a binary without one (gitbroker-agent).
	DRA *DRAPlugin

	Dir                   string
	Node                  string
	Interval              time.Duration
	DeviceEvents          bool
	RendererURL           string
	NudgeSecretFile       string
	NotifySecretsDir      string
	GracePeriod           time.Duration
	LocalGracePeriod      time.Duration
	Once                  bool
	DiscoveryHandlersDir  string
	UdevRoot              string
	DebugEchoShared       bool
	AllowDebugEcho        bool
	DebugEchoAvailability string
	AuthorName            string
	AuthorEmail           string
	ShutdownGrace         time.Duration
	RendererKey           string
	DevicePluginDir       string
	PodResourcesSocket    string
	PropertiesDir         string
	DeviceAllocation      string
}

// DRAPlugin is what the agent command needs of the DRA kubelet plugin (agent/dra), which only the
// gitbroker binary holds: it reads ResourceClaims with a Kubernetes client, which gitbroker-agent
// is kept small without.
type DRAPlugin struct {
	// BindFlags binds the plugin's own flags.
	BindFlags func(cmd *cobra.Command)
	// New makes the plugin of a node, whose host /dev is under devRoot.
	New func(node, devRoot string, log logr.Logger) (agent.NodePlugin, error)
}

func (o *agentOptions) BindFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.Git.BindFlags(fs, "The people's branch, read for the Configurations only without --renderer-key; never written: the agent writes its own ref, "+api.InventoryBranch("<node>")+".")
	o.Inventory.BindRemoteFlags(fs, FlagInventoryPrefix, "Repository to write this node's ref gitbroker/inventory/<node> to, instead of --git (which is then only read, for the Configurations); its credentials take the same flags with the inventory- prefix, and are --git's when none is given.")
	o.Signing.BindFlags(fs, "OpenSSH private key that signs the agent's commits, as principal node:<node>; a missing file is made there (ed25519) at first start and its allowed_signers line logged. Keep it on the node (under the agent's state path), never in a shared Secret. A certificate at <key>-cert.pub, from the fleet's SSH CA, is sent with each signature.")
	o.Endpoints.BindFlags(fs)
	o.Log.BindFlags(fs)
	fs.StringVar(&o.Dir, flagAgentDir, "", "Write to this work tree instead of a remote (no commit is made; for development).")
	fs.StringVar(&o.Node, flagNode, os.Getenv("NODE_NAME"), "This node's name (default $NODE_NAME); names inventory/<node>.yaml.")
	fs.DurationVar(&o.Interval, flagInterval, agent.DefaultInterval, "Time between discovery cycles.")
	fs.DurationVar(&o.GracePeriod, flagGracePeriod, agent.DefaultSharedGracePeriod, "How long a vanished shared device stays in the inventory (Akri's default is 5m).")
	fs.DurationVar(&o.LocalGracePeriod, flagLocalGracePeriod, agent.DefaultLocalGracePeriod, "How long a vanished local (unshared) device stays in the inventory.")
	fs.BoolVar(&o.Once, flagOnce, false, "Run one cycle and exit (exit 1 if it failed). One cycle cannot tell how long a device has been gone (the inventory holds no timestamps), so it keeps vanished devices for a whole grace period from now, which it never reaches; give --grace-period 0 --local-grace-period 0 to drop them at once.")
	dhDir := os.Getenv(registrationSocketEnvLabel)
	if dhDir == "" {
		dhDir = agent.DefaultDiscoveryHandlersDirectory
	}
	fs.StringVar(&o.DiscoveryHandlersDir, flagDiscoveryHandlersDir, dhDir, "Folder of Akri's registration socket ("+agent.RegistrationSocketName+"), where discovery handlers register; $"+registrationSocketEnvLabel+" sets the default. Empty disables it.")
	fs.StringVar(&o.UdevRoot, flagUdevRoot, "/", "Root under which the udev handler reads sys/ and run/udev/data.")
	fs.BoolVar(&o.AllowDebugEcho, flagAllowDebugEcho, false, "Serve the built-in debugEcho handler, whose devices are the descriptions a Configuration lists (Akri's agent.allowDebugEcho): a test handler, off by default, so that no Configuration puts brokers on every node for devices no node has.")
	fs.BoolVar(&o.DebugEchoShared, flagDebugEchoShared, true, "Mark debugEcho devices shared, as Akri's DEBUG_ECHO_INSTANCES_SHARED does.")
	fs.StringVar(&o.DebugEchoAvailability, flagDebugEchoAvailability, agent.DebugEchoAvailabilityFile, "debugEcho devices vanish while this file contains OFFLINE.")
	fs.StringVar(&o.AuthorName, FlagAuthorName, "gitbroker-agent", "Author name of the agent's commits.")
	fs.StringVar(&o.AuthorEmail, FlagAuthorEmail, "agent@gitbroker.dev", "Author email of the agent's commits.")
	fs.StringVar(&o.RendererKey, FlagRendererKey, "", "The renderer's public key, pinned: a file in git's allowed_signers format naming principal renderer (the line the renderer logs when it makes its key), or its armored OpenPGP public key. The agent then reads the Configurations only from the renderer's signed "+api.ConfigurationsBranch+" branch in the repository it writes to (--inventory-git, else --git), never from the unverified --branch. Required with --signing-key: an agent that signs reads only what the renderer verified.")
	fs.StringVar(&o.DevicePluginDir, flagDevicePluginDir, deviceplugin.DefaultDir, "kubelet's device-plugin folder: the agent serves akri.sh/<instance> (capacity slots per device) and akri.sh/<configuration> there, as Akri's agent does, so a broker gets its device node. Empty disables it.")
	fs.StringVar(&o.PodResourcesSocket, flagPodResourcesSocket, deviceplugin.DefaultPodResources, "kubelet's pod-resources socket: a device slot given through akri.sh/<configuration> is withheld from akri.sh/<instance> (and the other way round) until kubelet no longer lists it. Empty goes without.")
	fs.StringVar(&o.DeviceAllocation, flagDeviceAllocation, api.DeviceAllocationDevicePlugin, "How the node's devices reach Pods, as the repository's gitbroker.yaml spec.deviceAllocation says: "+api.DeviceAllocationDevicePlugin+" (kubelet's device-plugin API, --device-plugin-dir) or "+api.DeviceAllocationDRA+" (the agent is the node's DRA kubelet plugin for driver "+api.DRADriver+", in the gitbroker binary only: it prepares the devices the scheduler allocated from the rendered ResourceSlices as CDI devices, and reads ResourceClaims with a Kubernetes client).")
	if o.DRA != nil {
		o.DRA.BindFlags(cmd)
	}
	fs.StringVar(&o.PropertiesDir, flagPropertiesDir, agent.DefaultPropertiesDir, "Folder of the values discoveryProperties[].valueFrom refer to, as the agent's Pod mounts them: secrets/<namespace>/<name>/<key> and configmaps/<namespace>/<name>/<key> (a reference without a namespace is in default, as in Akri). A reference that is missing and not optional keeps its Configuration's devices undiscovered and the agent not ready; values are never logged or written to git.")
	fs.DurationVar(&o.ShutdownGrace, flagShutdownGrace, 20*time.Second, "On SIGTERM, how long a write in flight may go on before it is abandoned.")
	fs.BoolVar(&o.DeviceEvents, flagDeviceEvents, true, "Rescan as soon as the kernel or udev reports a device change (netlink uevents, with hostNetwork; the udev database under --udev-root), not only every --interval.")
	fs.StringVar(&o.RendererURL, flagRendererURL, "", "The renderer's push notification endpoint (render --webhook-addr, path /hook), told after each push of this node's ref so the render starts at once; the renderer's --interval picks the push up without it.")
	fs.StringVar(&o.NudgeSecretFile, flagNudgeSecretFile, "", "File holding the secret that signs the nudge (the renderer's --nudge-secret-file); --renderer-url needs it or --notify-secrets-dir.")
	fs.StringVar(&o.NotifySecretsDir, flagNotifySecretsDir, "", "Folder of a mounted Secret whose optional key "+notify.SecretFileNudge+" is the nudge's secret: when it is not there, the agent does not nudge (the renderer's interval picks its pushes up) and says so at start.")
}

// unverifiedSource reads the Configurations from the people's branch as they are, and says once
// when that branch enrolls writers, so the agent should be given --renderer-key.
type unverifiedSource struct {
	*gitsync.Repository
	log  logr.Logger
	told atomic.Bool
}

func (s *unverifiedSource) Snapshot(ctx context.Context) (gitsync.Snapshot, error) {
	snap, err := s.Repository.Snapshot(ctx)
	if err == nil && publication.HasAllowedSigners(snap) && !s.told.Swap(true) {
		s.log.Info("this repository verifies its writers, but the agent reads Configurations from the people's branch unverified; give --" + FlagRendererKey + " so that it reads only what the renderer verified")
	}
	return snap, err
}

// published opens the renderer's publication of the Configurations it verified, in the
// repository the agent writes to, checked against the pinned --renderer-key.
func (o *agentOptions) published(own gitsync.RemoteFlags, keys *publication.RendererKeys, read ...gitsync.Option) (*publication.Configurations, error) {
	own.Branch = api.ConfigurationsBranch
	repo, err := own.Open(read...)
	if err != nil {
		return nil, err
	}
	return &publication.Configurations{Repo: repo, Keys: keys}, nil
}

// AgentCommand is `agent`: in gitbroker, and the whole of gitbroker-agent.
func AgentCommand(draPlugin *DRAPlugin) *cobra.Command {
	o := &agentOptions{DRA: draPlugin}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Discover this node's devices and keep inventory/<node>.yaml in git up to date",
		Example: `  # one cycle on a node, as a check that it can write (exit 1 if it could not)
  gitbroker agent --once --node edge-a --git https://git.example.com/fleet/edge-inventory.git \
    --git-password-file token --renderer-key renderer.allowed_signers --signing-key /var/lib/gitbroker/signing-key`,
		Long: `The agent runs on every edge node (a DaemonSet). Each cycle it reads the Configurations (with
--renderer-key, only those the renderer verified and signed on gitbroker/configurations; without,
the branch head as it is), runs the discovery handlers they name (debugEcho, udev, and any Akri handler that
registers on the registration socket), and commits inventory/<node>.yaml when what the node sees
has changed. A vanished device stays for a grace period, so a flapping device writes nothing.

It is also the node's kubelet device plugin (--device-plugin-dir): akri.sh/<instance> with the
Configuration's capacity in slots for every device it sees, and akri.sh/<configuration> with one
device per instance (offered while it has a slot free: a request for N gets N devices),
answering kubelet's Allocate from its own discovery (the device nodes and mounts under /dev, or
under the Configuration's allowedHostPaths), never from git.

It serves /healthz and /readyz (--health-addr) and Prometheus metrics (--metrics-addr), logs
structured lines to stderr, and on SIGTERM finishes the write in flight and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAgent(cmd, o) },
	}
	o.BindFlags(cmd)
	return cmd
}

func runAgent(cmd *cobra.Command, o *agentOptions) error {
	if err := agent.ValidateNodeName(o.Node); err != nil {
		return Exitf(ExitInvalid, "%v", err)
	}
	if (o.Dir == "") == (o.Git.URL == "") {
		return Exitf(ExitInvalid, "give exactly one of --%s and --%s", gitsync.FlagGit, flagAgentDir)
	}
	if o.Dir != "" && o.RendererKey != "" {
		return Exitf(ExitInvalid, "--%s reads the renderer's branch, and --%s has none", FlagRendererKey, flagAgentDir)
	}
	if o.Dir != "" && o.Signing.Key != "" {
		return Exitf(ExitInvalid, "--%s signs commits, and --%s makes none", FlagSigningKey, flagAgentDir)
	}
	base, err := o.Log.Logger()
	if err != nil {
		return Exitf(ExitInvalid, "%v", err)
	}
	log := base.WithValues("node", o.Node)

	st, err := o.stores(log)
	if err != nil {
		return err
	}
	nudge, err := o.nudge(log)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	reg := prometheus.NewRegistry()
	var plugin *deviceplugin.Options
	var nodePlugin agent.NodePlugin
	switch o.DeviceAllocation {
	case api.DeviceAllocationDevicePlugin:
		if o.DevicePluginDir != "" && !o.Once {
			plugin = &deviceplugin.Options{Dir: o.DevicePluginDir, PodResources: o.PodResourcesSocket}
		}
	case api.DeviceAllocationDRA:
		if o.DRA == nil {
			return Exitf(ExitInvalid, "--%s=%s: this binary has no DRA plugin (it holds no Kubernetes client); run `gitbroker agent`, the gitbroker image (deploy/dra)", flagDeviceAllocation, o.DeviceAllocation)
		}
		if !o.Once {
			if nodePlugin, err = o.DRA.New(o.Node, o.UdevRoot, log.WithName("dra")); err != nil {
				return Exitf(ExitInvalid, "--%s=%s: %v", flagDeviceAllocation, o.DeviceAllocation, err)
			}
		}
	default:
		return Exitf(ExitInvalid, "--%s must be %s or %s, got %q", flagDeviceAllocation, api.DeviceAllocationDevicePlugin, api.DeviceAllocationDRA, o.DeviceAllocation)
	}
	d, err := agent.NewDaemon(agent.DaemonOptions{
		Options: agent.Options{
			Node:              o.Node,
			Store:             st.store,
			Configurations:    st.source,
			Interval:          o.Interval,
			SharedGracePeriod: o.GracePeriod,
			LocalGracePeriod:  o.LocalGracePeriod,
			Author:            gitsync.Signature{Name: o.AuthorName, Email: o.AuthorEmail},
			Log:               log,
			Metrics:           agent.NewMetrics(reg),
			Enrolment:         st.enrolment,
			ShutdownGrace:     o.ShutdownGrace,
			PropertiesDir:     o.PropertiesDir,
			Shares:            st.shares,
		},
		Builtins: agent.BuiltinOptions{UdevRoot: o.UdevRoot,
			DebugEcho: o.AllowDebugEcho, DebugEchoShared: o.DebugEchoShared, DebugEchoAvailability: o.DebugEchoAvailability},
		RegistrationDir: o.DiscoveryHandlersDir,
		DevicePlugin:    plugin,
		NodePlugin:      nodePlugin,
		DeviceEvents:    o.DeviceEvents,
		Nudge:           nudge,
	})
	if err != nil {
		return Exitf(ExitInvalid, "%v", err)
	}
	a := d.Agent()

	if o.Once {
		out, err := d.Once(ctx)
		if err != nil {
			log.Error(err, "cycle failed")
			return &ExitError{Code: ExitRefused, Err: err, Silent: true}
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %d device(s)", api.InventoryPath(o.Node), out.Devices)
		if out.Commit != "" {
			fmt.Fprintf(cmd.OutOrStdout(), ", committed %s", out.Commit)
		}
		fmt.Fprintln(cmd.OutOrStdout())
		if out.NotEnrolled != nil {
			// Written, but the renderer ignores it: a check that this node works must fail.
			return &ExitError{Code: ExitRefused, Err: out.NotEnrolled}
		}
		return nil
	}

	metricsAddr, healthAddr, err := ServeEndpoints(ctx, log, o.Endpoints, reg, Probes{
		Healthy: Stalled(time.Now(), o.Interval, a.LastCycle, nil, "cycle"),
		Ready: func() error {
			if !a.PropertiesResolved() {
				return errors.New("a Configuration's discovery property cannot be resolved (see the log and gitbroker_agent_discovery_properties_unresolved)")
			}
			if !a.Ready() {
				return errors.New("the inventory on the branch is not in step yet")
			}
			if r, ok := nodePlugin.(interface{ Ready() error }); ok {
				// The node's devices reach no Pod until kubelet has the plugin.
				return r.Ready()
			}
			return nil
		},
	})
	if err != nil {
		return Exitf(ExitInvalid, "%v", err)
	}

	return d.Run(ctx, "store", st.where, "metricsAddr", metricsAddr, "healthAddr", healthAddr)
}

// agentStores are where an agent reads its Configurations and writes its inventory.
type agentStores struct {
	store     gitsync.Store
	source    agent.ConfigurationSource
	enrolment *agent.Enrolment
	// shares reads this node's shares of its shared devices (agent.Options.Shares); nil
	// without the renderer's pinned key.
	shares func(ctx context.Context) (map[string]int, error)
	where  string // for the log
}

// stores opens the agent's work tree (--dir), or its node ref and where it reads the
// Configurations: the renderer's signed publication with --renderer-key, else the people's
// branch, unverified.
func (o *agentOptions) stores(log logr.Logger) (agentStores, error) {
	st := agentStores{where: o.Dir}
	if o.Dir != "" {
		dir, err := gitsync.NewDir(o.Dir)
		if err != nil {
			return st, Exitf(ExitInvalid, "%v", err)
		}
		st.store = dir
		return st, nil
	}
	signer, err := o.Signing.Load(log, trust.NodePrincipal(o.Node), true)
	if err != nil {
		return st, Exitf(ExitInvalid, "%v", err)
	}
	var signing []gitsync.Option
	if signer != nil {
		signing = []gitsync.Option{gitsync.WithSigner(signer)}
	}
	if signer != nil && o.RendererKey == "" {
		// A signing agent vouches for what it writes: it must read only what the renderer
		// verified, never the people's branch as anyone pushed it.
		return st, Exitf(ExitInvalid, "--%s needs --%s: an agent that signs reads its Configurations only from the renderer's signed %s, checked against the renderer's pinned public key (deploy/ mounts it from the gitbroker-renderer-key ConfigMap)",
			FlagSigningKey, FlagRendererKey, api.ConfigurationsBranch)
	}
	var keys *publication.RendererKeys
	if o.RendererKey != "" {
		if keys, err = LoadRendererKeys(o.RendererKey); err != nil {
			return st, Exitf(ExitInvalid, "%v", err)
		}
	}
	st.enrolment = &agent.Enrolment{Signer: signer}
	opts := append(signing, gitsync.WithLogger(log), gitsync.WithLimits(gitsync.AgentMaxFetchBytes, gitsync.AgentMaxFileSize))
	if o.Once {
		opts = append(opts, gitsync.WithFailFast())
	}
	// The Configurations come from the people's branch, which the agent only reads; the
	// inventory goes to the node's own ref, which its first write creates.
	src, err := o.Git.Open(opts...)
	if err != nil {
		return st, Exitf(ExitInvalid, "%v", err)
	}
	own := o.Git
	if o.Inventory.URL != "" {
		own = o.Inventory
		own.Inherit(o.Git)
	}
	own.Branch = api.InventoryBranch(o.Node)
	ownOpts := append(opts, gitsync.WithCreateBranch())
	if len(signing) > 0 {
		ownOpts = append(ownOpts, OwnRefOptions(o.Git, api.InventoryBranch(o.Node), keys, opts...)...)
	}
	repo, err := own.Open(ownOpts...)
	if err != nil {
		return st, Exitf(ExitInvalid, "%v", err)
	}
	st.store, st.source = repo, src
	st.where = fmt.Sprintf("%s (branch %s, Configurations from %s)", repo.URL(), repo.Branch(), src.Branch())
	if o.RendererKey != "" {
		pub, err := o.published(own, keys, opts...)
		if err != nil {
			return st, Exitf(ExitInvalid, "%v", err)
		}
		st.source = pub
		// The node's shares are in its ref's accepted shard, on the rendered branch's
		// repository, which the agent only reads.
		shardGit := o.Git
		shardGit.Branch = api.AcceptedBranch(api.InventoryBranch(o.Node))
		shard, err := shardGit.Open(opts...)
		if err != nil {
			return st, Exitf(ExitInvalid, "%v", err)
		}
		st.shares = publication.Shares(shard, keys, o.Node)
		st.where = fmt.Sprintf("%s (branch %s, the renderer's verified Configurations from %s)", repo.URL(), repo.Branch(), api.ConfigurationsBranch)
	} else {
		st.source = &unverifiedSource{Repository: src, log: log}
	}
	return st, nil
}

// nudge is how the agent wakes the renderer after each push (--renderer-url); nil without it.
func (o *agentOptions) nudge(log logr.Logger) (*notify.Nudge, error) {
	nudgeFile := o.NudgeSecretFile
	if o.RendererURL != "" && nudgeFile == "" && o.NotifySecretsDir != "" {
		p := filepath.Join(o.NotifySecretsDir, notify.SecretFileNudge)
		if _, err := os.Stat(p); err == nil {
			nudgeFile = p
		} else {
			log.Info("not nudging the renderer: the nudge's secret is not there; the renderer's interval picks the pushes up", "file", p)
		}
	}
	if o.RendererURL != "" && nudgeFile == "" && o.NotifySecretsDir == "" {
		return nil, Exitf(ExitInvalid, "--%s needs --%s or --%s", flagRendererURL, flagNudgeSecretFile, flagNotifySecretsDir)
	}
	if o.RendererURL != "" && nudgeFile != "" {
		secret, err := notify.ReadSecret(nudgeFile)
		if err != nil {
			return nil, Exitf(ExitInvalid, "--%s: %v", flagNudgeSecretFile, err)
		}
		return &notify.Nudge{URL: o.RendererURL, Secret: secret}, nil
	}
	return nil, nil
}
