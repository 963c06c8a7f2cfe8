//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// BenchmarkClusterFleet10k (make bench-cluster) applies fleet-10k to this suite's cluster, 1,000
// kwok nodes on the machine's cores, three times in one run, each on the cluster the last one
// left once its namespace is deleted:
//  1. the physical limit, a server-side apply from client-go of exactly the rendered Pods, Jobs
//     and Services (into a namespace of their own, GITBROKER_BENCH_SSA_WORKERS requests in
//     flight, 16 by default);
//  2. Flux's own requests for the same objects (read, dry-run apply, apply, as fluxcd/pkg/ssa
//     makes them) from the same client and workers, with none of Flux's other work: where the
//     API server's CPU is the limit, the least any layout of Flux Kustomizations can cost
//     (GITBROKER_BENCH_SKIP_FLUX=1 stops here);
//  3. gitbroker's render through Flux with spec.flux.folderSources and
//     deploy/flux-folder-sources.
//
// It then makes one device change and measures the time to its Pod, the Kustomizations that
// reconciled and kustomize-controller's CPU, and then a minute of churn (a device every 2 s, the
// renderer as a daemon): every new device's Pod runs, and only their folders reconcile. Last,
// with Flux suspended and its fleet deleted, it measures the server-side apply again: the
// machine's speed drifts within a run, and Flux's time is reported against the baseline before
// it, the one after it and their mean (flux/ssa, flux/ssa-after, flux/ssa-mean). Every phase's
// CPU includes the machine's steal time.
// GITBROKER_E2E_KUSTOMIZE_CONTROLLER_ARGS and GITBROKER_E2E_SOURCE_CONTROLLER_ARGS pass flags to
// Flux's controllers (make bench-cluster gives them Flux's large-fleet flags); GITBROKER_BENCH_DEVICES
// scales the fleet (nodes are a tenth of it), GITBROKER_BENCH_SHARDS gives every Configuration
// that many shards, GITBROKER_BENCH_HEADLESS=1 their instance Services clusterIP: None (no
// ClusterIP allocation, for the baseline and Flux alike); GITBROKER_BENCH_STORM=1 also measures the same
// device change with one source for every folder; GITBROKER_BENCH_PROFILE=file takes a CPU
// profile of kustomize-controller over the first minute of the Flux phase.
func BenchmarkClusterFleet10k(b *testing.B) {
	if b.N > 1 {
		b.Skip("one iteration is minutes of cluster time: run with -benchtime 1x")
	}
	cb := newClusterBench(b, benchConfigFromEnv())
	cb.addNodes()
	var ssa phase
	if !cb.cfg.skipBaseline {
		ssa = cb.baselines()
		if cb.cfg.skipFlux {
			return
		}
	}
	// 3. The same objects through gitbroker's render and Flux.
	flux := cb.fluxPhase()
	b.ReportMetric(flux.took.Seconds(), "flux-s")
	b.ReportMetric(flux.cpu["kube-apiserver"].Seconds(), "flux-apiserver-cpu-s")
	if cb.cfg.skipBaseline {
		b.Logf("Flux: every Kustomization applied in %s; CPU %s", flux.took.Round(time.Millisecond), flux.cpu)
	} else {
		b.Logf("Flux: every Kustomization applied in %s (%.2fx the server-side apply); CPU %s", flux.took.Round(time.Millisecond), flux.took.Seconds()/ssa.took.Seconds(), flux.cpu)
		b.ReportMetric(flux.took.Seconds()/ssa.took.Seconds(), "flux/ssa")
		b.ReportMetric(ssa.cpu["kube-apiserver"].Seconds(), "ssa-apiserver-cpu-s")
	}
	// 4. One device change.
	ch := cb.change("bench-1")
	b.Logf("one device change, one source per folder: Pod running after %s (%s); reconciled %v; CPU %s", ch.toPod.Round(time.Millisecond), ch.steps, ch.reconciled, ch.cpu)
	b.ReportMetric(ch.toPod.Seconds(), "change-to-pod-s")
	b.ReportMetric(float64(total(ch.reconciled)), "change-reconciles")
	b.ReportMetric(ch.cpu["kustomize-controller"].Seconds(), "change-kc-cpu-s")
	// 5. Churn.
	cb.churn()
	if cb.cfg.storm {
		cb.storm()
	}
	if cb.cfg.skipBaseline {
		return
	}
	// 6. The physical limit again, on the cluster as the first one found it: Flux stopped and
	// its fleet deleted. This machine's speed drifts by tens of percent within a run (the same
	// apply has taken 3m19s and 5m27s), so Flux's phase is compared with both baselines around
	// it and with their mean.
	suspendFlux(b, fluxNS)
	deleteNamespace(b, fleetNS, time.Hour)
	after := cb.applyPhase(ssaNS, false, "server-side apply after Flux")
	mean := (ssa.took + after.took) / 2
	b.Logf("Flux against the server-side apply: %.2fx the one before it, %.2fx the one after it, %.2fx their mean (%s)",
		flux.took.Seconds()/ssa.took.Seconds(), flux.took.Seconds()/after.took.Seconds(), flux.took.Seconds()/mean.Seconds(), mean.Round(time.Millisecond))
	b.ReportMetric(after.took.Seconds(), "ssa-after-s")
	b.ReportMetric(flux.took.Seconds()/after.took.Seconds(), "flux/ssa-after")
	b.ReportMetric(flux.took.Seconds()/mean.Seconds(), "flux/ssa-mean")
	b.ReportMetric(after.cpu["kube-apiserver"].Seconds(), "ssa-after-apiserver-cpu-s")
}

