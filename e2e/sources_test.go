//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

const (
	sourcesNamespace     = "sources"
	sourcesFluxNamespace = "flux-sources"
	sourcesNode          = "sources-1"
)

// A device change with one source for every folder reconciles every Kustomization (the
// reconcile storm of flux2#5470); with spec.flux.folderSources, and the root's source from
// deploy/flux-folder-sources, it reconciles only the folder's Kustomization. Measured side by
// side on one repository: the same change before and after the setting, counting the reconciles
// kustomize-controller reports and its CPU time. Switching changes no broker object, and a
// minute of churn loses nothing.
func TestFolderSources(t *testing.T) {
	ctx := context.Background()
	require.NoError(t, cluster.CreateNamespace(ctx, sourcesFluxNamespace))
	settings := func(folderSources bool) string {
		s := "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: " + sourcesNamespace +
			"\n  flux:\n    namespace: " + sourcesFluxNamespace + "\n    retryInterval: 5s\n"
		if folderSources {
			s += "    folderSources:\n      url: " + "__URL__" + "\n      interval: " + sourceInterval.String() + "\n"
		}
		return s
	}
	configs := []string{"cam-a", "cam-b", "cam-c"}
	files := map[string]string{api.SettingsPath: settings(false)}
	for _, c := range configs {
		files["configurations/"+c+".yaml"] = trustConfiguration(c, "dev-"+c)
	}
	srv := gitsynctest.NewServer(t, "main", files)
	withURL := func(s string) string { return strings.Replace(s, "__URL__", srv.URL(), 1) }
	rendererKey := filepath.Join(t.TempDir(), "renderer")
	_, _, err := trust.LoadOrCreateSigner(rendererKey, "renderer")
	require.NoError(t, err)
	// The Receiver's Secret before the Receiver (deploy/flux's; its token, the renderer's
	// --flux-receiver-token-file in the churn below).
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gitbroker-receiver", Namespace: sourcesFluxNamespace},
		StringData: map[string]string{"token": "sources-receiver-token"}})
	applyFlux(t, sourcesFluxNamespace, srv.URL(), rendererKey+".pub")
	require.NoError(t, cluster.AddNode(ctx, sourcesNode))
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(gitbroker, args...).CombinedOutput()
		require.NoError(t, err, "gitbroker %s: %s", strings.Join(args, " "), out)
	}
	discoverAndRender := func() {
		t.Helper()
		run("agent", "--allow-debug-echo", "--git", srv.URL(), "--node", sourcesNode, "--once", "--debug-echo-shared=false",
			"--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
		run("render", "--git", srv.URL(), "--signing-key", rendererKey, "--first-render")
	}
	discoverAndRender()
	waitSourcesApplied(t, srv, sourcesFluxNamespace)
	require.Len(t, podUIDs(t, sourcesNamespace), 3)

	// addDevice gives cam-b one more device, as its node discovers it, and measures what the
	// cluster does until its Pod runs and every Kustomization has applied its source's head.
	kc := cluster.Process("kustomize-controller")
	require.NotNil(t, kc)
	devices := 1
	addDevice := func(t *testing.T) (reconciled map[string]int, cpu, toPod time.Duration) {
		t.Helper()
		devices++
		srv.Commit(map[string]string{"configurations/cam-b.yaml": cameras("cam-b", devices)}, nil, "another cam-b device")
		mark := logLineCount(t, kc.Log)
		cpu0, err := kc.CPU()
		require.NoError(t, err)
		start := time.Now()
		discoverAndRender()
		eventually(t, 3*time.Minute, "cam-b's new Pod to run", func() (bool, string) {
			list, err := cluster.Client.CoreV1().Pods(sourcesNamespace).List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=cam-b"})
			require.NoError(t, err)
			running := 0
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == devices, fmt.Sprintf("%d of %d running", running, devices)
		})
		toPod = time.Since(start)
		waitSourcesApplied(t, srv, sourcesFluxNamespace)
		// Reconciles triggered by the change have finished once every Kustomization applied
		// its head; give kustomize-controller a moment to log the last one.
		time.Sleep(2 * time.Second)
		cpu1, err := kc.CPU()
		require.NoError(t, err)
		return reconcilesSince(t, kc.Log, mark, sourcesFluxNamespace), cpu1 - cpu0, toPod
	}

	storm, stormCPU, stormPod := addDevice(t)
	t.Logf("one source: a device change reconciled %v; kustomize-controller CPU %s; time to Pod %s", storm, stormCPU, stormPod.Round(time.Millisecond))
	for _, k := range []string{"gitbroker", render.NamespacesKustomization, "gitbroker-sources-cam-a", "gitbroker-sources-cam-b", "gitbroker-sources-cam-c"} {
		require.Positive(t, storm[k], "with one source, %s reconciles on every render: %v", k, storm)
	}

	// One source per folder: the switch moves each Kustomization to its own source and
	// re-creates nothing.
	before := podUIDs(t, sourcesNamespace)
	srv.Commit(map[string]string{api.SettingsPath: withURL(settings(true))}, nil, "one source per folder")
	run("render", "--git", srv.URL(), "--signing-key", rendererKey)
	// deploy/flux-folder-sources over deploy/flux: the root's source on rendered/flux/ alone,
	// and the folders' sources handed from the root to gitbroker-sources.
	applyFluxFrom(t, "../deploy/flux-folder-sources", sourcesFluxNamespace, srv.URL(), rendererKey+".pub", nil)
	waitSourcesApplied(t, srv, sourcesFluxNamespace)
	for _, c := range configs {
		k, err := cluster.Dynamic.Resource(kustomizationGVR).Namespace(sourcesFluxNamespace).Get(ctx, "gitbroker-sources-"+c, metav1.GetOptions{})
		require.NoError(t, err)
		name, _, _ := unstructured.NestedString(k.Object, "spec", "sourceRef", "name")
		require.Equal(t, "gitbroker-sources-"+c, name)
		repo, err := cluster.Dynamic.Resource(gitRepositoryGVR).Namespace(sourcesFluxNamespace).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		verified, why := condition(repo, "SourceVerified")
		require.True(t, verified, "Flux verified the renderer's signature on %s: %s", name, why)
		require.Equal(t, "gitbroker-sources", repo.GetLabels()["kustomize.toolkit.fluxcd.io/name"], "%s is applied by gitbroker-sources, not the root", name)
	}
	require.Equal(t, before, podUIDs(t, sourcesNamespace), "every broker Pod is the same object")
	before = podUIDs(t, sourcesNamespace, "cam-a", "cam-c")

	quiet, quietCPU, quietPod := addDevice(t)
	t.Logf("one source per folder: a device change reconciled %v; kustomize-controller CPU %s; time to Pod %s", quiet, quietCPU, quietPod.Round(time.Millisecond))
	require.Equal(t, map[string]int{"gitbroker-sources-cam-b": 1}, quiet, "one Kustomization, once")
	for _, k := range []string{"gitbroker", "gitbroker-sources", render.NamespacesKustomization, "gitbroker-sources-cam-a", "gitbroker-sources-cam-c"} {
		require.Zero(t, quiet[k], "%s's folder did not change: %v", k, quiet)
	}
	require.Equal(t, before, podUIDs(t, sourcesNamespace, "cam-a", "cam-c"))

	// A folder's branch moved by a node's key is not applied, and the renderer puts it back.
	branch := api.FolderBranchPrefix + "gitbroker-sources-cam-a"
	good := srv.On(branch).Head()
	nodeKey := filepath.Join(t.TempDir(), "node")
	_, _, err = trust.LoadOrCreateSigner(nodeKey, trust.NodePrincipal(sourcesNode))
	require.NoError(t, err)
	bad := srv.On(branch).CommitSigned(nodeKey, map[string]string{"rendered/" + sourcesNamespace + "/cam-a/pod-planted.yaml": "x: 1\n"}, nil, "planted")
	eventually(t, 2*time.Minute, "cam-a's source to refuse the node's commit", func() (bool, string) {
		repo, err := cluster.Dynamic.Resource(gitRepositoryGVR).Namespace(sourcesFluxNamespace).Get(ctx, "gitbroker-sources-cam-a", metav1.GetOptions{})
		require.NoError(t, err)
		ok, why := condition(repo, "SourceVerified")
		return !ok, why
	})
	run("render", "--git", srv.URL(), "--signing-key", rendererKey)
	require.NotEqual(t, bad, srv.On(branch).Head())
	require.NotEqual(t, good, srv.On(branch).Head(), "a new commit of the renderer's, showing the same folder")
	require.NotContains(t, srv.On(branch).Files(), "rendered/"+sourcesNamespace+"/cam-a/pod-planted.yaml")
	waitSourcesApplied(t, srv, sourcesFluxNamespace)

	t.Run("churn: a device every 2 s for a minute, nothing lost", func(t *testing.T) {
		// The node's agent and the renderer run as daemons; a person adds a device to cam-b or
		// cam-c every 2 s.
		startGitbroker(t, "agent-"+sourcesNode, "agent started", "agent", "--allow-debug-echo",
			"--git", srv.URL(), "--branch", "main", "--node", sourcesNode, "--interval", agentInterval.String(),
			"--debug-echo-shared=false", "--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"),
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
		// The renderer tells deploy/flux-folder-sources' Receiver which branches each render
		// moved; its resourceFilter keeps the sources that follow them.
		token := filepath.Join(t.TempDir(), "flux-receiver-token")
		require.NoError(t, os.WriteFile(token, []byte("sources-receiver-token"), 0o600))
		startGitbroker(t, "renderer-sources", "renderer started", "render",
			"--git", srv.URL(), "--branch", "main", "--watch", "--interval", rendererInterval.String(), "--signing-key", rendererKey,
			"--flux-receiver-url", cluster.ReceiverURL, "--flux-receiver", sourcesFluxNamespace+"/gitbroker", "--flux-receiver-token-file", token,
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
		nc := cluster.Process("notification-controller")
		ncMark := logLineCount(t, nc.Log)
		mark := logLineCount(t, kc.Log)
		cpu0, err := kc.CPU()
		require.NoError(t, err)
		want := map[string]int{"cam-a": 1, "cam-b": devices, "cam-c": 1}
		start := time.Now()
		changes := 0
		var last time.Time
		for ; time.Since(start) < time.Minute; changes++ {
			last = time.Now()
			cfg := []string{"cam-b", "cam-c"}[changes%2]
			want[cfg]++
			srv.Commit(map[string]string{"configurations/" + cfg + ".yaml": cameras(cfg, want[cfg])}, nil, "another "+cfg+" device")
			time.Sleep(time.Until(start.Add(time.Duration(changes+1) * 2 * time.Second)))
		}
		eventually(t, 4*time.Minute, "every device's Pod to run", func() (bool, string) {
			list, err := cluster.Client.CoreV1().Pods(sourcesNamespace).List(ctx, metav1.ListOptions{LabelSelector: managed})
			require.NoError(t, err)
			got := map[string]int{}
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					got[p.Labels["akri.sh/configuration"]]++
				}
			}
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("running %v, want %v", got, want)
		})
		caughtUp := time.Since(last)
		waitSourcesApplied(t, srv, sourcesFluxNamespace)
		time.Sleep(2 * time.Second)
		cpu1, err := kc.CPU()
		require.NoError(t, err)
		rec := reconcilesSince(t, kc.Log, mark, sourcesFluxNamespace)
		t.Logf("churn: %d changes in %s; every Pod running %s after the last; reconciled %v; kustomize-controller CPU %s",
			changes, time.Minute, caughtUp.Round(time.Second), rec, (cpu1 - cpu0).Round(10*time.Millisecond))
		for c, n := range want {
			pods := 0
			for _, f := range srv.On(verify.RenderedBranch).Files() {
				if strings.HasPrefix(f, "rendered/"+sourcesNamespace+"/"+c+"/deployment-") {
					pods++
				}
			}
			require.Equal(t, n, pods, "every %s device is rendered", c)
		}
		require.Zero(t, rec["gitbroker-sources-cam-a"], "cam-a never changed: %v", rec)
		require.Zero(t, rec[render.NamespacesKustomization], "%v", rec)
		require.Zero(t, rec["gitbroker"], "no Flux object changed: %v", rec)
		require.Zero(t, rec["gitbroker-sources"], "no source changed: %v", rec)
		require.Positive(t, rec["gitbroker-sources-cam-b"])
		require.Positive(t, rec["gitbroker-sources-cam-c"])
		// The Receiver asked for exactly the sources whose branch moved: never cam-a's, nor the
		// root's (rendered/flux/ did not change).
		annotated := map[string]int{}
		for _, line := range logLines(t, nc.Log)[ncMark:] {
			msg, _ := line["msg"].(string)
			if name, ok := strings.CutPrefix(msg, "resource 'GitRepository/"); ok {
				name, _, _ = strings.Cut(name, "."+sourcesFluxNamespace+"' annotated")
				annotated[name]++
			}
		}
		t.Logf("the Receiver annotated %v", annotated)
		require.Positive(t, annotated["gitbroker-sources-cam-b"], "%v", annotated)
		require.Positive(t, annotated["gitbroker-sources-cam-c"], "%v", annotated)
		require.Zero(t, annotated["gitbroker-sources-cam-a"], "%v", annotated)
		require.Zero(t, annotated["gitbroker"], "%v", annotated)
	})
}

