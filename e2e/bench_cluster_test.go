//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
	ctx := context.Background()
	spec := fixtures.Fleet10k
	if n, _ := strconv.Atoi(os.Getenv("GITBROKER_BENCH_DEVICES")); n > 0 {
		spec.Devices, spec.Nodes = n, max(n/10, 1)
	}
	spec.Shards, _ = strconv.Atoi(os.Getenv("GITBROKER_BENCH_SHARDS"))
	spec.Headless = os.Getenv("GITBROKER_BENCH_HEADLESS") != ""
	const (
		fleetNS = "fleet"
		ssaNS   = "fleet-ssa"
		// patternNS is where Flux's request pattern is replayed.
		patternNS = "fleet-pattern"
		fluxNS    = "flux-bench"
	)
	require.NoError(b, cluster.CreateNamespace(ctx, fluxNS))
	// The folders' Kustomizations reconcile every interval for drift alone (a folder's source
	// moving reconciles it at once): at the default 10 minutes, the folders that applied first
	// dry-run every object again while the last are still applying.
	interval := os.Getenv("GITBROKER_BENCH_INTERVAL")
	settings := func(url string) string {
		s := "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: " + fleetNS +
			"\n  flux:\n    namespace: " + fluxNS + "\n    retryInterval: 10s\n"
		if interval != "" {
			s += "    interval: " + interval + "\n"
		}
		if url != "" {
			s += "    folderSources:\n      url: " + url + "\n      interval: " + benchSourceInterval.String() + "\n"
		}
		return s
	}

	// The fleet's repository: Configurations on main, each node's inventory on its own ref.
	people := map[string]string{}
	refs := map[string]map[string][]byte{}
	inventories := map[string]string{}
	for p, content := range fixtures.Fleet(spec) {
		if api.IsInventoryPath(p) {
			node := strings.TrimSuffix(path.Base(p), ".yaml")
			refs[verify.InventoryBranch(node)] = map[string][]byte{p: content}
			inventories[node] = string(content)
			continue
		}
		people[p] = string(content)
	}
	srv := gitsynctest.NewServer(b, "main", people)
	srv.Commit(map[string]string{api.SettingsPath: settings(srv.URL())}, nil, "one source per folder")
	srv.SeedBranches(refs)
	rendererKey := filepath.Join(b.TempDir(), "renderer")
	_, _, err := trust.LoadOrCreateSigner(rendererKey, "renderer")
	require.NoError(b, err)
	renderOnce := func() time.Duration {
		b.Helper()
		start := time.Now()
		out, err := exec.Command(gitbroker, "render", "--git", srv.URL(), "--signing-key", rendererKey).CombinedOutput()
		require.NoError(b, err, "gitbroker render: %s", out)
		return time.Since(start)
	}
	b.Logf("first render and push: %s", renderOnce().Round(time.Millisecond))
	rendered := renderedFiles(b, srv)

	// What the cluster gets: the broker objects. They ask for no akri.sh/<instance> resource (the
	// renderer pins a Pod to its device's node instead), so the nodes need no device plugin.
	var objs []*unstructured.Unstructured
	for p, data := range rendered {
		if !strings.HasPrefix(p, render.RenderedDir+fleetNS+"/") || !isBroker(path.Base(p)) {
			continue
		}
		o, err := Objects(data)
		require.NoError(b, err, p)
		require.Len(b, o, 1, p)
		objs = append(objs, o[0])
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].GetName() < objs[j].GetName() })
	counts := map[string]int{}
	for _, o := range objs {
		counts[o.GetKind()]++
	}
	b.Logf("fleet: %d nodes, %d devices, %d shards per Configuration, headless Services %t, %d rendered files; objects %v", spec.Nodes, spec.Devices, max(spec.Shards, 1), spec.Headless, len(rendered), counts)
	b.Logf("kustomize-controller %q, source-controller %q, Kustomizations' interval %q", os.Getenv("GITBROKER_E2E_KUSTOMIZE_CONTROLLER_ARGS"), os.Getenv("GITBROKER_E2E_SOURCE_CONTROLLER_ARGS"), interval)

	start := time.Now()
	nodes := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range nodes {
				if err := cluster.AddNode(ctx, n); err != nil {
					failed.Store(err)
				}
			}
		}()
	}
	for n := range inventories {
		nodes <- n
	}
	close(nodes)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d kwok nodes up in %s", len(inventories), time.Since(start).Round(time.Second))

	// The rest of the control plane shares the same 2 cores: kube-controller-manager (its
	// EndpointSlice controller matches every Pod event against every Service of the namespace),
	// the scheduler and kwok.
	cpu := newCPUMeter(b, "kube-apiserver", "etcd", "kustomize-controller", "source-controller", "kube-controller-manager", "kube-scheduler", "kwok")

	// 1. The physical limit: the same objects, applied server-side from client-go.
	workers := 16
	if n, _ := strconv.Atoi(os.Getenv("GITBROKER_BENCH_SSA_WORKERS")); n > 0 {
		workers = n
	}
	// applyPhase applies the objects from client-go into ns, a new namespace (with Flux's
	// requests for each when fluxRequests), and returns the time, the CPU and the API server's
	// request counts from before it.
	applyPhase := func(ns string, fluxRequests bool) (time.Duration, cpuUse, map[string]float64) {
		b.Helper()
		require.NoError(b, cluster.CreateNamespace(ctx, ns))
		cpu.mark()
		reqs := requestCounts(b)
		start := time.Now()
		applyWith(b, objs, ns, workers, fluxRequests)
		took := time.Since(start)
		return took, cpu.since(), reqs
	}
	ssa, ssaCPU, reqs := applyPhase(ssaNS, false)
	b.Logf("server-side apply of %d objects, %d in flight: %s; CPU %s", len(objs), workers, ssa.Round(time.Millisecond), ssaCPU)
	logRequests(b, "server-side apply", reqs)
	waitScheduled(b, ssaNS, 15*time.Minute)
	// The baseline's Pods and Jobs would keep the controllers busy during the Flux phase: it
	// starts on the cluster as the baseline found it.
	deleteNamespace(b, ssaNS, time.Hour)

	// 2. Flux's own requests for the same objects, from the same client and workers: what
	// fluxcd/pkg/ssa's ApplyAll asks of the API server for each object it creates (read it,
	// dry-run apply it, apply it), with none of Flux's other work and every request as early
	// as the baseline's: on an API server whose CPU is the limit, no layout of folders makes
	// Flux cheaper than this.
	pattern, patternCPU, reqs := applyPhase(patternNS, true)
	b.Logf("Flux's requests (read, dry-run apply, apply) for the same objects, %d in flight: %s (%.2fx the server-side apply); CPU %s", workers, pattern.Round(time.Millisecond), pattern.Seconds()/ssa.Seconds(), patternCPU)
	logRequests(b, "Flux's requests", reqs)
	waitScheduled(b, patternNS, 15*time.Minute)
	deleteNamespace(b, patternNS, time.Hour)
	if os.Getenv("GITBROKER_BENCH_SKIP_FLUX") != "" {
		b.ReportMetric(ssa.Seconds(), "ssa-s")
		b.ReportMetric(pattern.Seconds()/ssa.Seconds(), "flux-requests/ssa")
		return
	}

	// 3. The same objects through gitbroker's render and Flux.
	cpu.mark()
	reqs = requestCounts(b)
	mark := logLineCount(b, cluster.Process("kustomize-controller").Log)
	profiled := profileController(b, "kustomize-controller", os.Getenv("GITBROKER_BENCH_PROFILE"), 60)
	dumped := dumpAPIServer(b, os.Getenv("GITBROKER_BENCH_APISERVER_DUMPS"))
	start = time.Now()
	// The root Kustomization, like the folders', reconciles every interval for drift alone (its
	// source moves when rendered/flux/ does): the bench gives it the folders' interval, so that
	// a drift check of deploy/flux's 10 minutes does not land in the measurements below.
	rootInterval := func(obj *unstructured.Unstructured) {
		if interval != "" && obj.GetKind() == "Kustomization" && (obj.GetName() == "gitbroker" || obj.GetName() == "gitbroker-sources") {
			require.NoError(b, unstructured.SetNestedField(obj.Object, interval, "spec", "interval"))
		}
	}
	applyFluxFrom(b, "../deploy/flux-folder-sources", fluxNS, srv.URL(), rendererKey+".pub", rootInterval)
	waitRollout(b, srv, fluxNS, cpu.names, 3*time.Hour)
	flux := time.Since(start)
	fluxCPU := cpu.since()
	b.Logf("Flux: every Kustomization applied in %s (%.2fx the server-side apply); CPU %s", flux.Round(time.Millisecond), flux.Seconds()/ssa.Seconds(), fluxCPU)
	logRequests(b, "Flux", reqs)
	logKustomizations(b, fluxNS, start)
	logReconciles(b, cluster.Process("kustomize-controller").Log, mark, fluxNS)
	profiled()
	dumped()
	waitScheduled(b, fleetNS, 15*time.Minute)

	// 4. One device change.
	change := func(what string) (time.Duration, map[string]int, cpuUse, string) {
		b.Helper()
		node, inv := deviceChange(b, inventories, "cfg-00", what)
		before := renderedFiles(b, srv)
		cpu.mark()
		mark := logLineCount(b, cluster.Process("kustomize-controller").Log)
		start := time.Now()
		srv.On(verify.InventoryBranch(node)).Commit(map[string]string{api.InventoryPath(node): inv}, nil, "inventory: "+node)
		inventories[node] = inv
		renderTook := renderOnce()
		requestFetch(b, fluxNS)
		var pod *unstructured.Unstructured
		for p, data := range renderedFiles(b, srv) {
			if _, ok := before[p]; !ok && strings.HasPrefix(path.Base(p), "pod-") {
				o, err := Objects(data)
				require.NoError(b, err)
				pod = o[0]
			}
		}
		require.NotNil(b, pod, "the new device's Pod is rendered")
		// Where the time goes: the one-shot render and push (a render daemon's is a fraction of
		// it), Flux (the sources' fetch, the folder's build, dry run and apply), the scheduler.
		var created, scheduled time.Duration
		eventually(b, 10*time.Minute, "the new device's Pod to run", func() (bool, string) {
			p, err := cluster.Client.CoreV1().Pods(fleetNS).Get(ctx, pod.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if created == 0 {
				created = time.Since(start)
			}
			if scheduled == 0 && p.Spec.NodeName != "" {
				scheduled = time.Since(start)
			}
			return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
		})
		toPod := time.Since(start)
		steps := fmt.Sprintf("rendered and pushed by gitbroker render --git after %s, the Pod created by Flux after %s, on its node after %s",
			renderTook.Round(time.Millisecond), created.Round(time.Millisecond), scheduled.Round(time.Millisecond))
		waitSourcesAppliedWithin(b, srv, fluxNS, 20*time.Minute)
		time.Sleep(2 * time.Second)
		return toPod, reconcilesSince(b, cluster.Process("kustomize-controller").Log, mark, fluxNS), cpu.since(), steps
	}
	toPod, reconciled, changeCPU, steps := change("bench-1")
	b.Logf("one device change, one source per folder: Pod running after %s (%s); reconciled %v; CPU %s", toPod.Round(time.Millisecond), steps, reconciled, changeCPU)
	b.ReportMetric(ssa.Seconds(), "ssa-s")
	b.ReportMetric(flux.Seconds(), "flux-s")
	b.ReportMetric(flux.Seconds()/ssa.Seconds(), "flux/ssa")
	b.ReportMetric(pattern.Seconds()/ssa.Seconds(), "flux-requests/ssa")
	b.ReportMetric(ssaCPU["kube-apiserver"].Seconds(), "ssa-apiserver-cpu-s")
	b.ReportMetric(fluxCPU["kube-apiserver"].Seconds(), "flux-apiserver-cpu-s")
	b.ReportMetric(toPod.Seconds(), "change-to-pod-s")
	b.ReportMetric(float64(total(reconciled)), "change-reconciles")
	b.ReportMetric(changeCPU["kustomize-controller"].Seconds(), "change-kc-cpu-s")

	// 5. Churn: a device every 2 s for a minute, spread over the Pod Configurations' nodes, with
	// the renderer as a daemon and its pushes announced to the sources every 2 s, as a Receiver
	// on the git host's webhook would. Flux keeps up when every new device's Pod runs soon after
	// the last change; nothing is lost when every one of them does, and only the folders the
	// devices went to reconcile.
	renderer := startGitbroker(b, "renderer-bench", "renderer started", "render",
		"--git", srv.URL(), "--branch", "main", "--watch", "--interval", "1s", "--signing-key", rendererKey,
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	cpu.mark()
	mark = logLineCount(b, cluster.Process("kustomize-controller").Log)
	stopFetching := announcePushes(b, fluxNS, 2*time.Second)
	var instances, configs []string
	churnStart := time.Now()
	var last time.Time
	for i := 0; time.Since(churnStart) < time.Minute; i++ {
		last = time.Now()
		cfg := fmt.Sprintf("cfg-%02d", 2*(i%10)) // the even Configurations have Pod brokers
		id := fmt.Sprintf("churn-%d", i)
		node, inv := deviceChange(b, inventories, cfg, id)
		srv.On(verify.InventoryBranch(node)).Commit(map[string]string{api.InventoryPath(node): inv}, nil, "inventory: "+node)
		inventories[node] = inv
		instances = append(instances, instance(cfg, id, node))
		configs = append(configs, cfg)
		time.Sleep(time.Until(churnStart.Add(time.Duration(i+1) * 2 * time.Second)))
	}
	selector := api.LabelInstance + " in (" + strings.Join(instances, ",") + ")"
	eventually(b, 10*time.Minute, "every churned device's Pod to run", func() (bool, string) {
		list, err := cluster.Client.CoreV1().Pods(fleetNS).List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
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
	stopFetching()
	waitSourcesAppliedWithin(b, srv, fluxNS, 20*time.Minute)
	time.Sleep(2 * time.Second)
	churnCPU := cpu.since()
	churned := reconcilesSince(b, cluster.Process("kustomize-controller").Log, mark, fluxNS)
	renderer.Stop(30 * time.Second)
	b.Logf("churn: %d device changes in %s; every Pod running %s after the last; %d reconciles of %d Kustomizations %v; CPU %s",
		len(instances), time.Minute, caughtUp.Round(time.Millisecond), total(churned), len(churned), churned, churnCPU)
	for k := range churned {
		owner := strings.TrimPrefix(k, "gitbroker-"+fleetNS+"-")
		require.True(b, slices.ContainsFunc(configs, func(c string) bool { return strings.HasPrefix(owner, c+"-shard-") }),
			"%s reconciled, but no device of its folder changed: %v", k, churned)
	}
	b.ReportMetric(caughtUp.Seconds(), "churn-caught-up-s")
	b.ReportMetric(float64(total(churned)), "churn-reconciles")
	b.ReportMetric(churnCPU["kustomize-controller"].Seconds(), "churn-kc-cpu-s")

	if os.Getenv("GITBROKER_BENCH_STORM") != "" {
		// The same change with one source for every folder: the reconcile storm.
		srv.Commit(map[string]string{api.SettingsPath: settings("")}, nil, "one source for all")
		renderOnce()
		// deploy/flux again, as the README says to when the setting goes: its root applies
		// rendered/flux/ whole, and gitbroker-sources, with no folder left to apply, goes.
		applyFluxFrom(b, "../deploy/flux", fluxNS, srv.URL(), rendererKey+".pub", rootInterval)
		require.NoError(b, cluster.Dynamic.Resource(kustomizationGVR).Namespace(fluxNS).Delete(ctx, "gitbroker-sources", metav1.DeleteOptions{}))
		waitSourcesAppliedWithin(b, srv, fluxNS, 3*time.Hour)
		toPod, reconciled, changeCPU, steps = change("bench-2")
		b.Logf("one device change, one source: Pod running after %s (%s); reconciled %v; CPU %s", toPod.Round(time.Millisecond), steps, reconciled, changeCPU)
		b.ReportMetric(toPod.Seconds(), "storm-change-to-pod-s")
		b.ReportMetric(float64(total(reconciled)), "storm-change-reconciles")
		b.ReportMetric(changeCPU["kustomize-controller"].Seconds(), "storm-change-kc-cpu-s")
	}

	// 6. The physical limit again, on the cluster as the first one found it: Flux stopped and
	// its fleet deleted. This machine's speed drifts by tens of percent within a run (the same
	// apply has taken 3m19s and 5m27s), so Flux's phase is compared with both baselines around
	// it and with their mean.
	suspendFlux(b, fluxNS)
	deleteNamespace(b, fleetNS, time.Hour)
	ssaAfter, ssaAfterCPU, reqs := applyPhase(ssaNS, false)
	b.Logf("server-side apply again, after Flux: %s (%.2fx the first); CPU %s", ssaAfter.Round(time.Millisecond), ssaAfter.Seconds()/ssa.Seconds(), ssaAfterCPU)
	logRequests(b, "server-side apply after Flux", reqs)
	mean := (ssa + ssaAfter) / 2
	b.Logf("Flux against the server-side apply: %.2fx the one before it, %.2fx the one after it, %.2fx their mean (%s)",
		flux.Seconds()/ssa.Seconds(), flux.Seconds()/ssaAfter.Seconds(), flux.Seconds()/mean.Seconds(), mean.Round(time.Millisecond))
	b.ReportMetric(ssaAfter.Seconds(), "ssa-after-s")
	b.ReportMetric(flux.Seconds()/ssaAfter.Seconds(), "flux/ssa-after")
	b.ReportMetric(flux.Seconds()/mean.Seconds(), "flux/ssa-mean")
	b.ReportMetric(ssaAfterCPU["kube-apiserver"].Seconds(), "ssa-after-apiserver-cpu-s")
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

// profileController takes a CPU profile of the first seconds of a phase from a Flux
// controller's pprof endpoint into file, when file is not empty; the function it returns waits
// for it.
func profileController(t testing.TB, name, file string, seconds int) (wait func()) {
	t.Helper()
	if file == "" {
		return func() {}
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", cluster.Process(name).Metrics, seconds))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s's pprof: %s", name, resp.Status)
			}
			f, err := os.Create(file)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}()
	}()
	return func() {
		t.Helper()
		require.NoError(t, <-done)
		t.Logf("%s's CPU profile of the phase's first %d s: %s", name, seconds, file)
	}
}

// dumpAPIServer saves, into dir, once a minute from the first minute of a phase until the
// function it returns is called: the API server's goroutines with their stacks and how long
// each has waited (goroutine-<s>.txt), a 20-second CPU profile (cpu-<s>.pprof) and its metrics
// (metrics-<s>.txt), s being the seconds since the phase began. It needs the API server's
// profiling endpoints: GITBROKER_E2E_KUBE_APISERVER_ARGS=--profiling. Where requests wait
// while the API server's CPU is idle, the goroutines say on what.
func dumpAPIServer(t testing.TB, dir string) (stop func()) {
	t.Helper()
	if dir == "" {
		return func() {}
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	get := func(ctx context.Context, path string, params map[string]string) ([]byte, error) {
		req := cluster.Client.CoreV1().RESTClient().Get().AbsPath(path)
		for k, v := range params {
			req = req.Param(k, v)
		}
		return req.DoRaw(ctx)
	}
	go func() {
		done <- func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Until(start.Add(time.Duration(int(time.Since(start).Minutes())+1) * time.Minute))):
				}
				s := int(time.Since(start).Round(time.Second).Seconds())
				for _, d := range []struct {
					file, path string
					params     map[string]string
				}{
					{fmt.Sprintf("goroutine-%d.txt", s), "/debug/pprof/goroutine", map[string]string{"debug": "2"}},
					{fmt.Sprintf("metrics-%d.txt", s), "/metrics", nil},
					{fmt.Sprintf("cpu-%d.pprof", s), "/debug/pprof/profile", map[string]string{"seconds": "20"}},
				} {
					data, err := get(ctx, d.path, d.params)
					if ctx.Err() != nil {
						return nil
					}
					if err != nil {
						return fmt.Errorf("API server %s: %w", d.path, err)
					}
					if err := os.WriteFile(filepath.Join(dir, d.file), data, 0o644); err != nil {
						return err
					}
				}
			}
		}()
	}()
	return func() {
		t.Helper()
		cancel()
		require.NoError(t, <-done)
		t.Logf("the API server's goroutines, CPU profiles and metrics, once a minute of the phase: %s", dir)
	}
}

