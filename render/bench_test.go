package render_test

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

// fleet10k is the benchmark fleet: 10,000 devices on 1,000 nodes, 20 Configurations,
// half Pod brokers and half Job brokers.
var fleet10k = fleetSpec{nodes: 1000, configurations: 20, devices: 10000, seed: 42}

// peakHeap samples the live heap while f runs and returns its peak in MiB.
func peakHeap(f func()) float64 {
	var peak atomic.Uint64
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > peak.Load() {
			peak.Store(v)
		}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	f()
	read()
	close(done)
	return float64(peak.Load()) / (1 << 20)
}

// fleet100k is ten times fleet10k: 100,000 devices on 10,000 nodes, the same 20 Configurations.
var fleet100k = fleetSpec{nodes: 10000, configurations: 20, devices: 100000, seed: 42}

// BenchmarkRenderFleet10k is the full render of the fleet from nothing, with a fresh Renderer.
func BenchmarkRenderFleet10k(b *testing.B) { benchmarkRender(b, fleet10k) }

// BenchmarkRenderFleet10kDRA is BenchmarkRenderFleet10k in DRA mode (gitbroker.yaml
// spec.deviceAllocation: dra): each device also gets a ResourceSlice and, with a broker that
// claims it, a ResourceClaimTemplate; each Configuration a DeviceClass. docs/PERFORMANCE.md
// compares the two, run together.
func BenchmarkRenderFleet10kDRA(b *testing.B) { benchmarkRender(b, fleet10k.dra()) }

// BenchmarkRerenderFleet10kOneDeviceDRA is BenchmarkRerenderFleet10kOneDevice in DRA mode.
func BenchmarkRerenderFleet10kOneDeviceDRA(b *testing.B) { benchmarkRerender(b, fleet10k.dra()) }

// BenchmarkRenderFleet100k is the same on fleet100k (about 167,000 files).
func BenchmarkRenderFleet100k(b *testing.B) { benchmarkRender(b, fleet100k) }

func benchmarkRender(b *testing.B, spec fleetSpec) {
	tree := generateFleet(spec)
	var peak float64
	var res *render.Result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// The peak is measured from a collected heap; the collection is not the render's.
		b.StopTimer()
		runtime.GC()
		b.StartTimer()
		p := peakHeap(func() { res = render.Render(render.Request{Files: tree}) })
		if p > peak {
			peak = p
		}
	}
	b.StopTimer()
	if len(res.Errors) > 0 || res.Refused != nil {
		b.Fatalf("render failed: %v %v", res.Errors, res.Refused)
	}
	b.ReportMetric(peak, "peak-heap-MiB")
	b.ReportMetric(float64(len(res.Files)), "files")
}

// BenchmarkRenderFleet100kClusters is fleet100k as 1,000 clusters of 10 nodes and 100 devices
// each (gitbroker.yaml spec.clusters, a glob per cluster): DESIGN.md's budget for many clusters
// is fleet-100k's, 10 s and 2 GiB. docs/PERFORMANCE.md compares it with
// BenchmarkRenderFleet100k, run together.
func BenchmarkRenderFleet100kClusters(b *testing.B) { benchmarkRender(b, fleet100k.clusters(1000)) }

// BenchmarkRerenderFleet100kClustersOneDevice is BenchmarkRerenderFleet100kOneDevice on
// fleet100k as 1,000 clusters.
func BenchmarkRerenderFleet100kClustersOneDevice(b *testing.B) {
	benchmarkRerender(b, fleet100k.clusters(1000))
}

// BenchmarkRenderFleet100kDRA is BenchmarkRenderFleet100k in DRA mode: the render budget
// (DESIGN.md: 10 s, 2 GiB) holds with each device's ResourceSlice and claim template too.
func BenchmarkRenderFleet100kDRA(b *testing.B) { benchmarkRender(b, fleet100k.dra()) }

