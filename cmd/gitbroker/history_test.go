package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/fixtures"
)

// A retired Job's record, with what its Pod said, is what history shows and what the plan names.
func TestHistory(t *testing.T) {
	tree, err := readFS(fixtures.Demo())
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, writeAll(dir, tree))
	const source = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
	code, _, stderr := gitbroker(t, "render", "--dir", dir, "--source-commit", source)
	require.Equal(t, exitOK, code, stderr)
	job := "plc-firmware-84beef-083a2d022a-job"
	record := `apiVersion: gitbroker.dev/v1alpha1
kind: JobRecord
metadata:
  name: ` + job + `
  namespace: plant
spec:
  configuration: plc-firmware
  instance: plc-firmware-84beef
  deviceID: plc-1
  outcome: Failed
  startTime: "2026-03-02T10:00:00Z"
  completionTime: "2026-03-02T10:04:00Z"
  succeeded: 0
  failed: 1
  reason: BackoffLimitExceeded
  message: Job has reached the specified backoff limit
  pods:
  - name: ` + job + `-x7k2p
    node: edge-a
    phase: Failed
    containers:
    - name: flash
      exitCode: 1
      reason: Error
      log: "erasing\nwriting 4096 bytes\n\e]0;pwned\a\e[31mchecksum mismatch\e[0m\nline 4\nline 5\nline 6\n"
      logTruncated: true
`
	p := filepath.Join(dir, "status", "jobs", "plant", job+".yaml")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(record), 0o644))

	// Recorded, not retired yet: history shows it from status/.
	code, out, stderr := gitbroker(t, "history", "--dir", dir, "--device", "plc-1", "--lines", "3")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "record status/jobs/plant/"+job+".yaml")
	require.Contains(t, out, "  image busybox:1.36\n", "read from the Job in rendered/")

	code, plan, stderr := gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	hist := "history/jobs/plant/plc-firmware/plc-firmware-84beef/" + job + ".yaml"
	require.Contains(t, plan, "recorded Failed on edge-a (flash exit 1); moved to "+hist, "the plan says where the run went and how it ended")

	code, out, stderr = gitbroker(t, "history", "--dir", dir, "--device", "plc-1", "--lines", "3")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, `plant/`+job+`  Failed  started 2026-03-02T10:00:00Z, finished 2026-03-02T10:04:00Z, took 4m0s
  configuration plc-firmware, instance plc-firmware-84beef, device plc-1
  record `+hist+`
  image busybox:1.36
  properties DEBUG_ECHO_DESCRIPTION=plc-1 FIRMWARE_VERSION=4.2.0
  rendered from `+source+`
  BackoffLimitExceeded: Job has reached the specified backoff limit
  pod `+job+`-x7k2p on edge-a (Failed)
    flash: exit 1, Error
      (earlier output was not kept)
      | erasing
      | writing 4096 bytes
      | \x1b]0;pwned\a\x1b[31mchecksum mismatch\x1b[0m
      | … 3 more lines in the record
`, out, "the log's escape sequences are shown, not acted on")

	for _, filter := range [][]string{{"--node", "edge-b"}, {"--outcome", "Succeeded"}, {"--since", "2026-03-02T10:05:00Z"}} {
		code, out, _ = gitbroker(t, append([]string{"history", "--dir", dir}, filter...)...)
		require.Equal(t, exitOK, code)
		require.Equal(t, "No finished runs.\n", out, filter)
	}
	for _, filter := range [][]string{{"--outcome", "Failed"}, {"--since", "2026-03-02"}, {"--since", "87600h"}} {
		code, out, _ = gitbroker(t, append([]string{"history", "--dir", dir}, filter...)...)
		require.Equal(t, exitOK, code)
		require.Contains(t, out, job, filter)
	}
	code, _, stderr = gitbroker(t, "history", "--dir", dir, "--outcome", "failed!")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--outcome must be Succeeded or Failed")

	code, out, stderr = gitbroker(t, "history", "--dir", dir, "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	var runs []struct {
		Path         string            `json:"path"`
		Images       []string          `json:"images"`
		Properties   map[string]string `json:"properties"`
		SourceCommit string            `json:"sourceCommit"`
		Manifest     struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"manifest"`
		Record struct {
			Spec struct {
				Pods []struct {
					Containers []struct {
						Log string `json:"log"`
					} `json:"containers"`
				} `json:"pods"`
			} `json:"spec"`
		} `json:"record"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 1)
	require.Equal(t, hist, runs[0].Path)
	require.Equal(t, []string{"busybox:1.36"}, runs[0].Images)
	require.Equal(t, "4.2.0", runs[0].Properties["FIRMWARE_VERSION"])
	require.Equal(t, source, runs[0].SourceCommit)
	require.Equal(t, job, runs[0].Manifest.Metadata.Name, "the Job that ran")
	require.True(t, strings.HasSuffix(runs[0].Record.Spec.Pods[0].Containers[0].Log, "line 6\n"), "JSON holds the whole tail")
}
