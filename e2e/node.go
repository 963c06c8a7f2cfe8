//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The real node's fixed names: its Pod bridge (host-only: no address, no gateway, no route, so
// nothing a Pod listens on is reachable from outside the machine) and its images' registry name,
// which no registry answers: every image is imported.
const (
	nodeBridge   = "gbe2e0"
	nodeSubnet   = "10.254.66.0/24"
	nodeRegistry = "gitbroker.test"
	pauseImage   = nodeRegistry + "/pause:e2e"
)

// Node is a real Kubernetes node: containerd (with Debian's runc) and kubelet, built from Go
// modules, running Pods from images imported with no registry. It runs in a mount namespace of
// its own, so what a node writes to its well-known host paths (/var/lib/kubelet, /var/lib/akri,
// /run, /var/log) and the device nodes a test creates in its /dev stay in the test's folder:
// /dev there is a tmpfs holding the host's standard nodes, bound, and the test's own.
type Node struct {
	Name string
	// Dir holds the node's state; Sock holds its sockets (short paths).
	Dir, Sock string

	bin         string
	containerd  *process
	kubelet     *process
	kubeletArgs []string
	restarts    int
	cluster     *Cluster
}

// StartNode starts containerd and kubelet for node name, imports the images in the OCI archives
// tars, and waits until the node is Ready.
func StartNode(ctx context.Context, c *Cluster, bin, name string, tars []string) (_ *Node, err error) {
	dir := filepath.Join(c.Dir, "node-"+name)
	sock, err := os.MkdirTemp("", "gbnode")
	if err != nil {
		return nil, err
	}
	n := &Node{Name: name, Dir: dir, Sock: sock, bin: bin, cluster: c}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := n.writeConfigs(); err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "enter.sh")
	if err := os.WriteFile(script, []byte(nodeNamespaceScript), 0o755); err != nil {
		return nil, err
	}
	// unshare makes the mount namespace; the script fills it and becomes containerd.
	if n.containerd, err = startProcess(c.LogDir, "node-"+name+"-containerd", "unshare",
		[]string{"--mount", "--propagation", "private", "bash", script},
		[]string{"NODE_DIR=" + dir, "NODE_BIN=" + bin, "NODE_CONFIG=" + filepath.Join(dir, "containerd.toml")}); err != nil {
		return nil, err
	}
	if err := waitFile(ctx, n.containerd, filepath.Join(sock, "containerd.sock"), time.Minute); err != nil {
		return nil, err
	}
	for _, tar := range tars {
		if err := n.ctr(ctx, "images", "import", "--local", "--snapshotter", "native", "--platform", "linux/amd64", tar); err != nil {
			return nil, err
		}
	}
	kubeletPort, err := freePort()
	if err != nil {
		return nil, err
	}
	healthPort, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(n.kubeletConfig(kubeletPort, healthPort)), 0o644); err != nil {
		return nil, err
	}
	pid := strconv.Itoa(n.containerd.cmd.Process.Pid)
	n.kubeletArgs = []string{"--target", pid, "--mount", "--",
		filepath.Join(bin, "kubelet"),
		"--config=" + filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig=" + c.Kubeconfig,
		"--hostname-override=" + name,
		"--v=2",
	}
	if n.kubelet, err = startProcess(c.LogDir, "node-"+name+"-kubelet", "nsenter", n.kubeletArgs, nil); err != nil {
		return nil, err
	}
	return n, n.waitReady(ctx)
}

// RestartKubelet stops kubelet and starts it again, as an upgrade or a crash does; containers
// keep running. kubelet removes every device plugin's socket when it starts.
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.StopKubelet()
	return n.StartKubelet(ctx)
}

// StopKubelet stops kubelet, as a crash or a lost network does: containers keep running, and
// the node stops posting its status, so the node controller marks it NotReady once its monitor
// grace has passed.
func (n *Node) StopKubelet() {
	n.kubelet.Stop(20 * time.Second)
}

// StartKubelet starts the stopped kubelet again and waits for the node to be Ready.
func (n *Node) StartKubelet(ctx context.Context) error {
	n.restarts++
	var err error
	if n.kubelet, err = startProcess(n.cluster.LogDir, fmt.Sprintf("node-%s-kubelet-%d", n.Name, n.restarts), "nsenter", n.kubeletArgs, nil); err != nil {
		return err
	}
	return n.waitReady(ctx)
}

// nodeNamespaceScript runs in the node's new mount namespace: it gives the node a /dev of its
// own (a tmpfs with the host's standard nodes bound in), tmpfs over the host paths a node writes,
// and then runs containerd.
const nodeNamespaceScript = `set -euo pipefail
mount --make-rprivate /
dev=$NODE_DIR/dev
mkdir -p "$dev"
mount -t tmpfs -o mode=0755,nosuid tmpfs "$dev"
for d in null zero full random urandom tty kmsg ptmx; do
	if [ -e /dev/$d ]; then touch "$dev/$d"; mount --bind /dev/$d "$dev/$d"; fi
done
mkdir "$dev/pts" "$dev/shm"
mount --bind /dev/pts "$dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$dev/shm"
ln -s /proc/self/fd "$dev/fd"
ln -s /proc/self/fd/0 "$dev/stdin"; ln -s /proc/self/fd/1 "$dev/stdout"; ln -s /proc/self/fd/2 "$dev/stderr"
mount --rbind "$dev" /dev
for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=0755 tmpfs $d; done
mkdir -p /var/lib/kubelet /var/lib/akri /var/lib/gitbroker
exec "$NODE_BIN/containerd" --config "$NODE_CONFIG"
`

