package gitsync_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// largeRepo starts a server whose branch holds n files in 100 folders,
// written with the git command line (fast for a seed this size).
func largeRepo(b *testing.B, n int) *gitsynctest.Server {
	b.Helper()
	srv := gitsynctest.NewServer(b, "main", nil)
	work := b.TempDir()
	gitsynctest.Git(b, "", "init", "--quiet", "--initial-branch=main", work)
	for i := 0; i < n; i++ {
		dir := filepath.Join(work, "rendered", fmt.Sprintf("ns-%02d", i%100), fmt.Sprintf("cfg-%02d", (i/100)%10))
		if i < 1000 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		content := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: pod-%d\n", i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("pod-%d.yaml", i)), []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	gitsynctest.Git(b, work, "add", "-A")
	gitsynctest.Git(b, work, "-c", "user.name=seed", "-c", "user.email=seed@example.com", "commit", "--quiet", "-m", "seed")
	gitsynctest.Git(b, work, "push", "--quiet", "file://"+srv.Bare(), "HEAD:refs/heads/main")
	return srv
}

// BenchmarkUpdateOneFileIn50k measures one writer changing one file on a
// branch that holds 50,000: fetch the new head, build the commit, push it.
// The clone before the loop is reported as clone-s.
func BenchmarkUpdateOneFileIn50k(b *testing.B) {
	srv := largeRepo(b, 50_000)
	r, err := gitsync.New(srv.URL(), "main")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	if _, err := r.Snapshot(ctx); err != nil {
		b.Fatal(err)
	}
	clone := time.Since(start)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		_, err := r.Update(ctx, write([]string{"inventory/edge-a.yaml"}, map[string]string{
			"inventory/edge-a.yaml": fmt.Sprintf("generation: %d\n", i),
		}))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(clone.Seconds(), "clone-s")
}
