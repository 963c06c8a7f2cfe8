package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// check, plan and render refuse a folder that is not a gitbroker repository, so a CI job run
// from the wrong directory fails.
func TestNotARepository(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644))
	for _, cmd := range []string{"check", "plan", "render"} {
		code, _, stderr := gitbroker(t, cmd, "--dir", dir)
		require.Equal(t, exitInvalid, code, cmd)
		require.Contains(t, stderr, "is not a gitbroker repository", cmd)
	}
	_, err := os.Stat(filepath.Join(dir, "rendered"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
}

// A symbolic link or a FIFO among the Configurations is one invalid input: its Configurations
// keep their output, everything else renders, and the render never follows or blocks on it.
func TestSymlinkAndFIFOAreInvalidInputs(t *testing.T) {
	dir := demoRepo(t)
	before := owned(t, dir)
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("password: hunter2\n"), 0o600))
	echo := filepath.Join(dir, "configurations", "akri-debug-echo.yaml")
	require.NoError(t, os.Remove(echo))
	require.NoError(t, os.Symlink(secret, echo))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "configurations", "zz-pipe.yaml"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "status", "jobs", "plant"), 0o755))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "status", "jobs", "plant", "x-job.yaml")))
	// And a change elsewhere that must still render: a new PLC on edge-a.
	inv := filepath.Join(dir, "inventory", "edge-a.yaml")
	invData, err := os.ReadFile(inv)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(inv, append(invData, []byte("    - id: plc-7\n      properties:\n        DEBUG_ECHO_DESCRIPTION: plc-7\n")...), 0o644))

	code, stdout, stderr := gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stdout, "configurations/akri-debug-echo.yaml: a symbolic link; inputs must be regular files")
	require.Contains(t, stdout, "configurations/zz-pipe.yaml: a named pipe (FIFO)")
	require.Contains(t, stdout, "status/jobs/plant/x-job.yaml: a symbolic link")
	require.NotContains(t, stdout+stderr, "hunter2")
	after := owned(t, dir)
	for p, b := range before {
		if strings.HasPrefix(p, "rendered/default/akri-debug-echo/") {
			require.Equal(t, string(b), string(after[p]), "%s kept as it was", p)
		}
	}
	var added []string
	for p := range after {
		if _, ok := before[p]; !ok {
			added = append(added, p)
		}
	}
	require.Condition(t, func() bool {
		for _, p := range added {
			if strings.HasPrefix(p, "rendered/plant/plc-firmware/job-plc-firmware-") {
				return true
			}
		}
		return false
	}, "the new PLC's Job rendered: %v", added)
}

// Flags that only a render against a remote reads are refused by a work-tree render instead of
// being ignored.
func TestWorkTreeRenderRefusesRemoteFlags(t *testing.T) {
	dir := demoRepo(t)
	for _, args := range [][]string{
		{"--review-branch"}, {"--branch", "prod"}, {"--interval", "5s"}, {"--rendered-branch", "rendered"},
		{"--signing-key", "k"}, {"--pr-description", "-"},
	} {
		code, _, stderr := gitbroker(t, append([]string{"render", "--dir", dir}, args...)...)
		require.Equal(t, exitInvalid, code, "%v", args)
		require.Contains(t, stderr, args[0]+": only for a render against a remote (--git)", "%v", args)
	}
	code, _, stderr := gitbroker(t, "render", "--dir", dir, "--allow-deletions", "--source-commit", "0123456789012345678901234567890123456789")
	require.NotEqual(t, exitInvalid, code, stderr)
}