// BenchmarkRerenderFleet10kOneDevice re-renders the rendered fleet after one device's
// properties change, with the Renderer kept from the previous render (as a daemon does).
func BenchmarkRerenderFleet10kOneDevice(b *testing.B) { benchmarkRerender(b, fleet10k) }

// BenchmarkRerenderFleet100kOneDevice is the same on fleet100k.
func BenchmarkRerenderFleet100kOneDevice(b *testing.B) { benchmarkRerender(b, fleet100k) }

func benchmarkRerender(b *testing.B, spec fleetSpec) {
	tree := generateFleet(spec)
	r := render.New()
	tree = apply(tree, r.Render(render.Request{Files: tree}))
	inv, changed := oneDeviceChange(tree)
	variants := []string{changed, string(tree[inv])}
	// The first render over a rendered tree reads every rendered file back (a daemon's first
	// render after it starts); the loop measures the ones after it.
	start := time.Now()
	tree[inv] = []byte(variants[1])
	_ = r.Render(render.Request{Files: tree})
	first := time.Since(start)
	var peak float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Only the render is timed: not the collection the peak is measured from, nor the
		// harness's checks and new tree, which pass over every file.
		b.StopTimer()
		tree[inv] = []byte(variants[i%2])
		runtime.GC()
		b.StartTimer()
		var res *render.Result
		p := peakHeap(func() { res = r.Render(render.Request{Files: tree}) })
		b.StopTimer()
		if p > peak {
			peak = p
		}
		if len(res.Diff) == 0 {
			b.Fatal("the change must change the output")
		}
		tree = apply(tree, res)
		b.StartTimer()
	}
	b.ReportMetric(peak, "peak-heap-MiB")
	b.ReportMetric(first.Seconds(), "first-rerender-s")
}

// BenchmarkRerenderFleet10kFresh is the same re-render with a fresh Renderer (a CLI run).
func BenchmarkRerenderFleet10kFresh(b *testing.B) {
	tree := generateFleet(fleet10k)
	tree = apply(tree, render.Render(render.Request{Files: tree}))
	inv, changed := oneDeviceChange(tree)
	tree[inv] = []byte(changed)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := render.Render(render.Request{Files: tree})
		if !res.Changed() {
			b.Fatal("the change must change the output")
		}
	}
}

// oneDeviceChange adds one unshared device of the Pod broker cfg-00 to the first node that has
// devices of it.
func oneDeviceChange(tree render.Tree) (string, string) {
	const block = "  - name: cfg-00\n    devices:\n"
	for _, p := range tree.Paths() {
		if s := string(tree[p]); strings.HasPrefix(p, "inventory/") && strings.Contains(s, block) {
			return p, strings.Replace(s, block, block+"    - id: new-device\n      properties:\n        ONVIF_DEVICE: new\n", 1)
		}
	}
	panic("no inventory with cfg-00")
}

// TestWriteFleet writes the benchmark fleet as a repository to $GITBROKER_FLEET_DIR, so the
// command itself can be measured on it (make bench-cli), and with $GITBROKER_HELM_DIR the same
// fleet as values of the Helm chart in fixtures/helm (make bench-helm). $GITBROKER_FLEET_DEVICES
// picks another size (10 devices per node). It is skipped otherwise.
func TestWriteFleet(t *testing.T) {
	dir := os.Getenv("GITBROKER_FLEET_DIR")
	if dir == "" {
		t.Skip("GITBROKER_FLEET_DIR is not set")
	}
	spec := fleet10k
	if n, err := strconv.Atoi(os.Getenv("GITBROKER_FLEET_DEVICES")); err == nil && n > 0 {
		spec.devices, spec.nodes = n, n/10
	}
	if helm := os.Getenv("GITBROKER_HELM_DIR"); helm != "" {
		chart := os.DirFS("../fixtures/helm")
		if err := os.CopyFS(helm, chart); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(helm, "values.yaml"), fixtures.FleetHelmValues(spec.fixture()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, b := range generateFleet(spec) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
