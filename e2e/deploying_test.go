//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// guideBlocks is docs/DEPLOYING.md's shell blocks, in order.
func guideBlocks(t testing.TB) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/DEPLOYING.md")
	require.NoError(t, err)
	var blocks []string
	for _, b := range strings.Split(string(doc), "```sh\n")[1:] {
		block, _, ok := strings.Cut(b, "```")
		require.True(t, ok, "an unclosed shell block in DEPLOYING.md")
		blocks = append(blocks, block)
	}
	return blocks
}

// guideValue is an example value of docs/DEPLOYING.md, and what stands for it in a test.
type guideValue struct{ example, value string }

// guide runs docs/DEPLOYING.md's shell blocks as a user types them: in one shell, as the guide
// says (what a block exports and the folder it ends in carry on to the next block), as a user
// whose home folder is home, with the guide's example values replaced by the test's.
type guide struct {
	t      *testing.T
	blocks []string
	ran    []bool
	home   string
	values []guideValue
	// state is the shell's exported variables and folder after the last block.
	state string
}

func newGuide(t *testing.T, home string, values ...guideValue) *guide {
	t.Helper()
	g := &guide{t: t, blocks: guideBlocks(t), home: home, values: values, state: filepath.Join(t.TempDir(), "state")}
	g.ran = make([]bool, len(g.blocks))
	require.NoError(t, os.WriteFile(g.state, []byte("cd ~\n"), 0o600))
	return g
}

// run runs the one block that contains marker and returns what it printed.
func (g *guide) run(marker string) string {
	g.t.Helper()
	found := -1
	for i, b := range g.blocks {
		if strings.Contains(b, marker) {
			require.Equal(g.t, -1, found, "more than one of DEPLOYING.md's shell blocks holds %q", marker)
			found = i
		}
	}
	require.NotEqual(g.t, -1, found, "no shell block of DEPLOYING.md holds %q", marker)
	block := g.blocks[found]
	for _, v := range g.values {
		block = strings.ReplaceAll(block, v.example, v.value)
	}
	out, err := g.shell(block)
	require.NoError(g.t, err, "DEPLOYING.md's block failed:\n%s\n%s", block, out)
	g.t.Logf("DEPLOYING.md:\n%s%s", block, out)
	g.ran[found] = true
	return out
}

