//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/blake2b"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

var (
	gitRepositoryGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	kustomizationGVR = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
)

// eventually polls cond every 250ms until it holds or timeout passes, then
// fails with what cond last said and where the logs are.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if err := cluster.checkAlive(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s\n(component logs: %s)", timeout, what, last, cluster.LogDir)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// instance is Akri's instance name of an unshared device seen by node.
func instance(configuration, deviceID, node string) string {
	h, _ := blake2b.New(3, nil)
	h.Write([]byte(deviceID + node))
	return configuration + "-" + hex.EncodeToString(h.Sum(nil))
}

// build runs kustomize over a folder of this repository.
func build(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	data, err := m.AsYaml()
	require.NoError(t, err)
	objs, err := Objects(data)
	require.NoError(t, err)
	return objs
}

// gbProcess is a gitbroker daemon started by a test.
type gbProcess struct {
	*process
	MetricsAddr string // from its started log line
	WebhookAddr string // the renderer's push notification endpoint, when it serves one
}

// startGitbroker runs the gitbroker binary with args, logging to the
// cluster's log folder as name, and waits for its started log line. It is
// stopped with SIGTERM when the test ends.
func startGitbroker(t testing.TB, name, started string, args ...string) *gbProcess {
	t.Helper()
	return startGitbrokerEnv(t, name, started, nil, args...)
}

// startGitbrokerEnv is startGitbroker with more environment (KEY=value).
func startGitbrokerEnv(t testing.TB, name, started string, env []string, args ...string) *gbProcess {
	t.Helper()
	p, err := startProcess(cluster.LogDir, name, gitbroker, args, env)
	require.NoError(t, err)
	g := &gbProcess{process: p}
	t.Cleanup(func() { p.Stop(30 * time.Second) })
	eventually(t, time.Minute, name+" to start", func() (bool, string) {
		if done, err := p.Exited(); done {
			t.Fatalf("%s exited: %v; see %s", name, err, p.Log)
		}
		for _, line := range logLines(t, p.Log) {
			if line["msg"] == started {
				g.MetricsAddr, _ = line["metricsAddr"].(string)
				g.WebhookAddr, _ = line["webhookAddr"].(string)
				return true, ""
			}
		}
		return false, "no " + started + " line yet"
	})
	return g
}

// logLines parses a daemon's JSON log lines (other lines are skipped).
func logLines(t testing.TB, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			lines = append(lines, m)
		}
	}
	return lines
}

