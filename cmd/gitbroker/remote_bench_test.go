package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/verify"
)

// BenchmarkRemoteRenderOneDevice measures the renderer daemon's work for
// one changed device on a branch that already holds the 10,000-device
// fleet rendered: fetch the agent's commit, render, commit rendered/ and
// push. The Renderer and the object store are kept between renders, as the
// daemon keeps them.
func BenchmarkRemoteRenderOneDevice(b *testing.B) {
	srv := gitsynctest.NewServer(b, "main", nil)
	work := b.TempDir()
	gitsynctest.Git(b, "", "init", "--quiet", "--initial-branch=main", work)
	spec := fixtures.Fleet10k
	if n := envInt("GITBROKER_BENCH_DEVICES", 0); n > 0 {
		// A larger fleet, same shape: GITBROKER_BENCH_DEVICES=20000 gives
		// about 35,000 files.
		spec.Devices, spec.Nodes = n, n/10
	}
	// The people's files on main; each node's inventory on its own ref, written straight into
	// the server's object store (a thousand pushes would take minutes).
	nodes := map[string][]byte{}
	for p, content := range fixtures.Fleet(spec) {
		if api.IsInventoryPath(p) {
			nodes[p] = content
			continue
		}
		if render.IsOwned(p) {
			continue
		}
		full := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(full, content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	gitsynctest.Git(b, work, "add", "-A")
	gitsynctest.Git(b, work, "-c", "user.name=seed", "-c", "user.email=seed@example.com", "commit", "--quiet", "-m", "fleet")
	gitsynctest.Git(b, work, "push", "--quiet", "file://"+srv.Bare(), "HEAD:refs/heads/main")
	refs := map[string]map[string][]byte{}
	for p, content := range nodes {
		refs[verify.InventoryBranch(strings.TrimSuffix(filepath.Base(p), ".yaml"))] = map[string][]byte{p: content}
	}
	// GITBROKER_BENCH_INVENTORY_REPO=1 puts the node refs in a repository of their own
	// (--inventory-git), so the rendered branch's fetches and pushes no longer list them.
	inventory := srv
	if os.Getenv("GITBROKER_BENCH_INVENTORY_REPO") != "" {
		inventory = gitsynctest.NewServer(b, "main", map[string]string{"README.md": "node refs\n"})
	}
	inventory.SeedBranches(refs)

	depth := gitsync.WithDepth(envInt("GITBROKER_BENCH_DEPTH", 1) - 1)
	r := newLayout(b, srv.URL(), depth).renderer(nil)
	if inventory != srv {
		r.Sources.Inventory = newLayout(b, inventory.URL(), depth).open("main")
	}
	rendered := srv.On(verify.RenderedBranch)
	bench := inventory.On(verify.InventoryBranch("node-bench"))
	ctx := context.Background()
	start := time.Now()
	if _, err := r.Once(ctx); err != nil {
		b.Fatal(err)
	}
	first := time.Since(start)
	files := len(rendered.Files())

	inv := "inventory/node-bench.yaml"
	// The first change after the first render, and the middle of the ones after it: the steady
	// state of a daemon that has seen every file.
	var took, cpu []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		// The agent of node-bench sees a new device in place of its last one.
		bench.Commit(map[string]string{inv: fmt.Sprintf("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: node-bench\nspec:\n  configurations:\n  - name: cfg-00\n    devices:\n    - id: bench-%d\n      properties:\n        ONVIF_DEVICE: bench-%d\n", i, i)}, nil, "inventory: node-bench")
		if os.Getenv("GITBROKER_BENCH_PHASES") != "" {
			t0 := time.Now()
			if _, err := r.Store.Snapshot(ctx); err != nil {
				b.Fatal(err)
			}
			b.Logf("fetch %s", time.Since(t0))
		}
		if f := os.Getenv("GITBROKER_BENCH_CPUPROFILE"); f != "" && i == 1 {
			// A profile of the steady state alone: from the second changed device on, without the
			// setup, the first render and the first re-render after it (which parses every Job the
			// first render wrote), all of which go test's -cpuprofile would cover.
			stop := startCPUProfile(b, f)
			defer stop()
		}
		b.StartTimer()
		t1, c1 := time.Now(), processCPU(b)
		out, err := r.Once(ctx)
		took, cpu = append(took, time.Since(t1)), append(cpu, processCPU(b)-c1)
		if os.Getenv("GITBROKER_BENCH_PHASES") != "" {
			b.Logf("once %s", took[len(took)-1])
		}
		if err != nil {
			b.Fatal(err)
		}
		if out.Commit == "" || len(out.Result.Errors) > 0 {
			b.Fatalf("nothing was committed, or the inputs were invalid: %v", out.Result.Errors)
		}
	}
	b.ReportMetric(first.Seconds(), "first-render-s")
	if len(took) > 1 {
		b.ReportMetric(took[0].Seconds(), "first-change-s")
		steady := slices.Clone(took[1:])
		slices.Sort(steady)
		b.ReportMetric(steady[len(steady)/2].Seconds(), "median-change-s")
		// The CPU the process used (the collector's workers included, the git server's
		// processes not): less noisy than the wall clock on a shared machine.
		steady = slices.Clone(cpu[1:])
		slices.Sort(steady)
		b.ReportMetric(steady[len(steady)/2].Seconds(), "median-change-cpu-s")
	}
	b.ReportMetric(float64(len(nodes)), "node-refs")
	b.ReportMetric(float64(files), "files")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPUProfile(b *testing.B, name string) (stop func()) {
	out, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}
}
