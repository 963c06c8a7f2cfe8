package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

// BenchmarkWriteFleet writes the rendered 10,000-device fleet (16,691 files) to an empty folder
// as `gitbroker render --dir` does, and in the same iteration copies the same tree with
// `cp -r`, the physical limit of this file system: the ratio is the one to read, since the
// time either takes changes several times over from one run to the next on a shared disk.
func BenchmarkWriteFleet(b *testing.B) {
	spec := fixtures.Fleet10k
	if n := envInt("GITBROKER_BENCH_DEVICES", 0); n > 0 {
		spec.Devices, spec.Nodes = n, n/10
	}
	res := render.Render(render.Request{Files: render.Tree(fixtures.Fleet(spec))})
	if len(res.Errors) > 0 {
		b.Fatal(res.Errors)
	}
	out := res.Files.Owned()
	base := b.TempDir()
	src := filepath.Join(base, "src")
	if err := writeAll(src, out); err != nil {
		b.Fatal(err)
	}
	var write, copy time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a, c := filepath.Join(base, "write"), filepath.Join(base, "copy")
		// Alternate which goes first, so neither always meets a file system busy with the
		// other's deletes.
		runs := []func(){
			func() {
				start := time.Now()
				if err := writeAll(a, out); err != nil {
					b.Fatal(err)
				}
				write += time.Since(start)
			},
			func() {
				start := time.Now()
				if o, err := exec.Command("cp", "-r", src, c).CombinedOutput(); err != nil {
					b.Fatalf("cp -r: %v\n%s", err, o)
				}
				copy += time.Since(start)
			},
		}
		if i%2 == 1 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, run := range runs {
			run()
		}
		b.StopTimer()
		_ = os.RemoveAll(a)
		_ = os.RemoveAll(c)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(len(out)), "files")
	b.ReportMetric(write.Seconds()/float64(b.N), "write-s")
	b.ReportMetric(copy.Seconds()/float64(b.N), "cp-r-s")
	b.ReportMetric(write.Seconds()/copy.Seconds(), "write/cp")
}

// BenchmarkRenderVsHelm compares, in each iteration, the CPU time of reading and rendering the
// 10,000-device fleet from a work tree (what `gitbroker render --dir` does before it writes)
// with that of `helm template` on fixtures/helm's chart given the same fleet as values, its
// output to /dev/null. $GITBROKER_HELM names the helm program (make bench-helm builds it); the
// benchmark is skipped without it.
func BenchmarkRenderVsHelm(b *testing.B) {
	helm := os.Getenv("GITBROKER_HELM")
	if helm == "" {
		b.Skip("GITBROKER_HELM is not set (make bench-helm)")
	}
	spec := fixtures.Fleet10k
	if n := envInt("GITBROKER_BENCH_DEVICES", 0); n > 0 {
		spec.Devices, spec.Nodes = n, n/10
	}
	repo, chart := b.TempDir(), b.TempDir()
	if err := writeAll(repo, render.Tree(fixtures.Fleet(spec))); err != nil {
		b.Fatal(err)
	}
	if err := os.CopyFS(chart, os.DirFS("../../fixtures/helm")); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chart, "values.yaml"), fixtures.FleetHelmValues(spec), 0o644); err != nil {
		b.Fatal(err)
	}
	var ours, theirs time.Duration
	var objects int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		before := cpuTime()
		tree, _, err := readTree(repo)
		if err != nil {
			b.Fatal(err)
		}
		res := render.Render(render.Request{Files: tree})
		if len(res.Errors) > 0 {
			b.Fatal(res.Errors)
		}
		ours += cpuTime() - before
		objects = 0
		for p := range res.Files.Owned() {
			if strings.HasPrefix(p, render.RenderedDir) && !strings.HasSuffix(p, "kustomization.yaml") && !strings.Contains(p, "/_namespaces/") {
				objects++
			}
		}
		cmd := exec.Command(helm, "template", "fleet", chart)
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil {
			b.Fatalf("helm template: %v\n%s", err, stderr.String())
		}
		theirs += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	b.StopTimer()
	b.ReportMetric(float64(objects), "rendered-files")
	b.ReportMetric(ours.Seconds()/float64(b.N), "gitbroker-cpu-s")
	b.ReportMetric(theirs.Seconds()/float64(b.N), "helm-cpu-s")
	b.ReportMetric(ours.Seconds()/theirs.Seconds(), "gitbroker/helm")
}

// cpuTime is the user and system time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