// baselines are the first two phases: the physical limit (a server-side apply of the same
// objects from client-go) and Flux's own requests for them.
func (cb *clusterBench) baselines() phase {
	b := cb.b
	// 1. The physical limit: the same objects, applied server-side from client-go.
	ssa := cb.applyPhase(ssaNS, false, "server-side apply")
	cb.clear(ssaNS)
	// 2. Flux's own requests for the same objects, from the same client and workers: what
	// fluxcd/pkg/ssa's ApplyAll asks of the API server for each object it creates (read it,
	// dry-run apply it, apply it), with none of Flux's other work and every request as early
	// as the baseline's: on an API server whose CPU is the limit, no layout of folders makes
	// Flux cheaper than this.
	pattern := cb.applyPhase(patternNS, true, "Flux's requests")
	cb.clear(patternNS)
	b.Logf("Flux's requests (read, dry-run apply, apply) for the same objects: %.2fx the server-side apply", pattern.took.Seconds()/ssa.took.Seconds())
	b.ReportMetric(ssa.took.Seconds(), "ssa-s")
	b.ReportMetric(pattern.took.Seconds()/ssa.took.Seconds(), "flux-requests/ssa")
	return ssa
}

// The namespaces of the cluster benchmark.
const (
	fleetNS = "fleet"
	ssaNS   = "fleet-ssa"
	// patternNS is where Flux's request pattern is replayed.
	patternNS = "fleet-pattern"
	fluxNS    = "flux-bench"
)

// benchConfig is the cluster benchmark's environment, read once.
type benchConfig struct {
	fleet fixtures.FleetSpec
	// interval is the Flux Kustomizations' interval ("" for the default).
	interval string
	// ssaWorkers are the requests in flight of the client-go phases.
	ssaWorkers int
	// skipFlux stops after the client-go phases; skipBaseline leaves them out (the device
	// change and the churn alone); storm also measures one source for all.
	skipFlux, skipBaseline, storm bool
	// profile is where kustomize-controller's CPU profile goes, dumps where the API server's.
	profile, dumps string
	// kustomizeArgs and sourceArgs are the Flux controllers' extra flags, for the log.
	kustomizeArgs, sourceArgs string
}

func benchConfigFromEnv() benchConfig {
	c := benchConfig{fleet: fixtures.Fleet10k, ssaWorkers: 16,
		interval:      os.Getenv("GITBROKER_BENCH_INTERVAL"),
		skipFlux:      os.Getenv("GITBROKER_BENCH_SKIP_FLUX") != "",
		skipBaseline:  os.Getenv("GITBROKER_BENCH_SKIP_BASELINE") != "",
		storm:         os.Getenv("GITBROKER_BENCH_STORM") != "",
		profile:       os.Getenv("GITBROKER_BENCH_PROFILE"),
		dumps:         os.Getenv("GITBROKER_BENCH_APISERVER_DUMPS"),
		kustomizeArgs: os.Getenv("GITBROKER_E2E_KUSTOMIZE_CONTROLLER_ARGS"),
		sourceArgs:    os.Getenv("GITBROKER_E2E_SOURCE_CONTROLLER_ARGS"),
	}
	if n, _ := strconv.Atoi(os.Getenv("GITBROKER_BENCH_DEVICES")); n > 0 {
		c.fleet.Devices, c.fleet.Nodes = n, max(n/10, 1)
	}
	c.fleet.Shards, _ = strconv.Atoi(os.Getenv("GITBROKER_BENCH_SHARDS"))
	c.fleet.Headless = os.Getenv("GITBROKER_BENCH_HEADLESS") != ""
	if n, _ := strconv.Atoi(os.Getenv("GITBROKER_BENCH_SSA_WORKERS")); n > 0 {
		c.ssaWorkers = n
	}
	return c
}

// clusterBench is one run of the cluster benchmark: the fleet's repository, the rendered broker
// objects, and the CPU meter of the control plane.
type clusterBench struct {
	b           *testing.B
	ctx         context.Context
	cfg         benchConfig
	srv         *gitsynctest.Server
	rendererKey string
	// inventories are the nodes' inventories as last committed, by node.
	inventories map[string]string
	// objs are the broker objects the first render made, sorted by name.
	objs []*unstructured.Unstructured
	cpu  *cpuMeter
}