// cameras is a Configuration named name whose debugEcho handler discovers n devices.
func cameras(name string, n int) string {
	descs := []string{"dev-" + name}
	for i := 2; i <= n; i++ {
		descs = append(descs, fmt.Sprintf("dev-%s-%d", name, i))
	}
	return strings.Replace(trustConfiguration(name, "dev-"+name), `["dev-`+name+`"]`, `["`+strings.Join(descs, `", "`)+`"]`, 1)
}

// waitSourcesApplied waits until every Kustomization of Flux namespace ns is Ready and has
// applied the head of the branch its source follows: gitbroker/rendered for deploy/flux's
// GitRepository, a folder's branch for spec.flux.folderSources'.
func waitSourcesApplied(t testing.TB, srv *gitsynctest.Server, ns string) {
	t.Helper()
	waitSourcesAppliedWithin(t, srv, ns, 4*time.Minute)
}

func waitSourcesAppliedWithin(t testing.TB, srv *gitsynctest.Server, ns string, timeout time.Duration) {
	t.Helper()
	waitSourcesAppliedOn(t, cluster, srv, ns, timeout)
}

// waitSourcesAppliedOn is waitSourcesAppliedWithin for the Flux of cluster c.
func waitSourcesAppliedOn(t testing.TB, c *Cluster, srv *gitsynctest.Server, ns string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "every Kustomization to apply its source's head", func() (bool, string) {
		applied, all, state := sourcesAppliedOn(c, srv, ns)
		return all >= 2 && applied == all, state
	})
}