// benchSourceInterval is how often the folder sources poll: a production-like minute, not the
// suite's 2 s, which for 80 sources would keep source-controller and the git server busy. A
// device change is announced the way a Flux Receiver does on the git host's push webhook
// (requestFetch).
const benchSourceInterval = time.Minute

// requestFetch asks source-controller to fetch every GitRepository in ns now, as a Flux Receiver
// does when the git host calls its webhook: the sources whose branch did not move fetch the same
// revision and reconcile nothing.
func requestFetch(t testing.TB, ns string) {
	t.Helper()
	require.NoError(t, fetchNow(ns))
}

func fetchNow(ns string) error {
	ctx := context.Background()
	list, err := cluster.Dynamic.Resource(gitRepositoryGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"` + time.Now().Format(time.RFC3339Nano) + `"}}}`)
	for _, g := range list.Items {
		if _, err := cluster.Dynamic.Resource(gitRepositoryGVR).Namespace(ns).Patch(ctx, g.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// announcePushes does what requestFetch does every interval until the function it returns is
// called: a Receiver called on each of a busy renderer's pushes.
func announcePushes(t testing.TB, ns string, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		defer close(failed)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if err := fetchNow(ns); err != nil {
					failed <- err
					return
				}
			}
		}
	}()
	return func() {
		t.Helper()
		close(done)
		require.NoError(t, <-failed, "asking the sources to fetch")
	}
}

func isBroker(file string) bool {
	for _, k := range []string{"pod-", "job-", "service-"} {
		if strings.HasPrefix(file, k) {
			return true
		}
	}
	return false
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
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
	device := "    - id: " + id + "\n      shared: false\n      properties:\n        DEVICE: " + id + "\n"
	return node, strings.Replace(inventories[node], entry, entry+device, 1)
}

var brokerGVR = map[string]schema.GroupVersionResource{
	"Pod":     {Version: "v1", Resource: "pods"},
	"Service": {Version: "v1", Resource: "services"},
	"Job":     batchv1.SchemeGroupVersion.WithResource("jobs"),
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

// waitScheduled waits until no Pod in ns is waiting for a node, so the next phase does not share
// the cores with the scheduler's backlog.
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
		if len(pending.Items) == 0 {
			if clear++; clear == 2 {
				break
			}
			continue
		}
		clear = 0
		if now := time.Now(); now.After(next) {
			t.Logf("%s: %d Pods in %s not scheduled", now.Sub(start).Round(time.Minute), len(pending.Items), ns)
			next = next.Add(time.Minute)
		}
		if err := cluster.checkAlive(); err != nil {
			t.Fatalf("scheduling: %v", err)
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for every Pod in %s to be on a node: %d not scheduled", timeout, ns, len(pending.Items))
		}
	}
	t.Logf("every Pod in %s scheduled %s later", ns, time.Since(start).Round(time.Second))
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

// logKustomizations logs when each Kustomization of ns became Ready, from start.
func logKustomizations(t testing.TB, ns string, start time.Time) {
	t.Helper()
	ks, err := cluster.Dynamic.Resource(kustomizationGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var lines []string
	for _, k := range ks.Items {
		conds, _, _ := unstructured.NestedSlice(k.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				at, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
				inv, _, _ := unstructured.NestedSlice(k.Object, "status", "inventory", "entries")
				lines = append(lines, fmt.Sprintf("%6.0fs %s (%d objects)", at.Sub(start).Seconds(), k.GetName(), len(inv)))
			}
		}
	}
	sort.Strings(lines)
	t.Logf("Ready at:\n%s", strings.Join(lines, "\n"))
}

// cpuMeter reads the CPU time of the cluster's processes.
type cpuMeter struct {
	t     testing.TB
	names []string
	at    map[string]time.Duration
}

type cpuUse map[string]time.Duration

func (u cpuUse) String() string {
	var parts []string
	for _, n := range []string{"kube-apiserver", "etcd", "kustomize-controller", "source-controller", "kube-controller-manager", "kube-scheduler", "kwok", "steal"} {
		if d, ok := u[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1fs", n, d.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

func newCPUMeter(t testing.TB, names ...string) *cpuMeter {
	return &cpuMeter{t: t, names: names}
}

func (m *cpuMeter) read() map[string]time.Duration {
	out := map[string]time.Duration{"steal": machineSteal(m.t)}
	for _, n := range m.names {
		p := cluster.Process(n)
		require.NotNil(m.t, p, n)
		d, err := p.CPU()
		require.NoError(m.t, err)
		out[n] = d
	}
	return out
}

func (m *cpuMeter) mark() { m.at = m.read() }

// machineSteal reads the time the hypervisor ran something else while this machine's CPUs
// wanted to run (the steal column of /proc/stat, in USER_HZ of 10 ms), so that a slow phase
// can be told apart from one the host took CPU from (it stayed under 1 s a phase in the runs of
// 2026-12-03, when the same apply took 1.5x longer in one phase than in another).
func machineSteal(t testing.TB) time.Duration {
	data, err := os.ReadFile("/proc/stat")
	require.NoError(t, err)
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	require.True(t, len(f) > 8 && f[0] == "cpu", "/proc/stat: %q", line)
	ticks, err := strconv.ParseInt(f[8], 10, 64)
	require.NoError(t, err, "/proc/stat: steal: %q", line)
	return time.Duration(ticks) * 10 * time.Millisecond
}

func (m *cpuMeter) since() cpuUse {
	now := m.read()
	out := cpuUse{}
	for n, d := range now {
		out[n] = d - m.at[n]
	}
	return out
}

// requestCounts reads the API server's apiserver_request_total by verb, resource, dry run and
// whether the answer was 429 Too Many Requests, and the seconds they took
// (apiserver_request_duration_seconds_sum) under the same key with " seconds" appended.
func requestCounts(t testing.TB) map[string]float64 {
	t.Helper()
	raw, err := cluster.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		suffix := ""
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			if rest, ok = strings.CutPrefix(line, "apiserver_request_duration_seconds_sum{"); !ok {
				continue
			}
			suffix = " seconds"
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(val, `"`)
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		if l["dry_run"] != "" {
			key += " (dry run)"
		}
		if l["code"] == "429" {
			// Refused for the in-flight limit. The API server counts every request it refuses
			// here, including system:masters' ones, which it then serves anyway (and counts
			// again under their real code).
			key += " (429)"
		}
		out[key+suffix] += v
	}
	return out
}