// newClusterBench makes the fleet's repository (Configurations on main, each node's inventory on
// its own ref), renders it once, and reads the broker objects it made.
func newClusterBench(b *testing.B, cfg benchConfig) *clusterBench {
	cb := &clusterBench{b: b, ctx: context.Background(), cfg: cfg, inventories: map[string]string{}}
	require.NoError(b, cluster.CreateNamespace(cb.ctx, fluxNS))
	people := map[string]string{}
	refs := map[string]map[string][]byte{}
	for p, content := range fixtures.Fleet(cfg.fleet) {
		if api.IsInventoryPath(p) {
			node := strings.TrimSuffix(path.Base(p), ".yaml")
			refs[verify.InventoryBranch(node)] = map[string][]byte{p: content}
			cb.inventories[node] = string(content)
			continue
		}
		people[p] = string(content)
	}
	cb.srv = gitsynctest.NewServer(b, "main", people)
	cb.srv.Commit(map[string]string{api.SettingsPath: cb.settings(cb.srv.URL())}, nil, "one source per folder")
	cb.srv.SeedBranches(refs)
	cb.rendererKey = filepath.Join(b.TempDir(), "renderer")
	_, _, err := trust.LoadOrCreateSigner(cb.rendererKey, "renderer")
	require.NoError(b, err)
	b.Logf("first render and push: %s", cb.renderOnce().Round(time.Millisecond))
	rendered := renderedFiles(b, cb.srv)
	// What the cluster gets: the broker objects. They ask for no akri.sh/<instance> resource (the
	// renderer pins a Pod to its device's node instead), so the nodes need no device plugin.
	for p, data := range rendered {
		if !strings.HasPrefix(p, render.RenderedDir+fleetNS+"/") || !isBroker(path.Base(p)) {
			continue
		}
		o, err := Objects(data)
		require.NoError(b, err, p)
		require.Len(b, o, 1, p)
		cb.objs = append(cb.objs, o[0])
	}
	sort.Slice(cb.objs, func(i, j int) bool { return cb.objs[i].GetName() < cb.objs[j].GetName() })
	counts := map[string]int{}
	for _, o := range cb.objs {
		counts[o.GetKind()]++
	}
	spec := cfg.fleet
	b.Logf("fleet: %d nodes, %d devices, %d shards per Configuration, headless Services %t, %d rendered files; objects %v", spec.Nodes, spec.Devices, max(spec.Shards, 1), spec.Headless, len(rendered), counts)
	b.Logf("kustomize-controller %q, source-controller %q, Kustomizations' interval %q", cfg.kustomizeArgs, cfg.sourceArgs, cfg.interval)
	// The rest of the control plane shares the same 2 cores: kube-controller-manager (its
	// EndpointSlice controller matches every Pod event against every Service of the namespace),
	// the scheduler and kwok.
	cb.cpu = newCPUMeter(b, "kube-apiserver", "etcd", "kustomize-controller", "source-controller", "kube-controller-manager", "kube-scheduler", "kwok")
	return cb
}

// settings is the fleet's gitbroker.yaml: one source per folder from url, or one for all ("").
// The folders' Kustomizations reconcile every interval for drift alone (a folder's source moving
// reconciles it at once): at the default 10 minutes, the folders that applied first dry-run
// every object again while the last are still applying.
func (cb *clusterBench) settings(url string) string {
	s := "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: " + fleetNS +
		"\n  flux:\n    namespace: " + fluxNS + "\n    retryInterval: 10s\n"
	if cb.cfg.interval != "" {
		s += "    interval: " + cb.cfg.interval + "\n"
	}
	if url != "" {
		s += "    folderSources:\n      url: " + url + "\n      interval: " + benchSourceInterval.String() + "\n"
	}
	return s
}

// Secrets of the benchmark's push notifications: the git server's webhook to the render daemon,
// and the daemon's calls to deploy/flux-folder-sources' Receiver.
const (
	benchHostSecret    = "bench-host-secret"
	benchReceiverToken = "bench-receiver-token"
)