var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+)$`)

// metric sums a metric's samples over all their labels.
func (g *gbProcess) metric(t testing.TB, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + g.MetricsAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		m := metricLine.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err)
		sum += v
	}
	return sum
}

// waitFluxApplied waits until Flux has fetched the branch head and every
// Kustomization has applied it: the cluster then holds what the head
// renders. When agents or the recorder move the head meanwhile, it waits
// for the new head.
func waitFluxApplied(t *testing.T, srv *gitsynctest.Server) {
	t.Helper()
	waitFluxAppliedIn(t, srv, FluxNamespace)
}

// waitFluxAppliedIn is waitFluxApplied for the GitRepository gitbroker and
// the Kustomizations of namespace ns.
func waitFluxAppliedIn(t *testing.T, srv *gitsynctest.Server, ns string) {
	t.Helper()
	waitFluxAppliedOn(t, cluster, srv, ns)
}

// waitFluxAppliedOn is waitFluxAppliedIn for the Flux of cluster c.
func waitFluxAppliedOn(t *testing.T, c *Cluster, srv *gitsynctest.Server, ns string) {
	t.Helper()
	ctx := context.Background()
	srv = srv.On(verify.RenderedBranch)
	eventually(t, 4*time.Minute, "Flux to apply the rendered branch's head", func() (bool, string) {
		head := srv.Head()
		if head == "" {
			return false, "nothing rendered yet"
		}
		rev := verify.RenderedBranch + "@sha1:" + head
		repo, err := c.Dynamic.Resource(gitRepositoryGVR).Namespace(ns).Get(ctx, "gitbroker", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got, _, _ := unstructured.NestedString(repo.Object, "status", "artifact", "revision")
		if got != rev {
			return false, fmt.Sprintf("GitRepository at %q, head %s", got, head[:12])
		}
		ks, err := c.Dynamic.Resource(kustomizationGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, k := range ks.Items {
			last, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
			if ready, why := readyCondition(&k); last != rev || !ready {
				return false, fmt.Sprintf("Kustomization %s applied %q, ready=%v: %s", k.GetName(), last, ready, why)
			}
		}
		return srv.Head() == head, ""
	})
}

// readyCondition is a Flux object's Ready condition: whether it is True,
// and its reason and message.
func readyCondition(obj *unstructured.Unstructured) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			return m["status"] == "True", fmt.Sprint(m["reason"], ": ", m["message"])
		}
	}
	return false, "no Ready condition"
}

// applyFlux applies deploy/flux's objects in the Flux namespace ns, with the GitRepository on
// url, fetching every sourceInterval, and verifying the renderer's commits with the public key
// in rendererPub; and binds its gitbroker-applier and the recorder in each broker namespace with
// deploy/applier's RoleBindings, as an administrator would.
func applyFlux(t testing.TB, ns, url, rendererPub string, brokerNamespaces ...string) {
	t.Helper()
	applyFluxFrom(t, "../deploy/flux", ns, url, rendererPub, nil, brokerNamespaces...)
}

// applyFluxFrom is applyFlux with deploy/flux's objects as the kustomization in dir builds them
// (deploy/flux-folder-sources), each passed to edit, when it is not nil, before it is applied.
func applyFluxFrom(t testing.TB, dir, ns, url, rendererPub string, edit func(*unstructured.Unstructured), brokerNamespaces ...string) {
	t.Helper()
	applyFluxTo(t, cluster, dir, ns, url, rendererPub, edit, brokerNamespaces...)
}

// applyFluxTo is applyFluxFrom in cluster c.
func applyFluxTo(t testing.TB, c *Cluster, dir, ns, url, rendererPub string, edit func(*unstructured.Unstructured), brokerNamespaces ...string) {
	t.Helper()
	ctx := context.Background()
	pub, err := os.ReadFile(rendererPub)
	require.NoError(t, err)
	// Applied again (another overlay over the same namespace), it keeps the Secret.
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gitbroker-renderer-verify", Namespace: ns},
		Data:       map[string][]byte{"renderer.sshpub": pub},
	}
	if _, err = c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = c.Client.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
	}
	require.NoError(t, err)
	for _, obj := range build(t, dir) {
		if obj.GetKind() == "ConfigMap" && obj.GetName() == "gitbroker-flux-policy" {
			// The admission policies' binding reads its parameters from flux-system whatever
			// namespace a test runs Flux in, and denies everything while they are missing: a
			// copy stays there, as a user's deploy/flux puts it.
			require.NoError(t, c.CreateNamespace(ctx, obj.GetNamespace()))
			require.NoError(t, c.ApplyObject(ctx, obj.DeepCopy()))
		}
		if obj.GetNamespace() != "" {
			obj.SetNamespace(ns)
		}
		switch obj.GetKind() {
		case "GitRepository":
			obj.Object["spec"].(map[string]any)["url"] = url
			obj.Object["spec"].(map[string]any)["interval"] = sourceInterval.String()
		case "RoleBinding":
			retarget(obj, ns)
		case "ClusterRoleBinding":
			// One per Flux namespace: the tests each run Flux's objects in a namespace of their own.
			obj.SetName(obj.GetName() + "-" + ns)
			retarget(obj, ns)
		}
		if edit != nil {
			edit(obj)
		}
		require.NoError(t, c.ApplyObject(ctx, obj))
	}
	data, err := os.ReadFile("../deploy/applier/rolebinding.yaml")
	require.NoError(t, err)
	for _, bns := range brokerNamespaces {
		objs, err := Objects(data)
		require.NoError(t, err)
		require.Len(t, objs, 2)
		for _, obj := range objs {
			obj.SetNamespace(bns)
			if obj.GetName() == "gitbroker-applier" {
				retarget(obj, ns)
			}
			require.NoError(t, c.ApplyObject(ctx, obj))
		}
	}
}

// retarget moves a RoleBinding's ServiceAccount subjects to the Flux namespace ns.
func retarget(obj *unstructured.Unstructured, ns string) {
	subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
	for _, s := range subjects {
		if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
			m["namespace"] = ns
		}
	}
	_ = unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
}

// applyWritersRBAC applies deploy/'s ServiceAccounts and RBAC in cluster c, so the renderer and
// the recorder run there with the permissions a user gives them.
func applyWritersRBAC(t testing.TB, c *Cluster) {
	t.Helper()
	for _, obj := range build(t, "../deploy") {
		switch obj.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			require.NoError(t, c.ApplyObject(context.Background(), obj))
		}
	}
}

// writerKeys makes a signing key for each principal in a folder of the test's: their files by
// principal, and the allowed_signers lines that enroll them all.
func writerKeys(t testing.TB, principals []string) (map[string]string, string) {
	t.Helper()
	dir := t.TempDir()
	keys := map[string]string{}
	var allowed strings.Builder
	for _, p := range principals {
		f := filepath.Join(dir, strings.ReplaceAll(p, ":", "-"), "signing-key")
		k, _, err := trust.LoadOrCreateSigner(f, p)
		require.NoError(t, err)
		keys[p] = f
		allowed.WriteString(k.AllowedSignersLine(p) + "\n")
	}
	return keys, allowed.String()
}