// logRequests logs the requests the API server served since before, most first, with the mean
// time each took.
func logRequests(t testing.TB, what string, before map[string]float64) {
	t.Helper()
	after := requestCounts(t)
	type kv struct {
		k    string
		n, s float64
	}
	var d []kv
	total := 0.0
	for k, v := range after {
		if strings.HasSuffix(k, " seconds") {
			continue
		}
		if n := v - before[k]; n > 0 {
			d = append(d, kv{k, n, after[k+" seconds"] - before[k+" seconds"]})
			total += n
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i].n > d[j].n })
	var lines []string
	for i, e := range d {
		if i == 20 {
			break
		}
		lines = append(lines, fmt.Sprintf("%8.0f %-40s mean %6.0f ms", e.n, e.k, 1000*e.s/e.n))
	}
	refused := 0.0
	for _, e := range d {
		if strings.HasSuffix(e.k, " (429)") {
			refused += e.n
		}
	}
	t.Logf("%s: %.0f API requests (%.0f of them refused 429), most:\n%s", what, total, refused, strings.Join(lines, "\n"))
}

// logReconciles logs, for each Kustomization of ns, the reconciles kustomize-controller finished
// and failed after the first skip lines of its log, the time they took together, and the first
// failure's message.
func logReconciles(t testing.TB, file string, skip int, ns string) {
	t.Helper()
	type tally struct {
		ok, failed int
		took       time.Duration
		firstError string
	}
	all := map[string]*tally{}
	kustomizeLog(t, file, skip, ns, func(line kustomizeLogLine) {
		var took string
		var ok bool
		switch {
		case strings.HasPrefix(line.Msg, "Reconciliation finished in "):
			took, ok = strings.TrimPrefix(line.Msg, "Reconciliation finished in "), true
		case strings.HasPrefix(line.Msg, "Reconciliation failed after "):
			took = strings.TrimPrefix(line.Msg, "Reconciliation failed after ")
		default:
			return
		}
		d, _ := time.ParseDuration(strings.TrimSuffix(strings.Split(took, " ")[0], ","))
		k := all[line.Kustomization.Name]
		if k == nil {
			k = &tally{}
			all[line.Kustomization.Name] = k
		}
		k.took += d
		if ok {
			k.ok++
			return
		}
		k.failed++
		if k.firstError == "" {
			k.firstError = line.Error
			if len(k.firstError) > 160 {
				k.firstError = k.firstError[:160]
			}
		}
	})
	var lines []string
	for name, k := range all {
		lines = append(lines, fmt.Sprintf("%s: %d finished, %d failed, %s in all %s", name, k.ok, k.failed, k.took.Round(time.Second), k.firstError))
	}
	sort.Strings(lines)
	t.Logf("reconciles:\n%s", strings.Join(lines, "\n"))
}