// startDaemon runs the render daemon as deploy/ does, with its interval an hour: woken by the git
// server's push webhook, telling Flux's Receiver which branches each render moved. It returns
// once the daemon's first render (of what is already there) is done.
func (cb *clusterBench) startDaemon(name string) *gbProcess {
	b := cb.b
	b.Helper()
	dir := b.TempDir()
	host, token := filepath.Join(dir, "webhook-secret"), filepath.Join(dir, "flux-receiver-token")
	require.NoError(b, os.WriteFile(host, []byte(benchHostSecret), 0o600))
	require.NoError(b, os.WriteFile(token, []byte(benchReceiverToken), 0o600))
	d := startGitbroker(b, name, "renderer started", "render",
		"--git", cb.srv.URL(), "--branch", "main", "--watch", "--interval", "1h", "--signing-key", cb.rendererKey, "--first-render",
		"--webhook-addr", "127.0.0.1:0", "--webhook-secret-file", host,
		"--flux-receiver-url", cluster.ReceiverURL, "--flux-receiver", fluxNS+"/gitbroker", "--flux-receiver-token-file", token,
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	eventually(b, 10*time.Minute, name+"'s first render", func() (bool, string) {
		return d.metric(b, "gitbroker_renderer_renders_total") >= 1, "not yet"
	})
	cb.srv.SendWebhooks("http://"+d.WebhookAddr+"/hook", []byte(benchHostSecret))
	return d
}

// renderOnce renders and pushes with the one-shot command, and returns how long it took.
func (cb *clusterBench) renderOnce() time.Duration {
	cb.b.Helper()
	start := time.Now()
	out, err := exec.Command(gitbroker, "render", "--git", cb.srv.URL(), "--signing-key", cb.rendererKey, "--first-render").CombinedOutput()
	require.NoError(cb.b, err, "gitbroker render: %s", out)
	return time.Since(start)
}

// addNodes adds a kwok node for every node of the fleet, 32 at a time.
func (cb *clusterBench) addNodes() {
	start := time.Now()
	nodes := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range nodes {
				if err := cluster.AddNode(cb.ctx, n); err != nil {
					failed.Store(err)
				}
			}
		}()
	}
	for n := range cb.inventories {
		nodes <- n
	}
	close(nodes)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		cb.b.Fatal(err)
	}
	cb.b.Logf("%d kwok nodes up in %s", len(cb.inventories), time.Since(start).Round(time.Second))
}

// phase is what a phase took: its time and the control plane's CPU.
type phase struct {
	took time.Duration
	cpu  cpuUse
}

// applyPhase applies the objects from client-go into ns, a new namespace (with Flux's requests
// for each when fluxRequests).
func (cb *clusterBench) applyPhase(ns string, fluxRequests bool, what string) phase {
	cb.b.Helper()
	require.NoError(cb.b, cluster.CreateNamespace(cb.ctx, ns))
	cb.cpu.mark()
	reqs := requestCounts(cb.b)
	start := time.Now()
	applyWith(cb.b, cb.objs, ns, cb.cfg.ssaWorkers, fluxRequests)
	ph := phase{took: time.Since(start), cpu: cb.cpu.since()}
	cb.b.Logf("%s of %d objects, %d in flight: %s; CPU %s", what, len(cb.objs), cb.cfg.ssaWorkers, ph.took.Round(time.Millisecond), ph.cpu)
	logRequests(cb.b, what, reqs)
	return ph
}

// clear waits for the Pods of a client-go phase to be scheduled and deletes its namespace: they
// would keep the controllers busy in the next phase, which starts on the cluster as this one
// found it.
func (cb *clusterBench) clear(ns string) {
	waitScheduled(cb.b, ns, 15*time.Minute)
	deleteNamespace(cb.b, ns, time.Hour)
}

// rootInterval gives the root Kustomizations the folders' interval: like the folders', they
// reconcile every interval for drift alone (their source moves when rendered/flux/ does), and a
// drift check of deploy/flux's 10 minutes must not land in the measurements.
func (cb *clusterBench) rootInterval(obj *unstructured.Unstructured) {
	if cb.cfg.interval != "" && obj.GetKind() == "Kustomization" && (obj.GetName() == "gitbroker" || obj.GetName() == "gitbroker-sources") {
		require.NoError(cb.b, unstructured.SetNestedField(obj.Object, cb.cfg.interval, "spec", "interval"))
	}
}

// fluxPhase applies the render through Flux with deploy/flux-folder-sources, until every
// Kustomization has applied and every Pod is scheduled.
func (cb *clusterBench) fluxPhase() phase {
	b := cb.b
	cb.cpu.mark()
	reqs := requestCounts(b)
	mark := logLineCount(b, cluster.Process("kustomize-controller").Log)
	profiled := profileController(b, "kustomize-controller", cb.cfg.profile, 60)
	dumped := dumpAPIServer(b, cb.cfg.dumps)
	start := time.Now()
	// The Receiver's Secret first (step 5 of DEPLOYING.md), then deploy/flux-folder-sources with
	// its Receiver.
	mustCreate(b, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gitbroker-receiver", Namespace: fluxNS},
		StringData: map[string]string{"token": benchReceiverToken}})
	applyFluxFrom(b, "../deploy/flux-folder-sources", fluxNS, cb.srv.URL(), cb.rendererKey+".pub", cb.rootInterval)
	waitRollout(b, cb.srv, fluxNS, cb.cpu.names, 3*time.Hour)
	ph := phase{took: time.Since(start), cpu: cb.cpu.since()}
	logRequests(b, "Flux", reqs)
	logKustomizations(b, fluxNS, start)
	logReconciles(b, cluster.Process("kustomize-controller").Log, mark, fluxNS)
	profiled()
	dumped()
	waitScheduled(b, fleetNS, 15*time.Minute)
	return ph
}

