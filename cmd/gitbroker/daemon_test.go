package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// daemon is a gitbroker daemon running as a process of the built binary.
type daemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan error
	// From the daemon's start log line.
	MetricsAddr string `json:"metricsAddr"`
	HealthAddr  string `json:"healthAddr"`
	Node        string `json:"node"`
	WebhookAddr string `json:"webhookAddr"`
}

// startDaemon runs gitbroker with args and waits for the log line whose
// msg is started, which carries the endpoints' addresses. The process is
// killed when the test ends; its stderr is shown if the test failed.
func startDaemon(t *testing.T, started string, args ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, cmd: exec.Command(binary(t), args...), stderr: &syncBuffer{}, exited: make(chan error, 1)}
	d.cmd.Stderr = d.stderr
	require.NoError(t, d.cmd.Start())
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		<-d.exited
		if t.Failed() {
			t.Logf("%s stderr:\n%s", args[0], d.stderr.String())
		}
	})
	require.Eventually(t, func() bool {
		sc := bufio.NewScanner(strings.NewReader(d.stderr.String()))
		for sc.Scan() {
			var line struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == started {
				return json.Unmarshal(sc.Bytes(), d) == nil
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "waiting for %q", started)
	return d
}

// get fetches a path from one of the daemon's endpoints.
func (d *daemon) get(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends SIGTERM and requires a clean exit with the stopped log line.
func (d *daemon) stop(stopped string) {
	d.t.Helper()
	require.NoError(d.t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-d.exited:
		require.NoError(d.t, err, "exit after SIGTERM")
		d.exited <- nil
	case <-time.After(30 * time.Second):
		d.t.Fatal("the daemon did not stop on SIGTERM")
	}
	require.Contains(d.t, d.stderr.String(), `"msg":"`+stopped+`"`)
}
