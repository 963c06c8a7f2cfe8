//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a program the suite started, with its output in a log file.
type process struct {
	Name string
	Log  string
	// Metrics is the address of a Flux controller's metrics endpoint, which also serves
	// /debug/pprof/.
	Metrics string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// startProcess runs bin with args and env (added to the suite's own),
// writing its stdout and stderr to logDir/<name>.log. The process is killed
// if the suite's process dies first, so nothing outlives a crashed run.
func startProcess(logDir, name, bin string, args, env []string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(f, "+ %s %q\n", bin, args)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended, and its exit error.
func (p *process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop asks the process to end with SIGTERM and kills it after grace.
func (p *process) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freePort finds a free TCP port on loopback, never one it gave before. Another program could
// take it before it is used; on this single-user machine that does not happen.
func freePort() (int, error) {
	givenPorts.Lock()
	defer givenPorts.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// A port given out is not given again: the process it went to may bind it only later
		// (source-controller's artifact server binds after it reports ready), and the kernel
		// would hand the free port to the next caller, a second cluster's etcd, say.
		if !givenPorts.m[port] {
			givenPorts.m[port] = true
			return port, nil
		}
	}
}

// givenPorts are the ports freePort gave out.
var givenPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// addr is 127.0.0.1:port.
func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// CPU is the CPU time (user and system) the process has used so far, from /proc.
func (p *process) CPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc stat: %q", s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat: %q", s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc stat: %q", s)
	}
	// Linux reports clock ticks, USER_HZ, which is 100 on every architecture Go supports.
	return time.Duration(utime+stime) * (time.Second / 100), nil
}
