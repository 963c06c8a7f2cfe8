package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
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
	for p, content := range fixtures.Fleet(spec) {
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

	repo, err := gitsync.New(srv.URL(), "main", gitsync.WithDepth(envInt("GITBROKER_BENCH_DEPTH", 1)-1))
	if err != nil {
		b.Fatal(err)
	}
	r := &remoteRender{store: repo, branch: "main", renderer: render.New(),
		author: gitsync.Signature{Name: "bench", Email: "bench@example.com"}, now: time.Now}
	ctx := context.Background()
	start := time.Now()
	if _, err := r.once(ctx); err != nil {
		b.Fatal(err)
	}
	first := time.Since(start)
	files := len(srv.Files())

	inv := "inventory/node-bench.yaml"
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		// The agent of node-bench sees a new device in place of its last one.
		srv.Commit(map[string]string{inv: fmt.Sprintf("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: node-bench\nspec:\n  configurations:\n  - name: cfg-00\n    devices:\n    - id: bench-%d\n      properties:\n        DEVICE: bench-%d\n", i, i)}, nil, "inventory: node-bench")
		if os.Getenv("GITBROKER_BENCH_PHASES") != "" {
			t0 := time.Now()
			if _, err := repo.Snapshot(ctx); err != nil {
				b.Fatal(err)
			}
			b.Logf("fetch %s", time.Since(t0))
		}
		b.StartTimer()
		t1 := time.Now()
		out, err := r.once(ctx)
		if os.Getenv("GITBROKER_BENCH_PHASES") != "" {
			b.Logf("once %s", time.Since(t1))
		}
		if err != nil {
			b.Fatal(err)
		}
		if out.Commit == "" || len(out.Result.Errors) > 0 {
			b.Fatalf("nothing was committed, or the inputs were invalid: %v", out.Result.Errors)
		}
	}
	b.ReportMetric(first.Seconds(), "first-render-s")
	b.ReportMetric(float64(files), "files")
}