// shell runs script in the guide's shell, as the user.
func (g *guide) shell(script string) (string, error) {
	script = "set -euo pipefail\n. \"$GUIDE_STATE\"\n" + script + "{ export -p; printf 'cd %q\\n' \"$PWD\"; } >\"$GUIDE_STATE\"\n"
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = g.home
	cmd.Env = []string{
		"HOME=" + g.home, "GUIDE_STATE=" + g.state, "KUBECONFIG=" + cluster.Kubeconfig, "LANG=C.UTF-8",
		// kubectl, and the gitbroker this checkout builds.
		"PATH=" + filepath.Dir(gitbroker) + ":" + os.Getenv("GITBROKER_E2E_BIN") + ":" + os.Getenv("PATH"),
	}
	// The user's Go, as this machine has it set up (make image builds with it): its caches and
	// module proxy are outside the test's home.
	cmd.Env = append(cmd.Env, goEnv(g.t)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// goEnv is the go command's settings that live under HOME unless set, as this process has them.
func goEnv(t testing.TB) []string {
	t.Helper()
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GOFLAGS", "GOTOOLCHAIN"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	require.NoError(t, err)
	values := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, values, len(names))
	env := make([]string, len(names))
	for i, n := range names {
		env[i] = n + "=" + values[i]
	}
	return env
}

// notRun is the blocks this test did not run.
func (g *guide) notRun() []string {
	var left []string
	for i, b := range g.blocks {
		if !g.ran[i] {
			left = append(left, b)
		}
	}
	return left
}

// merged is a pull request merged after review: the people's branch main fast-forwarded to
// branch on the git server, as a host's "rebase and merge" of one signed commit does.
func merged(t *testing.T, srv *gitsynctest.Server, branch string) {
	t.Helper()
	gitsynctest.Git(t, srv.Bare(), "merge-base", "--is-ancestor", "main", branch)
	gitsynctest.Git(t, srv.Bare(), "update-ref", "refs/heads/main", "refs/heads/"+branch)
}

// TestDeployingWithFlux deploys gitbroker with Flux on the real node by docs/DEPLOYING.md's
// shell blocks, run as written (deployingAsWritten).
func TestDeployingWithFlux(t *testing.T) {
	deployingAsWritten(t, "flux")
}

// TestDeployingWithArgoCD deploys gitbroker with Argo CD on the real node by docs/DEPLOYING.md's
// shell blocks for Argo CD, run as written (deployingAsWritten): init --argocd, the renderer's
// OpenPGP key, Argo CD's webhook secret and URL, and the repo-server's key, the AppProject and
// the ApplicationSet. Argo CD's controllers and argocd-server run against the real node's
// cluster; the repo-server reads the keys of argocd-gpg-keys-cm from a folder the test keeps
// in step with the ConfigMap, as its volume would in a cluster.
func TestDeployingWithArgoCD(t *testing.T) {
	deployingAsWritten(t, "argocd")
}

// deployingAsWritten runs docs/DEPLOYING.md's shell blocks for tool (flux or argocd) as written
// from an empty cluster (the tool's controllers installed, nothing of gitbroker's) to a broker
// holding its device: gitbroker's images built from a clone of this checkout with make image
// and pushed to a registry on loopback, their pinned list pasted into deploy/ (the node pulls
// them from there); the fleet repository from `gitbroker init`, pushed to an empty repository;
// the writers' keys and their enrollment, merged as a pull request; the renderer's pinned key,
// the writers' git credentials and the notification secrets; `kubectl apply -k deploy/`; the
// node's enrollment from the key its agent made; the tool's objects; with Flux, the broker
// namespace granted by an administrator (step 6 with spec.flux.namespaces false). A person
// then merges a Configuration, a device is plugged, and its broker runs and opens it. With Argo
// CD, the writers then switch to SSH deploy keys (step 4's SSH blocks) and a second device's
// broker comes with every push over SSH. What this machine lacks for deploy/'s Pods (a Pod
// network reaching the host's loopback, cluster DNS, kube-proxy, udev) is PodNetwork's. Every
// block of the guide the test does not run is named with the test that runs it.
func deployingAsWritten(t *testing.T, tool string) {
	ctx := context.Background()
	n := startRealNode(t)
	sysRoot := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(sysRoot, "run", "udev", "data"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(sysRoot, "sys", "devices"), 0o755))
	pods, err := cluster.StartPodNetwork(ctx, realNode, sysRoot)
	require.NoError(t, err)
	t.Cleanup(pods.Stop)
	var argo *ArgoCD
	gpgKeys := t.TempDir()
	if tool == "argocd" {
		argo, err = cluster.StartArgoCD(ctx, gpgKeys)
		require.NoError(t, err)
		t.Cleanup(argo.Stop)
	}

	// The git host: two empty repositories, the fleet's and the node refs'.
	srv := gitsynctest.NewServer(t, "main", nil)
	inv := gitsynctest.NewServer(t, "main", nil)
	// The registry the images go to, on loopback: the node pulls from it over plain HTTP.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	// What the guide takes as given: a clone of gitbroker, the person's SSH key and git
	// identity, and a token per writer from the git host (this one takes any).
	home := userHome(t)
	copyCheckout(t, filepath.Join(home, "src", "gitbroker"))
	keys, fleet := filepath.Join(home, "gitbroker-keys"), filepath.Join(home, "src", "edge")

	values := []guideValue{
		{"registry.example.org/edge", strings.TrimPrefix(reg.URL, "http://") + "/edge"},
		{"https://git.example.org/plant/edge.git", srv.URL()},
		{"https://git.example.org/plant/edge-inventory.git", inv.URL()},
		{"http://webhook-receiver.flux-system.svc", cluster.ReceiverURL},
		{"edge-a", realNode},
	}
	if argo != nil {
		values = append(values, guideValue{"--flux --repo-url", "--argocd --repo-url"},
			guideValue{"https://argocd-server.argocd.svc/api/webhook", argo.WebhookURL})
	}
	if argo != nil {
		// Step 4's SSH: the same git host over SSH as well, taking the keys the user added to it.
		ssh := gitsynctest.ServeSSH(t, deployKeys(keys), map[string]*gitsynctest.Server{"plant/edge.git": srv, "plant/edge-inventory.git": inv})
		_, port, ok := strings.Cut(strings.TrimPrefix(ssh, "ssh://git@"), ":")
		require.True(t, ok, ssh)
		values = append(values, guideValue{"ssh://git@git.example.org", ssh},
			guideValue{"ssh-keyscan git.example.org", "ssh-keyscan -p " + port + " 127.0.0.1"})
	}
	g := newGuide(t, home, values...)
	// The images, built from the clone and pushed; their pinned list pasted over deploy/'s, as
	// the guide says.
	built := g.run("make image")
	_, pinned, ok := strings.Cut(built, "to run exactly these images:\n\n")
	require.True(t, ok, "make image PUSH=1 printed no images: list:\n%s", built)
	require.Contains(t, pinned, "digest: sha256:")
	kust := filepath.Join(home, "src", "gitbroker", "deploy", "kustomization.yaml")
	b, err := os.ReadFile(kust)
	require.NoError(t, err)
	before, _, ok := strings.Cut(string(b), "\nimages:\n")
	require.True(t, ok, "deploy/kustomization.yaml ends with its images: list")
	require.NoError(t, os.WriteFile(kust, []byte(before+"\n"+pinned), 0o644))
	g.run(`mkdir -p -m 700 "$KEYS"`)
	for _, w := range []string{"agent", "renderer", "recorder"} {
		require.NoError(t, os.WriteFile(filepath.Join(keys, w+"-token"), []byte("e2e-"+w+"-token\n"), 0o600))
	}
	g.run("gitbroker init --dir")
	// Removed last (the cleanups run in reverse): the broker namespace, which neither tool
	// deletes, and gitbroker-system with what deploy/ made.
	t.Cleanup(func() { _ = kubectl(home, "delete", "namespace", "plant", "--ignore-not-found", "--timeout=3m") })
	t.Cleanup(func() {
		_ = kubectl(filepath.Join(home, "src", "gitbroker"), "delete", "-k", "deploy/", "--ignore-not-found", "--timeout=3m")
	})
	g.run("kubectl apply -f deploy/namespace.yaml")           // step 2
	g.run("enroll the renderer, the recorder and the people") // step 3
	merged(t, srv, "enroll-writers")
	g.run(`--from-literal=allowed_signers="renderer`)
	if argo != nil {
		g.run("gpg --batch")
		merged(t, srv, "renderer-key")
	}
	g.run("--from-literal=username=git") // step 4
	if argo != nil {
		g.run("--from-file=argocd-webhook-secret=")
	} else {
		g.run("--from-file=flux-receiver-token=")
	}
	secret, err := os.ReadFile(filepath.Join(keys, "webhook-secret"))
	require.NoError(t, err)
	// The git host's push webhook, to the renderer's Service.
	srv.SendWebhooks(pods.Proxy+"/hook", bytes.TrimSpace(secret))
	if argo != nil {
		g.run("argocd-webhook-url: https://argocd-server")
	} else {
		g.run("flux-receiver-url: http://webhook-receiver")
	}

	// The agent made its key on the node; its public half is copied into $KEYS.
	var pub []byte
	eventually(t, 3*time.Minute, "the agent to make its key on "+realNode, func() (bool, string) {
		pub, err = n.ReadFile(ctx, "/var/lib/gitbroker/signing-key.pub")
		return err == nil && len(pub) > 0, fmt.Sprint(err)
	})
	require.NoError(t, os.WriteFile(filepath.Join(keys, realNode+"-signing-key.pub"), pub, 0o644))
	g.run("gitbroker enroll --node")
	merged(t, srv, "enroll-"+realNode)
	if argo == nil {
		// The fleet's CA as well, and the node's certificate from it, which goes back to the
		// node beside its key; the agent sends it with each signature from its next start.
		g.run("fleet-ca")
		merged(t, srv, "enroll-fleet-ca")
		cert, err := os.ReadFile(filepath.Join(keys, realNode+"-signing-key-cert.pub"))
		require.NoError(t, err)
		require.NoError(t, n.Exec(ctx, "sh", "-c", `printf '%s' "$0" >/var/lib/gitbroker/signing-key-cert.pub`, string(cert)))
		require.NoError(t, cluster.Client.CoreV1().Pods(systemNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gitbroker-agent"}))
	}

	if argo != nil {
		t.Cleanup(func() {
			// The ApplicationSet first: its Applications' finalizers delete the brokers.
			_ = kubectl(fleet, "-n", ArgoNamespace, "delete", "applicationset", "gitbroker", "--ignore-not-found", "--timeout=3m")
			_ = kubectl(fleet, "-n", ArgoNamespace, "delete", "appproject", "gitbroker", "--ignore-not-found")
		})
		g.run("argocd-gpg-keys-cm")
		// The ConfigMap's keys in the folder the repo-server reads, as its volume in a cluster.
		cm, err := cluster.Client.CoreV1().ConfigMaps(ArgoNamespace).Get(ctx, "argocd-gpg-keys-cm", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, cm.Data)
		for id, key := range cm.Data {
			require.NoError(t, os.WriteFile(filepath.Join(gpgKeys, id), []byte(key), 0o644))
		}
	} else {
		t.Cleanup(func() {
			// The root Kustomization first, while the account it prunes as exists: Flux deletes
			// the Kustomizations it applied, and they their brokers.
			_ = kubectl(fleet, "-n", FluxNamespace, "delete", "kustomization", "gitbroker", "--ignore-not-found", "--timeout=3m")
			_ = kubectl(fleet, "delete", "-k", "flux/", "--ignore-not-found", "--timeout=2m")
			_ = kubectl(fleet, "-n", FluxNamespace, "delete", "secret", "gitbroker-renderer-verify", "gitbroker-receiver", "--ignore-not-found")
		})
		g.run("kubectl apply -k flux/") // step 5
		// Step 6 the administrator's way (spec.flux.namespaces false, merged after review): the
		// broker namespace and its bindings from deploy/applier, none rendered.
		g.run("kubectl apply -n plant -f deploy/applier")
		merged(t, srv, "namespaces-by-admin")
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What gitbroker's Pods said, before their deletion removes their logs.
		list, err := cluster.Client.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Log(err)
			return
		}
		for _, p := range list.Items {
			for _, c := range p.Spec.Containers {
				t.Logf("%s %s %s:\n%s", p.Name, p.Status.Phase, c.Name, n.Logs(t, systemNamespace, p.Name, c.Name))
			}
		}
		t.Logf("fleet repository: %v\ninventory repository: %v", srv.Heads(), inv.Heads())
		for _, res := range []string{"-n=" + FluxNamespace + " gitrepositories", "-n=" + FluxNamespace + " kustomizations", "-n=" + ArgoNamespace + " applications"} {
			args := append([]string{"--kubeconfig", cluster.Kubeconfig, "get", "-o", "yaml"}, strings.Fields(res)...)
			out, _ := exec.Command(filepath.Join(os.Getenv("GITBROKER_E2E_BIN"), "kubectl"), args...).CombinedOutput()
			t.Logf("%s", out)
		}
	})

	// A person's Configuration, reviewed and merged.
	cam := strings.Replace(camConfiguration(1), "  name: cam\n", "  name: cam\n  namespace: plant\n", 1)
	require.NoError(t, os.WriteFile(filepath.Join(fleet, "configurations", "cam.yaml"), []byte(cam), 0o644))
	said, err := g.shell("cd \"$FLEET\"\ngit add configurations/cam.yaml\ngit commit -q -m \"a camera's broker\"\ngit push -q origin HEAD:cam\n")
	require.NoError(t, err, "%s", said)
	merged(t, srv, "cam")

	plugged := time.Now()
	deviceNode(t, n, sysRoot, "gitbroker-e2e0")
	// Argo CD makes a new folder's Application at the ApplicationSet's next poll: 3 minutes.
	broker := waitOpenedWithin(t, n, 7*time.Minute, "plant", api.LabelConfiguration+"=cam", "/dev/gitbroker-e2e0", "")
	t.Logf("device plugged to its broker holding it: %s", time.Since(plugged).Round(100*time.Millisecond))
	require.Contains(t, n.Logs(t, "plant", broker, "broker"), "uid=1000 gid=1000")
	if argo != nil {
		// Step 4's SSH: the writers switched from their tokens to deploy keys; from then on they
		// push over SSH alone. A second device's broker shows the loop still turns.
		g.run(`ssh-keygen -q -t ed25519 -N '' -C "gitbroker-$w"`)
		g.run("ssh-keyscan")
		for _, w := range []string{"agent", "renderer", "recorder"} {
			sec, err := cluster.Client.CoreV1().Secrets(systemNamespace).Get(ctx, "gitbroker-"+w+"-git", metav1.GetOptions{})
			require.NoError(t, err)
			require.ElementsMatch(t, []string{"identity", "known_hosts"}, slices.Collect(maps.Keys(sec.Data)), "the %s's token is gone from its Secret", w)
		}
		for _, w := range []string{"daemonset/gitbroker-agent", "deployment/gitbroker-renderer", "deployment/gitbroker-recorder"} {
			require.NoError(t, kubectl(home, "-n", systemNamespace, "rollout", "status", w, "--timeout=5m"))
		}
		eventually(t, 3*time.Minute, "the Pods with the tokens to end", func() (bool, string) {
			list, err := cluster.Client.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, p := range list.Items {
				if p.DeletionTimestamp != nil {
					return false, p.Name + " is terminating"
				}
			}
			return true, ""
		})
		overHTTP := srv.Pushes() + inv.Pushes()
		invHead := inv.On(api.InventoryPrefix + realNode).Head()
		deviceNode(t, n, sysRoot, "gitbroker-e2e1")
		waitOpenedWithin(t, n, 7*time.Minute, "plant", api.LabelConfiguration+"=cam", "/dev/gitbroker-e2e1", "")
		require.NotEqual(t, invHead, inv.On(api.InventoryPrefix+realNode).Head(), "the agent reported the second device")
		require.Equal(t, overHTTP, srv.Pushes()+inv.Pushes(), "a writer pushed over HTTP after switching to SSH")
	}
	if argo == nil {
		rendered := srv.On("gitbroker/rendered").Files()
		require.NotEmpty(t, rendered)
		for _, f := range rendered {
			require.False(t, strings.HasPrefix(f, "rendered/_namespaces/"), "spec.flux.namespaces is false, yet the renderer wrote %s", f)
		}
	}

	// Every block of the guide is run above or named here with the test that runs it; a block
	// added to the guide fails this test until it is one or the other.
	elsewhere := map[string]string{
		"sourceBranch: protected": "step 1's other trust mode: cmd/gitbroker's TestDeployingProtectedBranchRendersUnsignedMerges runs it, on a host's unsigned merge",
		"kubectl get akric":       "replacing Akri: TestMigratingFromAkri",
		"helm upgrade akri":       "replacing Akri: TestMigratingFromAkri",
		"kubectl delete akric":    "replacing Akri: TestMigratingFromAkri",
	}
	if argo != nil {
		elsewhere["fleet-ca"] = "step 4's fleet CA: TestDeployingWithFlux"
		elsewhere["--from-file=flux-receiver-token="] = "Flux's: TestDeployingWithFlux"
		elsewhere["flux-receiver-url: http://webhook-receiver"] = "Flux's: TestDeployingWithFlux"
		elsewhere["kubectl apply -k flux/"] = "Flux's: TestDeployingWithFlux"
		elsewhere["kubectl apply -n plant -f deploy/applier"] = "Flux's step 6: TestDeployingWithFlux"
	} else {
		elsewhere["ssh-keyscan"] = "step 4's SSH: TestDeployingWithArgoCD"
		elsewhere[`-C "gitbroker-$w"`] = "step 4's SSH: TestDeployingWithArgoCD"
		for _, m := range []string{"gpg --batch", "--from-file=argocd-webhook-secret=", "argocd-webhook-url: https://argocd-server", "argocd-gpg-keys-cm"} {
			elsewhere[m] = "Argo CD's: TestDeployingWithArgoCD"
		}
	}
	for _, b := range g.notRun() {
		var why []string
		for marker, reason := range elsewhere {
			if strings.Contains(b, marker) {
				why = append(why, reason)
			}
		}
		require.Len(t, why, 1, "DEPLOYING.md's block is neither run by this test nor named with the test that runs it:\n%s", b)
		t.Logf("run by %s", why[0])
	}
	for marker := range elsewhere {
		for i, b := range g.blocks {
			require.False(t, g.ran[i] && strings.Contains(b, marker), "a block named as run elsewhere (%q) ran here", marker)
		}
	}
}