func (n *Node) writeConfigs() error {
	containerd := `version = 3
root = "` + filepath.Join(n.Dir, "containerd", "root") + `"
state = "` + filepath.Join(n.Dir, "containerd", "state") + `"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "` + filepath.Join(n.Sock, "containerd.sock") + `"
[ttrpc]
  address = "` + filepath.Join(n.Sock, "containerd.sock.ttrpc") + `"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "` + pauseImage + `"

# What the node pulls from a registry (docs/DEPLOYING.md's images, pushed to one on loopback)
# unpacks into the snapshotter imports use: the transfer service's default, overlayfs, is not
# this node's.
[plugins."io.containerd.transfer.v1.local"]
  [[plugins."io.containerd.transfer.v1.local".unpack_config]]
    platform = "linux/amd64"
    snapshotter = "native"
    differ = "walking"

[plugins."io.containerd.cri.v1.runtime"]
  # This machine withholds CAP_SYS_RESOURCE, so no process may lower its oom_score_adj (the
  # sandbox's -998 is refused): containers start at containerd's own instead.
  restrict_oom_score_adj = true
  # Where the agent's DRA plugin writes a CDI spec per prepared claim (containerd's default).
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["` + n.bin + `"]
    conf_dir = "` + filepath.Join(n.Dir, "cni", "net.d") + `"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`
	if err := os.WriteFile(filepath.Join(n.Dir, "containerd.toml"), []byte(containerd), 0o644); err != nil {
		return err
	}
	cni := `{
  "cniVersion": "1.0.0",
  "name": "gitbroker-e2e",
  "plugins": [{
    "type": "bridge",
    "bridge": "` + nodeBridge + `",
    "isGateway": false,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + nodeSubnet + `"}]], "dataDir": "` + filepath.Join(n.Dir, "cni", "ipam") + `"}
  }]
}
`
	return os.WriteFile(filepath.Join(n.Dir, "cni", "net.d", "10-gitbroker-e2e.conflist"), []byte(cni), 0o644)
}

// nodeStatusEvery is how often the real node's kubelet posts its node status
// (nodeStatusUpdateFrequency; kubelet's default is 10s): a new device's akri.sh resource reaches
// the scheduler only then, the one wait of a plugged device's broker gitbroker cannot shorten
// (Akri's brokers wait for it too).
const nodeStatusEvery = 5 * time.Second

// kubeletConfig keeps every listener on loopback, the cgroup v1 host allowed, image garbage
// collection off (imported images cannot be pulled again), and evictions only for real pressure.
func (n *Node) kubeletConfig(port, healthPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
resolvConf: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: `+nodeStatusEvery.String()+`
`, port, healthPort, filepath.Join(n.Sock, "containerd.sock"), filepath.Join(n.Dir, "pod-logs"))
}

// ctr runs containerd's client against the node.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, "ctr"), append([]string{"--address", filepath.Join(n.Sock, "containerd.sock"), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Exec runs a command in the node's mount namespace: what the node sees at a path.
func (n *Node) Exec(ctx context.Context, name string, args ...string) error {
	pid := strconv.Itoa(n.containerd.cmd.Process.Pid)
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--target", pid, "--mount", "--", name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s on node %s: %v: %s", name, strings.Join(args, " "), n.Name, err, out)
	}
	return nil
}

// ReadFile is the file at path as the node sees it.
func (n *Node) ReadFile(ctx context.Context, path string) ([]byte, error) {
	pid := strconv.Itoa(n.containerd.cmd.Process.Pid)
	out, err := exec.CommandContext(ctx, "nsenter", "--target", pid, "--mount", "--", "cat", path).Output()
	if err != nil {
		return nil, fmt.Errorf("reading %s on node %s: %w", path, n.Name, err)
	}
	return out, nil
}

// Mknod makes a character device node at path in the node's /dev, owned by root and group gid
// with mode (as udev makes /dev/video0 root:video 0660), a copy of the host's major:minor.
func (n *Node) Mknod(ctx context.Context, path string, major, minor int, mode os.FileMode, gid int) error {
	if err := n.Exec(ctx, "mknod", "-m", fmt.Sprintf("%o", mode.Perm()), path, "c", strconv.Itoa(major), strconv.Itoa(minor)); err != nil {
		return err
	}
	return n.Exec(ctx, "chown", "0:"+strconv.Itoa(gid), path)
}

func (n *Node) waitReady(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range []*process{n.containerd, n.kubelet} {
			if done, err := p.Exited(); done {
				return false, fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.Log)
			}
		}
		node, err := n.cluster.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// Stop stops kubelet, every container of the node and containerd, and removes the node's bridge
// and the node object. The mount namespace ends with its last process.
func (n *Node) Stop() {
	if n.kubelet != nil {
		n.kubelet.Stop(20 * time.Second)
	}
	// Containers outlive kubelet and containerd (their shims are daemons): end them all, and
	// remove the node's cgroups from every hierarchy.
	killCgroup("/sys/fs/cgroup/pids/kubepods")
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	for _, h := range hierarchies {
		killCgroup(h)
	}
	if n.containerd != nil {
		killShims(filepath.Join(n.Sock, "containerd.sock"))
		n.containerd.Stop(20 * time.Second)
	}
	_ = exec.Command("ip", "link", "delete", nodeBridge).Run()
	if n.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = n.cluster.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
		cancel()
	}
	_ = os.RemoveAll(n.Sock)
}

// killCgroup kills every process in a cgroup v1 hierarchy's subtree, and removes its cgroups.
func killCgroup(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for _, d := range dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}

// killShims kills the runc shims this node's containerd started: they hold its address.
func killShims(address string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "containerd-shim") || !strings.Contains(string(b), address) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// waitFile waits for path to exist while p runs.
func waitFile(ctx context.Context, p *process, path string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.Log)
		}
		_, err := os.Stat(path)
		return err == nil, nil
	})
}
