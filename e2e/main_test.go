//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The suite's shared state: one cluster for every test, and the gitbroker
// binary built from this tree.
var (
	cluster   *Cluster
	gitbroker string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin := os.Getenv("GITBROKER_E2E_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "e2e: GITBROKER_E2E_BIN is not set; run `make e2e`, which builds the cluster's programs and sets it")
		return 2
	}
	workDir := os.Getenv("GITBROKER_E2E_DIR")
	var err error
	if workDir != "" {
		err = os.MkdirAll(workDir, 0o755)
	} else {
		workDir, err = os.MkdirTemp("", "gitbroker-e2e-")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	keep := os.Getenv("GITBROKER_E2E_KEEP") != ""
	code := 1
	defer func() {
		if code != 0 || keep {
			fmt.Fprintf(os.Stderr, "e2e: every component's log is in %s/logs (the cluster's state is in %s)\n", workDir, workDir)
			return
		}
		_ = os.RemoveAll(workDir)
	}()

	gitbroker = filepath.Join(workDir, "gitbroker")
	build := exec.Command("go", "build", "-o", gitbroker, "../cmd/gitbroker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building gitbroker:", err)
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	start := time.Now()
	cluster, err = StartCluster(ctx, bin, workDir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the cluster:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: cluster up in %s: API server %s, logs in %s\n", time.Since(start).Round(time.Second), cluster.Config.Host, cluster.LogDir)
	defer cluster.Stop()
	code = m.Run()
	return code
}