// userHome is the home folder of the guide's user: an SSH key, to sign commits with, and a git
// identity.
func userHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o700))
	keygen := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@example.com", "-f", filepath.Join(home, ".ssh", "id_ed25519"))
	out, err := keygen.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[user]\n\tname = Alice\n\temail = alice@example.com\n"), 0o644))
	return home
}

// copyCheckout copies this checkout to dst as a user's clone of it: the files git knows of
// (committed or not, but not those it ignores, such as bin/) and .git.
func copyCheckout(t *testing.T, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	require.NoError(t, err)
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src, to := filepath.Join("..", f), filepath.Join(dst, f)
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in this checkout, not yet committed
		}
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			require.NoError(t, err)
			require.NoError(t, os.Symlink(target, to))
			continue
		}
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(to, b, fi.Mode().Perm()))
	}
	cp := exec.Command("cp", "-a", "../.git", filepath.Join(dst, ".git"))
	out, err = cp.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// deployKeys accepts the keys the guide's user added to the git host: those of
// $KEYS/<writer>-deploy-key.pub.
func deployKeys(keys string) func(authorizedKey string) bool {
	return func(key string) bool {
		pubs, _ := filepath.Glob(filepath.Join(keys, "*-deploy-key.pub"))
		for _, p := range pubs {
			b, err := os.ReadFile(p)
			f := strings.Fields(string(b))
			if err == nil && len(f) >= 2 && f[0]+" "+f[1] == strings.TrimSpace(key) {
				return true
			}
		}
		return false
	}
}

// tagDeployImages names the node's gitbroker images as deploy/kustomization.yaml's images:
// list does, as if the node had pulled what a user pushed.
func tagDeployImages(t *testing.T, n *Node) {
	t.Helper()
	b, err := os.ReadFile("../deploy/kustomization.yaml")
	require.NoError(t, err)
	var k struct {
		Images []struct{ Name, NewName, NewTag string }
	}
	require.NoError(t, yaml.Unmarshal(b, &k))
	built := map[string]string{"gitbroker": gitbrokerImage, "gitbroker-agent": agentImage}
	require.Len(t, k.Images, len(built))
	for _, img := range k.Images {
		require.Contains(t, built, img.Name)
		require.NoError(t, n.ctr(context.Background(), "images", "tag", "--force", built[img.Name], img.NewName+":"+img.NewTag))
	}
}