func TestVersion(t *testing.T) {
	code, stdout, _ := gitbroker(t, "version")
	require.Equal(t, exitOK, code)
	require.Regexp(t, `^gitbroker \S+\ncommit \S+.*\ngo1\.\S+ \w+/\w+\n$`, stdout)
	code, stdout, _ = gitbroker(t, "--version")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "gitbroker version ")
	for _, f := range []string{"json", "yaml"} {
		code, stdout, _ = gitbroker(t, "version", "-o", f)
		require.Equal(t, exitOK, code, f)
		var info map[string]string
		require.NoError(t, yaml.Unmarshal([]byte(stdout), &info), f)
		require.Regexp(t, `^go1\.`, info["goVersion"], f)
		require.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, info["platform"], f)
		require.NotEmpty(t, info["version"], f)
		require.NotEmpty(t, info["commit"], f)
	}
	code, _, stderr := gitbroker(t, "version", "-o", "xml")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--output must be text, json or yaml")

	// make build stamps both.
	bin := filepath.Join(t.TempDir(), "gitbroker")
	out, err := exec.Command("go", "build", "-ldflags", "-X github.com/gitbroker/gitbroker/cmd/internal/cli.version=v9.8.7 -X github.com/gitbroker/gitbroker/cmd/internal/cli.commit=0123abc", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command(bin, "version").Output()
	require.NoError(t, err)
	require.Regexp(t, `^gitbroker v9\.8\.7\ncommit 0123abc\n`, string(out))
}

// A link planted where the render writes a file (an output file that changes, or a new one) is
// refused as it is read: the render writes nothing, and never through the link.
func TestRenderNeverWritesThroughALink(t *testing.T) {
	dir := demoRepo(t)
	before := owned(t, dir)
	var existing string
	for p := range before {
		if strings.HasPrefix(p, "rendered/default/akri-debug-echo/") && strings.Contains(p, "/deployment-") {
			existing = p
		}
	}
	require.NotEmpty(t, existing)
	// A new device, whose new Job file is found by rendering a copy first.
	inv := filepath.Join(dir, "inventory", "edge-a.yaml")
	invData, err := os.ReadFile(inv)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(inv, append(invData, []byte("    - id: plc-8\n      properties:\n        DEBUG_ECHO_DESCRIPTION: plc-8\n")...), 0o644))
	scratch := t.TempDir()
	require.NoError(t, os.CopyFS(scratch, os.DirFS(dir)))
	code, _, stderr := gitbroker(t, "render", "--dir", scratch)
	require.Equal(t, exitOK, code, stderr)
	var fresh string
	for p := range owned(t, scratch) {
		if _, ok := before[p]; !ok && strings.HasPrefix(p, "rendered/plant/plc-firmware/job-") {
			fresh = p
		}
	}
	require.NotEmpty(t, fresh, "the new device renders a new file")

	target := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(target, []byte("untouched\n"), 0o600))
	require.NoError(t, os.Remove(filepath.Join(dir, existing)))
	for _, p := range []string{existing, fresh} {
		require.NoError(t, os.Symlink(target, filepath.Join(dir, p)))
	}
	code, _, stderr = gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stderr, "a symbolic link; rendered/ and history/ hold only regular files")
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "untouched\n", string(got), "nothing written through a link")
	for _, p := range []string{existing, fresh} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		require.NoError(t, err)
		require.Equal(t, os.ModeSymlink, fi.Mode().Type(), "%s left as it was", p)
	}
}

// writeFile creates a new file in place, replaces an existing one whole, and replaces a link
// put in its way (a race with the read's check), or at the temporary name it writes through,
// instead of writing through it.
func TestWriteFileNeverFollowsALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(target, []byte("untouched\n"), 0o600))
	link, plain, fresh := filepath.Join(dir, "link.yaml"), filepath.Join(dir, "plain.yaml"), filepath.Join(dir, "new.yaml")
	require.NoError(t, os.Symlink(target, link))
	require.NoError(t, os.WriteFile(plain, []byte("old\n"), 0o644))
	// A link at the temporary name the replacement of plain.yaml goes through.
	require.NoError(t, os.Symlink(target, filepath.Join(dir, ".gitbroker-tmp-plain.yaml")))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	for _, f := range []string{link, plain, fresh} {
		require.NoError(t, writeFile(root, filepath.Base(f), []byte("rendered\n")))
		fi, err := os.Lstat(f)
		require.NoError(t, err)
		require.True(t, fi.Mode().IsRegular(), f)
		got, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Equal(t, "rendered\n", string(got))
	}
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "untouched\n", string(got))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "no temporary file left")
}