// changed is what one device change took.
type changed struct {
	toPod      time.Duration
	reconciled map[string]int
	cpu        cpuUse
	// steps says where the time went.
	steps string
}

// change adds a device to a node of cfg-00, renders, and waits for its Pod to run.
func (cb *clusterBench) change(what string) changed {
	b := cb.b
	b.Helper()
	node, inv := deviceChange(b, cb.inventories, "cfg-00", what)
	before := renderedFiles(b, cb.srv)
	cb.cpu.mark()
	mark := logLineCount(b, cluster.Process("kustomize-controller").Log)
	// The render daemon as deploy/ runs it, woken by the git server's push webhook, tells Flux's
	// Receiver which branches moved: the changed folder's source fetches, no other.
	daemon := cb.startDaemon("renderer-change-" + what)
	defer daemon.Stop(30 * time.Second)
	rendered := cb.srv.On(verify.RenderedBranch)
	head := rendered.Head()
	start := time.Now()
	cb.srv.On(verify.InventoryBranch(node)).Commit(map[string]string{api.InventoryPath(node): inv}, nil, "inventory: "+node)
	cb.inventories[node] = inv
	eventually(b, 10*time.Minute, "the device's render pushed", func() (bool, string) { return rendered.Head() != head, "not yet" })
	renderTook := time.Since(start)
	var broker *unstructured.Unstructured
	for p, data := range renderedFiles(b, cb.srv) {
		if _, ok := before[p]; !ok && strings.HasPrefix(path.Base(p), "deployment-") {
			o, err := Objects(data)
			require.NoError(b, err)
			broker = o[0]
		}
	}
	require.NotNil(b, broker, "the new device's broker Deployment is rendered")
	selector := api.LabelInstance + "=" + broker.GetLabels()[api.LabelInstance]
	// Where the time goes: the one-shot render and push (a render daemon's is a fraction of
	// it), Flux (the sources' fetch, the folder's build, dry run and apply), the scheduler.
	var created, scheduled time.Duration
	eventually(b, 10*time.Minute, "the new device's Pod to run", func() (bool, string) {
		list, err := cluster.Client.CoreV1().Pods(fleetNS).List(cb.ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(list.Items) == 0 {
			return false, fmt.Sprintf("no Pod yet (%v)", err)
		}
		p := list.Items[0]
		if created == 0 {
			created = time.Since(start)
		}
		if scheduled == 0 && p.Spec.NodeName != "" {
			scheduled = time.Since(start)
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	ch := changed{toPod: time.Since(start), steps: fmt.Sprintf("rendered and pushed by the render daemon (woken by the push webhook) after %s, the Pod created by Flux after %s, on its node after %s",
		renderTook.Round(time.Millisecond), created.Round(time.Millisecond), scheduled.Round(time.Millisecond))}
	waitSourcesAppliedWithin(b, cb.srv, fluxNS, 20*time.Minute)
	time.Sleep(2 * time.Second)
	ch.reconciled, ch.cpu = reconcilesSince(b, cluster.Process("kustomize-controller").Log, mark, fluxNS), cb.cpu.since()
	return ch
}

// churn adds a device every 2 s for a minute, spread over the Pod Configurations' nodes, with
// the renderer as a daemon woken by each push's webhook and telling Flux's Receiver which
// sources moved. Flux keeps up when every new device's Pod runs soon after the
// last change; nothing is lost when every one of them does, and only the folders the devices
// went to reconcile.
func (cb *clusterBench) churn() {
	b := cb.b
	renderer := cb.startDaemon("renderer-bench")
	// rendered/flux/ moves only when a folder appears or goes (a small fleet's empty shard
	// getting its first device): only then may the root and gitbroker-sources reconcile.
	fluxFolder := cb.srv.On(api.FluxFolderBranch)
	fluxBefore := fluxFolder.Head()
	cb.cpu.mark()
	mark := logLineCount(b, cluster.Process("kustomize-controller").Log)
	var instances, configs []string
	// When each device's Pod is first seen Running, from a watch of the fleet's Pods.
	runningAt := map[string]time.Time{}
	var mu sync.Mutex
	// From the list's resource version, so the watch does not begin with every existing Pod.
	now, err := cluster.Client.CoreV1().Pods(fleetNS).List(cb.ctx, metav1.ListOptions{Limit: 1})
	require.NoError(b, err)
	watch, err := cluster.Client.CoreV1().Pods(fleetNS).Watch(cb.ctx, metav1.ListOptions{LabelSelector: api.LabelInstance, ResourceVersion: now.ResourceVersion})
	require.NoError(b, err)
	defer watch.Stop()
	go func() {
		for ev := range watch.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Status.Phase != corev1.PodRunning {
				continue
			}
			now := time.Now()
			mu.Lock()
			if inst := p.Labels[api.LabelInstance]; runningAt[inst].IsZero() {
				runningAt[inst] = now
			}
			mu.Unlock()
		}
	}()
	changedAt := map[string]time.Time{}
	churnStart := time.Now()
	var last time.Time
	for i := 0; time.Since(churnStart) < time.Minute; i++ {
		last = time.Now()
		cfg := fmt.Sprintf("cfg-%02d", 2*(i%10)) // the even Configurations have Pod brokers
		id := fmt.Sprintf("churn-%d", i)
		node, inv := deviceChange(b, cb.inventories, cfg, id)
		cb.srv.On(verify.InventoryBranch(node)).Commit(map[string]string{api.InventoryPath(node): inv}, nil, "inventory: "+node)
		cb.inventories[node] = inv
		instances = append(instances, instance(cfg, id, node))
		changedAt[instances[len(instances)-1]] = last
		configs = append(configs, cfg)
		time.Sleep(time.Until(churnStart.Add(time.Duration(i+1) * 2 * time.Second)))
	}
	selector := api.LabelInstance + " in (" + strings.Join(instances, ",") + ")"
	eventually(b, 10*time.Minute, "every churned device's Pod to run", func() (bool, string) {
		list, err := cluster.Client.CoreV1().Pods(fleetNS).List(cb.ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == len(instances), fmt.Sprintf("%d of %d running", running, len(instances))
	})
	caughtUp := time.Since(last)
	// Each device's Pod against its own change (the watch saw every one Running).
	var each []time.Duration
	require.Eventually(b, func() bool { mu.Lock(); defer mu.Unlock(); return len(runningAt) >= len(instances) }, time.Minute, 100*time.Millisecond)
	mu.Lock()
	for _, inst := range instances {
		at, ok := runningAt[inst]
		require.True(b, ok, "the watch never saw %s's Pod Running", inst)
		each = append(each, at.Sub(changedAt[inst]))
	}
	mu.Unlock()
	slices.Sort(each)
	b.Logf("churn: each device's Pod Running after its change: p50 %s, worst %s", each[len(each)/2].Round(time.Millisecond), each[len(each)-1].Round(time.Millisecond))
	b.ReportMetric(each[len(each)/2].Seconds(), "churn-p50-s")
	b.ReportMetric(each[len(each)-1].Seconds(), "churn-worst-s")
	waitSourcesAppliedWithin(b, cb.srv, fluxNS, 20*time.Minute)
	time.Sleep(2 * time.Second)
	churnCPU := cb.cpu.since()
	churned := reconcilesSince(b, cluster.Process("kustomize-controller").Log, mark, fluxNS)
	renderer.Stop(30 * time.Second)
	b.Logf("churn: %d device changes in %s; every Pod running %s after the last; %d reconciles of %d Kustomizations %v; CPU %s",
		len(instances), time.Minute, caughtUp.Round(time.Millisecond), total(churned), len(churned), churned, churnCPU)
	fluxMoved := fluxFolder.Head() != fluxBefore
	b.Logf("churn: rendered/flux/ changed: %t (a new folder)", fluxMoved)
	for k := range churned {
		if (k == "gitbroker" || k == "gitbroker-sources") && fluxMoved {
			continue
		}
		owner := strings.TrimPrefix(k, "gitbroker-"+fleetNS+"-")
		require.True(b, slices.ContainsFunc(configs, func(c string) bool { return strings.HasPrefix(owner, c+"-shard-") }),
			"%s reconciled, but no device of its folder changed: %v", k, churned)
	}
	b.ReportMetric(caughtUp.Seconds(), "churn-caught-up-s")
	b.ReportMetric(float64(total(churned)), "churn-reconciles")
	b.ReportMetric(churnCPU["kustomize-controller"].Seconds(), "churn-kc-cpu-s")
}

// storm measures the same device change with one source for every folder: the reconcile storm.
func (cb *clusterBench) storm() {
	b := cb.b
	cb.srv.Commit(map[string]string{api.SettingsPath: cb.settings("")}, nil, "one source for all")
	cb.renderOnce()
	// deploy/flux again, as the README says to when the setting goes: its root applies
	// rendered/flux/ whole, and gitbroker-sources, with no folder left to apply, goes.
	applyFluxFrom(b, "../deploy/flux", fluxNS, cb.srv.URL(), cb.rendererKey+".pub", cb.rootInterval)
	require.NoError(b, cluster.Dynamic.Resource(kustomizationGVR).Namespace(fluxNS).Delete(cb.ctx, "gitbroker-sources", metav1.DeleteOptions{}))
	waitSourcesAppliedWithin(b, cb.srv, fluxNS, 3*time.Hour)
	ch := cb.change("bench-2")
	b.Logf("one device change, one source: Pod running after %s (%s); reconciled %v; CPU %s", ch.toPod.Round(time.Millisecond), ch.steps, ch.reconciled, ch.cpu)
	b.ReportMetric(ch.toPod.Seconds(), "storm-change-to-pod-s")
	b.ReportMetric(float64(total(ch.reconciled)), "storm-change-reconciles")
	b.ReportMetric(ch.cpu["kustomize-controller"].Seconds(), "storm-change-kc-cpu-s")
}

// suspendFlux stops every Kustomization in ns from reconciling, so that deleting what they
// applied leaves it deleted, and every GitRepository from fetching, so that the baseline after
// Flux shares the machine with nothing of Flux's.
func suspendFlux(t testing.TB, ns string) {
	t.Helper()
	ctx := context.Background()
	patch := []byte(`{"spec":{"suspend":true}}`)
	for _, gvr := range []schema.GroupVersionResource{kustomizationGVR, gitRepositoryGVR} {
		list, err := cluster.Dynamic.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, o := range list.Items {
			_, err := cluster.Dynamic.Resource(gvr).Namespace(ns).Patch(ctx, o.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
			require.NoError(t, err, "suspend %s %s/%s", gvr.Resource, ns, o.GetName())
		}
	}
}

// benchSourceInterval is how often the folder sources poll: a production-like minute, not the
// suite's 2 s, which for 80 sources would keep source-controller and the git server busy. A
// device change reaches them through Flux's Receiver, which the render daemon tells after each
// render (startDaemon).
const benchSourceInterval = time.Minute

func isBroker(file string) bool {
	for _, k := range []string{"deployment-", "job-", "service-"} {
		if strings.HasPrefix(file, k) {
			return true
		}
	}
	return false
}

// renderedFiles is rendered/ at the rendered branch's head, read as Flux reads it.
func renderedFiles(t testing.TB, srv *gitsynctest.Server) map[string][]byte {
	t.Helper()
	repo, err := gitsync.New(srv.URL(), verify.RenderedBranch)
	require.NoError(t, err)
	snap, err := repo.Snapshot(context.Background())
	require.NoError(t, err)
	files, err := snap.Files(render.RenderedDir)
	require.NoError(t, err)
	return files
}

// deviceChange adds a device to one node's inventory under configuration cfg.
func deviceChange(t testing.TB, inventories map[string]string, cfg, id string) (node, inventory string) {
	t.Helper()
	entry := "  - name: " + cfg + "\n    devices:\n"
	var names []string
	for n, inv := range inventories {
		if strings.Contains(inv, entry) {
			names = append(names, n)
		}
	}
	require.NotEmpty(t, names, "a node with %s devices", cfg)
	sort.Strings(names)
	node = names[0]
	device := "    - id: " + id + "\n      shared: false\n      properties:\n        " + fixtures.FleetDeviceProperty(cfg, "DEVICE") + ": " + id + "\n"
	return node, strings.Replace(inventories[node], entry, entry+device, 1)
}

var brokerGVR = map[string]schema.GroupVersionResource{
	"Deployment": appsv1.SchemeGroupVersion.WithResource("deployments"),
	"Pod":        {Version: "v1", Resource: "pods"},
	"Service":    {Version: "v1", Resource: "services"},
	"Job":        batchv1.SchemeGroupVersion.WithResource("jobs"),
}

// applyWith applies objs into namespace ns server-side with as many requests in flight as
// workers, from a client without client-side rate limits (the API server's priority and
// fairness is the limit, as it is for Flux's controllers). With fluxRequests each object is
// first read and dry-run applied, as fluxcd/pkg/ssa's ApplyAll does before it applies.
func applyWith(t testing.TB, objs []*unstructured.Unstructured, ns string, workers int, fluxRequests bool) {
	t.Helper()
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = -1, 0
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	work := make(chan *unstructured.Unstructured)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for o := range work {
				c := o.DeepCopy()
				c.SetNamespace(ns)
				r := dyn.Resource(brokerGVR[c.GetKind()]).Namespace(ns)
				opts := metav1.ApplyOptions{FieldManager: "bench-ssa", Force: true}
				if fluxRequests {
					if _, err := r.Get(ctx, c.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						failed.Store(fmt.Errorf("%s %s: read before apply: %v", c.GetKind(), c.GetName(), err))
						continue
					}
					dry := opts
					dry.DryRun = []string{metav1.DryRunAll}
					if _, err := r.Apply(ctx, c.GetName(), c, dry); err != nil {
						failed.Store(fmt.Errorf("%s %s: dry run: %w", c.GetKind(), c.GetName(), err))
						continue
					}
				}
				if _, err := r.Apply(ctx, c.GetName(), c, opts); err != nil {
					failed.Store(fmt.Errorf("%s %s: %w", c.GetKind(), c.GetName(), err))
				}
			}
		}()
	}
	for _, o := range objs {
		work <- o
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
}

// waitScheduled waits until every Deployment in ns is Available and no Pod in ns is waiting for a
// node, so the next phase does not share the cores with the controllers' and the scheduler's
// backlog (thousands of Deployments applied at once take kube-controller-manager minutes to give
// their ReplicaSets and Pods and record them Available; a device change measured before that
// waits behind them).
func waitScheduled(t testing.TB, ns string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	next := start.Add(time.Minute)
	// Every 2 s, the Pods without a node (a list of 11,000 whole Pods four times a second would
	// compete with the scheduler it waits for), until there are none twice in a row: a Job's
	// Pods come after the Job. Failed Jobs' retries keep coming for minutes and are not waited
	// for.
	for clear := 0; ; time.Sleep(2 * time.Second) {
		pending, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=", ResourceVersion: "0"})
		require.NoError(t, err)
		deployments, err := cluster.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		require.NoError(t, err)
		waiting := 0
		for _, d := range deployments.Items {
			if d.Status.ObservedGeneration < d.Generation || d.Spec.Replicas != nil && d.Status.AvailableReplicas < *d.Spec.Replicas {
				waiting++
			}
		}
		if len(pending.Items) == 0 && waiting == 0 {
			if clear++; clear == 2 {
				break
			}
			continue
		}
		clear = 0
		if now := time.Now(); now.After(next) {
			t.Logf("%s: %d Pods in %s not scheduled, %d Deployments not Available", now.Sub(start).Round(time.Minute), len(pending.Items), ns, waiting)
			next = next.Add(time.Minute)
		}
		if err := cluster.checkAlive(); err != nil {
			t.Fatalf("scheduling: %v", err)
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for every Pod in %s to be on a node: %d not scheduled, %d Deployments not Available", timeout, ns, len(pending.Items), waiting)
		}
	}
	t.Logf("every Deployment in %s Available and every Pod scheduled %s later", ns, time.Since(start).Round(time.Second))
}

// waitRollout waits until every Kustomization of Flux namespace ns has applied its source's head,
// polling every 2 seconds (the suite's 250 ms would add hundreds of requests a minute to the
// API server it measures), and logs each minute how many have, with the CPU the named processes
// used in that minute.
func waitRollout(t testing.TB, srv *gitsynctest.Server, ns string, names []string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	cpu := newCPUMeter(t, names...)
	cpu.mark()
	reqs := requestCounts(t)
	next := start.Add(time.Minute)
	for {
		applied, all, state := sourcesApplied(srv, ns)
		if all >= 2 && applied == all {
			return
		}
		if now := time.Now(); now.After(next) {
			// What the minute created: the Services pass one lock in the API server (their
			// ClusterIP's allocation), so how early they flow decides much of the rollout.
			after := requestCounts(t)
			created := func(resource string) float64 { return after["APPLY "+resource] - reqs["APPLY "+resource] }
			t.Logf("%s: %d of %d Kustomizations applied; in the last minute %.0f Services, %.0f Pods, %.0f Jobs applied; CPU %s",
				now.Sub(start).Round(time.Minute), applied, all, created("services"), created("pods"), created("jobs"), cpu.since())
			reqs = after
			cpu.mark()
			next = next.Add(time.Minute)
		}
		if err := cluster.checkAlive(); err != nil {
			t.Fatalf("rollout: %v", err)
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for every Kustomization to apply its source's head; last state: %s\n(component logs: %s)", timeout, state, cluster.LogDir)
		}
		time.Sleep(2 * time.Second)
	}
}

// deleteNamespace deletes ns and waits until it and everything in it are gone.
func deleteNamespace(t testing.TB, ns string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	// Without a grace period the Pods go at once, not one kwok stage at a time (6-7 a second:
	// deleting fleet-10k's namespace alone took 29 minutes).
	// A collection of thousands can take longer than the API server gives a request (its
	// stream is then reset); what it deleted stays deleted, and the next call takes the rest.
	now, background := int64(0), metav1.DeletePropagationBackground
	// The broker Deployments first, or their ReplicaSets make the Pods again.
	eventually(t, timeout, "the Deployments of "+ns+" deleted", func() (bool, string) {
		err := cluster.Client.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, timeout, "the ReplicaSets of "+ns+" deleted", func() (bool, string) {
		err := cluster.Client.AppsV1().ReplicaSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, timeout, "the Jobs of "+ns+" deleted", func() (bool, string) {
		err := cluster.Client.BatchV1().Jobs(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, timeout, "the Pods of "+ns+" deleted", func() (bool, string) {
		err := cluster.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &now}, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	// Services have no collection delete, and the namespace controller deletes them one at a
	// time, each waiting for the cluster-wide ClusterIP lock (fleet-10k's 4,982 took 10-24
	// minutes): sixteen at a time here.
	services, err := cluster.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	require.NoError(t, err)
	work := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				if err := cluster.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("delete Service %s/%s: %v", ns, name, err)
				}
			}
		}()
	}
	for _, svc := range services.Items {
		work <- svc.Name
	}
	close(work)
	wg.Wait()
	require.NoError(t, cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	eventually(t, timeout, "namespace "+ns+" gone", func() (bool, string) {
		_, err := cluster.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("%d Pods left", len(pods.Items))
	})
	t.Logf("namespace %s and its objects deleted in %s", ns, time.Since(start).Round(time.Second))
}