// sourcesApplied counts the Kustomizations of Flux namespace ns that are Ready with the head of
// their source's branch applied, of all; state says what the first of the others is waiting for.
// Two lists and one git process, whatever the number of Kustomizations: the bench polls it
// during the rollout it measures, on the cores the cluster runs on.
func sourcesApplied(srv *gitsynctest.Server, ns string) (applied, all int, state string) {
	return sourcesAppliedOn(cluster, srv, ns)
}

// sourcesAppliedOn is sourcesApplied for the Flux of cluster c.
func sourcesAppliedOn(c *Cluster, srv *gitsynctest.Server, ns string) (applied, all int, state string) {
	ctx := context.Background()
	ks, err := c.Dynamic.Resource(kustomizationGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err.Error()
	}
	repos, err := c.Dynamic.Resource(gitRepositoryGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err.Error()
	}
	branches := map[string]string{}
	for _, r := range repos.Items {
		branches[r.GetName()], _, _ = unstructured.NestedString(r.Object, "spec", "ref", "branch")
	}
	heads := srv.Heads()
	for _, k := range ks.Items {
		source, _, _ := unstructured.NestedString(k.Object, "spec", "sourceRef", "name")
		branch, ok := branches[source]
		if !ok {
			if state == "" {
				state = fmt.Sprintf("Kustomization %s: no GitRepository %s", k.GetName(), source)
			}
			continue
		}
		want := branch + "@sha1:" + heads[branch]
		last, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
		if ready, why := readyCondition(&k); last != want || !ready {
			if state == "" {
				state = fmt.Sprintf("Kustomization %s applied %q, want %q, ready=%v: %s", k.GetName(), last, want, ready, why)
			}
			continue
		}
		applied++
	}
	if state == "" && len(ks.Items) < 2 {
		state = fmt.Sprintf("%d Kustomizations", len(ks.Items))
	}
	return applied, len(ks.Items), state
}

// podUIDs is the UID of every broker Pod in ns of the given configurations (all without any).
func podUIDs(t *testing.T, ns string, configurations ...string) map[string]types.UID {
	t.Helper()
	list, err := cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: managed})
	require.NoError(t, err)
	out := map[string]types.UID{}
	for _, p := range list.Items {
		if len(configurations) == 0 || contains(configurations, p.Labels["akri.sh/configuration"]) {
			out[p.Name] = p.UID
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func logLineCount(t testing.TB, file string) int {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		n++
	}
	require.NoError(t, sc.Err())
	return n
}

// reconcilesSince counts, by name, the Kustomizations of namespace ns that kustomize-controller
// logged as reconciled after the first skip lines of its log.
func reconcilesSince(t testing.TB, file string, skip int, ns string) map[string]int {
	t.Helper()
	out := map[string]int{}
	kustomizeLog(t, file, skip, ns, func(l kustomizeLogLine) {
		if strings.HasPrefix(l.Msg, "Reconciliation finished") {
			out[l.Kustomization.Name]++
		}
	})
	return out
}

// kustomizeLogLine is what these tests read of a kustomize-controller log line.
type kustomizeLogLine struct {
	Msg           string `json:"msg"`
	Error         string `json:"error"`
	Kustomization struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"Kustomization"`
}

// kustomizeLog calls each with every line kustomize-controller logged about a Kustomization of
// namespace ns after the first skip lines of its log.
func kustomizeLog(t testing.TB, file string, skip int, ns string, each func(kustomizeLogLine)) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 0; sc.Scan(); n++ {
		if n < skip {
			continue
		}
		var line kustomizeLogLine
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Kustomization.Namespace != ns {
			continue
		}
		each(line)
	}
	require.NoError(t, sc.Err())
}
