//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

const (
	argoBrokers = "orchard"
	argoNode    = "orchard-1"
)

var applicationGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}

func argoCamera() string {
	return `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: cam
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["cam-1", "cam-2"]
  brokerProperties:
    RESOLUTION: "720p"
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: "nginx:stable-alpine"
  instanceServiceSpec:
    ports: [{name: http, port: 80, targetPort: 80}]
`
}

func argoFirmware(version string) string {
	return `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: fw
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["plc-9"]
  brokerProperties:
    FIRMWARE_VERSION: "` + version + `"
  brokerSpec:
    brokerJobSpec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: flash
            image: "busybox:1.36"
`
}

// argoFailing is a Job broker whose Pods fail (kwok's pod-fail stage).
func argoFailing() string {
	return `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: bad
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["plc-13"]
  brokerSpec:
    brokerJobSpec:
      backoffLimit: 0
      template:
        metadata:
          labels:
            ` + LabelFail + `: "true"
        spec:
          restartPolicy: Never
          containers:
          - name: flash
            image: "busybox:1.36"
`
}

// startArgoCluster starts a cluster of its own, named dir, with no Flux in it and Argo CD's real
// application controller, repo-server, applicationset controller and server, whose repo-server
// trusts an OpenPGP key it makes for the renderer: Argo CD verifies GnuPG signatures only. It
// returns the cluster, Argo CD, a folder for the test's files, the renderer's private key file
// and its key id.
func startArgoCluster(t *testing.T, dir string) (*Cluster, *ArgoCD, string, string, string) {
	t.Helper()
	ctx := context.Background()
	start, cancel := context.WithTimeout(ctx, 5*time.Minute)
	c, err := StartClusterWithoutFlux(start, cluster.bin, filepath.Join(cluster.Dir, dir))
	cancel()
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	_, err = c.Dynamic.Resource(kustomizationGVR).Namespace(FluxNamespace).List(ctx, metav1.ListOptions{})
	require.Error(t, err, "no Flux in this cluster: its Kustomization kind does not exist")
	keys := t.TempDir()
	// The renderer signs with OpenPGP; the repo-server imports the public key from a folder
	// (argocd-gpg-keys-cm in a cluster).
	priv, pub, err := trust.NewOpenPGPKey("gitbroker renderer", "renderer@gitbroker.dev")
	require.NoError(t, err)
	rendererKey := filepath.Join(keys, "renderer.asc")
	require.NoError(t, os.WriteFile(rendererKey, priv, 0o600))
	renderer, err := trust.LoadOpenPGPSigner(rendererKey)
	require.NoError(t, err)
	gpgKeys := filepath.Join(keys, "gpg-keys")
	require.NoError(t, os.Mkdir(gpgKeys, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(gpgKeys, renderer.KeyID()), pub, 0o644))
	argo, err := c.StartArgoCD(ctx, gpgKeys)
	require.NoError(t, err)
	t.Cleanup(argo.Stop)
	return c, argo, keys, rendererKey, renderer.KeyID()
}

// waitApplicationSynced waits until Argo CD's Application name in cluster c has synced the
// rendered head and reports Synced with health.
func waitApplicationSynced(t *testing.T, c *Cluster, argo *ArgoCD, name, head, health string) {
	t.Helper()
	eventually(t, 3*time.Minute, "Application "+name+" synced at "+head[:7]+" and "+health, func() (bool, string) {
		require.NoError(t, argo.Alive())
		a, err := c.Dynamic.Resource(applicationGVR).Namespace(ArgoNamespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		rev, _, _ := unstructured.NestedString(a.Object, "status", "sync", "revision")
		st, _, _ := unstructured.NestedString(a.Object, "status", "sync", "status")
		h, _, _ := unstructured.NestedString(a.Object, "status", "health", "status")
		op, _, _ := unstructured.NestedString(a.Object, "status", "operationState", "phase")
		msg, _, _ := unstructured.NestedString(a.Object, "status", "operationState", "message")
		cond, _, _ := unstructured.NestedSlice(a.Object, "status", "conditions")
		return rev == head && st == "Synced" && h == health, fmt.Sprintf("revision %.7s, %s, %s, last sync %s: %s %v", rev, st, h, op, msg, cond)
	})
}

// applyArgoCD applies deploy/argocd as a user does, pointed at url, the AppProject admitting the
// broker namespace ns and only commits keyID signed, the ApplicationSet polling often.
func applyArgoCD(t *testing.T, c *Cluster, url, ns, keyID string) {
	t.Helper()
	for _, f := range []string{"appproject.yaml", "applicationset.yaml"} {
		data, err := os.ReadFile(filepath.Join("../deploy/argocd", f))
		require.NoError(t, err)
		objs, err := Objects([]byte(strings.ReplaceAll(string(data), "https://git.example.com/fleet/edge.git", url)))
		require.NoError(t, err)
		for _, obj := range objs {
			switch obj.GetKind() {
			case "AppProject":
				require.NoError(t, unstructured.SetNestedSlice(obj.Object, []any{
					map[string]any{"server": "https://kubernetes.default.svc", "namespace": ns},
				}, "spec", "destinations"))
				// Only the renderer's commits sync.
				require.NoError(t, unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"keyID": keyID}}, "spec", "signatureKeys"))
			case "ApplicationSet":
				gens, _, _ := unstructured.NestedSlice(obj.Object, "spec", "generators")
				gens[0].(map[string]any)["git"].(map[string]any)["requeueAfterSeconds"] = int64(3)
				require.NoError(t, unstructured.SetNestedSlice(obj.Object, gens, "spec", "generators"))
			}
			require.NoError(t, c.ApplyObject(context.Background(), obj))
		}
	}
}

// TestArgoCD runs the loop with Argo CD instead of Flux: deploy/argocd's AppProject and
// ApplicationSet over the rendered folders, with Argo CD's real application controller,
// repo-server and applicationset controller, on a cluster of its own with no Flux in it.
func TestArgoCD(t *testing.T) {
	ctx := context.Background()
	cluster, argo, keys, rendererKey, keyID := startArgoCluster(t, "argocd-cluster")
	srv := gitsynctest.NewServer(t, "main", map[string]string{
		"gitbroker.yaml":          "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  defaultNamespace: " + argoBrokers + "\n",
		"configurations/cam.yaml": argoCamera(),
		"configurations/fw.yaml":  argoFirmware("1.0"),
		"configurations/bad.yaml": argoFailing(),
	})
	require.NoError(t, cluster.AddNode(ctx, argoNode))
	avail := filepath.Join(keys, "availability")
	require.NoError(t, os.WriteFile(avail, nil, 0o644)) // Akri's debugEcho: devices online

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(gitbroker, args...).CombinedOutput()
		require.NoError(t, err, "gitbroker %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
	discover := func() {
		t.Helper()
		run("agent", "--allow-debug-echo", "--git", srv.URL(), "--node", argoNode, "--once", "--debug-echo-shared=false",
			"--grace-period", "0s", "--local-grace-period", "0s",
			"--discovery-handlers-dir", "", "--debug-echo-availability-file", avail)
	}
	rendered := srv.On(verify.RenderedBranch)
	render := func(extra ...string) string {
		t.Helper()
		return run(append([]string{"render", "--git", srv.URL(), "--signing-key", rendererKey, "--first-render"}, extra...)...)
	}
	discover()
	render()
	applyArgoCD(t, cluster, srv.URL(), argoBrokers, keyID)

	app := func(cfg string) *unstructured.Unstructured {
		a, err := cluster.Dynamic.Resource(applicationGVR).Namespace(ArgoNamespace).Get(ctx, "gitbroker-"+argoBrokers+"-"+cfg, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		require.NoError(t, err)
		return a
	}
	// synced waits until the Application has synced the rendered branch's head and reports
	// Synced with the given health.
	synced := func(t *testing.T, cfg, health string) {
		t.Helper()
		waitApplicationSynced(t, cluster, argo, "gitbroker-"+argoBrokers+"-"+cfg, rendered.Head(), health)
	}
	pods := func(cfg string) map[string]types.UID {
		list, err := cluster.Client.CoreV1().Pods(argoBrokers).List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=" + cfg})
		require.NoError(t, err)
		out := map[string]types.UID{}
		for _, p := range list.Items {
			out[p.Name] = p.UID
		}
		return out
	}
	jobs := func() []batchv1.Job {
		list, err := cluster.Client.BatchV1().Jobs(argoBrokers).List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=fw"})
		require.NoError(t, err)
		return list.Items
	}
	jobsComplete := func(t *testing.T, n int) {
		t.Helper()
		eventually(t, 3*time.Minute, fmt.Sprintf("%d fw Jobs complete", n), func() (bool, string) {
			done := 0
			for _, j := range jobs() {
				if j.Status.CompletionTime != nil {
					done++
				}
			}
			return len(jobs()) == n && done == n, fmt.Sprintf("%d Jobs, %d complete", len(jobs()), done)
		})
	}

	var firstJob batchv1.Job
	t.Run("broker Deployments and their Pods, Services and a Job, in a namespace Argo CD creates", func(t *testing.T) {
		synced(t, "cam", "Healthy")
		require.Len(t, pods("cam"), 2)
		for _, dev := range []string{"cam-1", "cam-2"} {
			_, err := cluster.Client.CoreV1().Services(argoBrokers).Get(ctx, instance("cam", dev, argoNode)+"-svc", metav1.GetOptions{})
			require.NoError(t, err, "instance Service of %s", dev)
		}
		jobsComplete(t, 1)
		// A finished Job is Healthy: it does not keep the Application Progressing.
		synced(t, "fw", "Healthy")
		firstJob = jobs()[0]
		// A failed Job shows: its Application is Degraded.
		synced(t, "bad", "Degraded")
		// One Application per rendered folder, none for the renderer's own records beside them
		// (rendered/.gitbroker-accepted/<shard>/, a hidden folder the generator skips).
		list, err := cluster.Dynamic.Resource(applicationGVR).Namespace(ArgoNamespace).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, a := range list.Items {
			path, _, _ := unstructured.NestedString(a.Object, "spec", "source", "path")
			require.NotContains(t, path, ".gitbroker", "Application %s", a.GetName())
		}
	})

	t.Run("a held run stays held under self-heal", func(t *testing.T) {
		srv.Commit(map[string]string{"configurations/fw.yaml": argoFirmware("2.0")}, nil, "fw: 2.0")
		require.Contains(t, render(), "held: waiting for "+firstJob.Name)
		synced(t, "fw", "Healthy")
		time.Sleep(10 * time.Second) // two resyncs, with self-heal on
		require.Len(t, jobs(), 1, "the held run is not in git, so Argo CD creates nothing")
	})

	t.Run("a recorded Job moves to history and stays in the cluster, never patched", func(t *testing.T) {
		startGitbroker(t, "argo-recorder", "recorder started", "record", "--git", srv.URL(), "--kubeconfig", cluster.Kubeconfig,
			"--namespace", argoBrokers, "--batch", "200ms", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
		eventually(t, time.Minute, "the record", func() (bool, string) {
			_, ok := srv.On(verify.StatusBranch).File("status/jobs/" + argoBrokers + "/" + firstJob.Name + ".yaml")
			return ok, "not recorded yet"
		})
		require.Contains(t, render(), firstJob.Name+" retired")
		jobsComplete(t, 2)
		synced(t, "fw", "Healthy")
		for _, j := range jobs() {
			if j.Name == firstJob.Name {
				require.Equal(t, firstJob.UID, j.UID, "the retired Job is the same object: not pruned, not re-created")
			}
			require.EqualValues(t, 1, j.Generation, "Job %s never patched", j.Name)
		}
		// In history/, out of git's rendered/: extraneous, but neither pruned (sync-options
		// Prune=false) nor making the Application OutOfSync (compare-options IgnoreExtraneous).
		a := app("fw")
		resources, _, _ := unstructured.NestedSlice(a.Object, "status", "resources")
		for _, r := range resources {
			m := r.(map[string]any)
			if m["name"] == firstJob.Name {
				require.Equal(t, true, m["requiresPruning"], "listed as extraneous: %v", m)
			}
		}
	})

	deployments := func() map[string]types.UID {
		list, err := cluster.Client.AppsV1().Deployments(argoBrokers).List(ctx, metav1.ListOptions{LabelSelector: "akri.sh/configuration=cam"})
		require.NoError(t, err)
		out := map[string]types.UID{}
		for _, d := range list.Items {
			out[d.Name] = d.UID
		}
		return out
	}
	t.Run("a changed Pod broker's Deployments are updated in place and roll out new Pods", func(t *testing.T) {
		before, kept := pods("cam"), deployments()
		require.Len(t, kept, 2)
		srv.Commit(map[string]string{"configurations/cam.yaml": strings.Replace(argoCamera(), `"720p"`, `"1080p"`, 1)}, nil, "cam: 1080p")
		render()
		synced(t, "cam", "Healthy")
		eventually(t, 2*time.Minute, "new cam Pods", func() (bool, string) {
			after := pods("cam")
			for name, uid := range after {
				if before[name] == uid {
					return false, name + " not re-created yet"
				}
			}
			return len(after) == 2, fmt.Sprintf("%d Pods", len(after))
		})
		for name := range pods("cam") {
			p, err := cluster.Client.CoreV1().Pods(argoBrokers).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, "1080p", envOf(p.Spec.Containers[0], "RESOLUTION"))
		}
		require.Equal(t, kept, deployments(), "the same Deployments, updated in place: no Replace, no force")
	})

	t.Run("an invalid Configuration changes nothing", func(t *testing.T) {
		before := pods("cam")
		srv.Commit(map[string]string{"configurations/cam.yaml": strings.Replace(argoCamera(), "image:", "imagee:", 1)}, nil, "cam: typo")
		out, err := exec.Command(gitbroker, "render", "--git", srv.URL(), "--signing-key", rendererKey).CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "imagee: unknown field")
		synced(t, "cam", "Healthy")
		require.Equal(t, before, pods("cam"))
		srv.Commit(map[string]string{"configurations/cam.yaml": strings.Replace(argoCamera(), `"720p"`, `"1080p"`, 1)}, nil, "cam: fixed")
	})

	t.Run("vanished devices' Deployments, Pods and Services are pruned, with their Application", func(t *testing.T) {
		// Every device on the node goes (Akri's debugEcho OFFLINE): cam's folder goes, so the
		// ApplicationSet deletes its Application, whose finalizer deletes what it synced. The
		// Jobs, which carry Delete=false, stay.
		require.NoError(t, os.WriteFile(avail, []byte("OFFLINE\n"), 0o644))
		discover()
		// More than maxDeletionPercent of the node's objects: an operator's explicit act.
		render("--allow-deletions")
		eventually(t, 2*time.Minute, "cam's Pods, Services and Application gone", func() (bool, string) {
			svcs, err := cluster.Client.CoreV1().Services(argoBrokers).List(ctx, metav1.ListOptions{LabelSelector: "akri.sh/configuration=cam"})
			require.NoError(t, err)
			return len(deployments()) == 0 && len(pods("cam")) == 0 && len(svcs.Items) == 0 && app("cam") == nil,
				fmt.Sprintf("%d Deployments, %d Pods, %d Services, Application %v", len(deployments()), len(pods("cam")), len(svcs.Items), app("cam") != nil)
		})
		require.Len(t, jobs(), 2, "finished Jobs stay")

		require.NoError(t, os.WriteFile(avail, nil, 0o644))
		discover()
		render()
		synced(t, "cam", "Healthy")
		require.Len(t, pods("cam"), 2)
	})

	t.Run("a ClusterRoleBinding in a rendered folder is refused by the project", func(t *testing.T) {
		folder := "rendered/" + argoBrokers + "/cam/"
		k, ok := rendered.File(folder + "kustomization.yaml")
		require.True(t, ok)
		crb := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: gitbroker-argo-takeover\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: default\n  namespace: " + argoBrokers + "\n"
		renderer, err := trust.LoadOpenPGPSigner(rendererKey)
		require.NoError(t, err)
		r, err := gitsync.New(srv.URL(), verify.RenderedBranch, gitsync.WithSigner(renderer))
		require.NoError(t, err)
		_, err = r.Update(ctx, func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
			return &gitsync.Change{
				Owned: []string{folder + "clusterrolebinding.yaml", folder + "kustomization.yaml"},
				Files: map[string][]byte{
					folder + "clusterrolebinding.yaml": []byte(crb),
					folder + "kustomization.yaml":      []byte(strings.Replace(k, "resources:\n", "resources:\n- clusterrolebinding.yaml\n", 1)),
				},
				Message: "planted", Author: gitsync.Signature{Name: "mallory", Email: "mallory@example.com", When: time.Now()},
			}, nil
		})
		require.NoError(t, err)
		head := rendered.Head()
		eventually(t, 2*time.Minute, "the cam Application to refuse the ClusterRoleBinding", func() (bool, string) {
			a := app("cam")
			rev, _, _ := unstructured.NestedString(a.Object, "status", "sync", "revision")
			text := fmt.Sprint(a.Object["status"])
			return rev == head && strings.Contains(text, "not permitted in project"), fmt.Sprintf("revision %.7s", rev)
		})
		_, err = cluster.Client.RbacV1().ClusterRoleBindings().Get(ctx, "gitbroker-argo-takeover", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the ClusterRoleBinding was never created: %v", err)
		require.Len(t, pods("cam"), 2, "cam's broker Pods stay")
		render()
		synced(t, "cam", "Healthy")
	})

	t.Run("a commit the renderer did not sign is not synced", func(t *testing.T) {
		folder := "rendered/" + argoBrokers + "/cam/"
		k, ok := rendered.File(folder + "kustomization.yaml")
		require.True(t, ok)
		planted := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: planted\n  namespace: " + argoBrokers +
			"\n  labels:\n    app.kubernetes.io/managed-by: gitbroker\n    akri.sh/configuration: cam\nspec:\n  containers:\n  - name: x\n    image: attacker/root\n"
		// Signed, but by a node's SSH key: what a stolen edge credential can push.
		node, _, err := trust.LoadOrCreateSigner(filepath.Join(keys, "node"), trust.NodePrincipal(argoNode))
		require.NoError(t, err)
		r, err := gitsync.New(srv.URL(), verify.RenderedBranch, gitsync.WithSigner(node))
		require.NoError(t, err)
		bad, err := r.Update(ctx, func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
			return &gitsync.Change{
				Owned: []string{folder + "pod-planted.yaml", folder + "kustomization.yaml"},
				Files: map[string][]byte{
					folder + "pod-planted.yaml":   []byte(planted),
					folder + "kustomization.yaml": []byte(strings.Replace(k, "resources:\n", "resources:\n- pod-planted.yaml\n", 1)),
				},
				Message: "planted", Author: gitsync.Signature{Name: "mallory", Email: "mallory@example.com", When: time.Now()},
			}, nil
		})
		require.NoError(t, err)
		eventually(t, 2*time.Minute, "the cam Application to refuse the unsigned revision", func() (bool, string) {
			conds, _, _ := unstructured.NestedSlice(app("cam").Object, "status", "conditions")
			text := fmt.Sprint(conds)
			return strings.Contains(text, "ComparisonError") && strings.Contains(text, "Failed verifying revision "+bad.Commit), text
		})
		time.Sleep(5 * time.Second)
		_, err = cluster.Client.CoreV1().Pods(argoBrokers).Get(ctx, "planted", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the planted Pod is not applied: %v", err)

		// The renderer's next commit drops the planted files and syncs.
		render()
		synced(t, "cam", "Healthy")
		_, err = cluster.Client.CoreV1().Pods(argoBrokers).Get(ctx, "planted", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err))
	})

	t.Run("the render daemon tells Argo CD's webhook, which refreshes the Application whose folder changed", func(t *testing.T) {
		secret := filepath.Join(keys, "argocd-webhook-secret")
		require.NoError(t, os.WriteFile(secret, []byte(ArgoWebhookSecret+"\n"), 0o600))
		host := filepath.Join(keys, "webhook-secret")
		require.NoError(t, os.WriteFile(host, []byte("argo-host-secret"), 0o600))
		// The git host's push wakes the daemon (its interval is an hour), which tells Argo CD.
		daemon := startGitbroker(t, "argo-renderer", "renderer started", "render", "--git", srv.URL(), "--signing-key", rendererKey,
			"--watch", "--interval", "1h", "--argocd-webhook-url", argo.WebhookURL, "--argocd-webhook-secret-file", secret,
			"--webhook-addr", "127.0.0.1:0", "--webhook-secret-file", host,
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
		srv.SendWebhooks("http://"+daemon.WebhookAddr+"/hook", []byte("argo-host-secret"))
		mark := len(logLines(t, argo.Server.Log))
		// A change to the cam Configuration: the daemon's first render commits it.
		srv.Commit(map[string]string{"configurations/cam.yaml": strings.Replace(argoCamera(), `"720p"`, `"2160p"`, 1)}, nil, "cam: 2160p")
		eventually(t, time.Minute, "the render daemon to tell Argo CD", func() (bool, string) {
			resp, err := http.Get("http://" + daemon.MetricsAddr + "/metrics")
			if err != nil {
				return false, err.Error()
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return strings.Contains(string(body), `gitbroker_renderer_gitops_notifications_total{result="sent",target="argocd-webhook"} 1`), "not yet"
		})
		head := rendered.Head()
		// Argo CD matched the push to the Applications of this repository and branch, and
		// refreshed only the one whose folder the render changed (manifest-generate-paths).
		refreshed := map[string]bool{}
		eventually(t, time.Minute, "argocd-server to refresh the cam Application from the webhook", func() (bool, string) {
			var seen []string
			push := false
			for _, line := range logLines(t, argo.Server.Log)[mark:] {
				msg, _ := line["msg"].(string)
				if strings.Contains(msg, "Received push event") && strings.Contains(msg, "revision: "+verify.RenderedBranch) {
					push = true
				}
				if msg == "refreshing app from webhook" {
					refreshed[line["application"].(string)] = true
				}
				if strings.Contains(msg, "ebhook") || strings.Contains(msg, "push event") {
					seen = append(seen, msg)
				}
			}
			return push && refreshed["gitbroker-"+argoBrokers+"-cam"], strings.Join(seen, " | ")
		})
		require.False(t, refreshed["gitbroker-"+argoBrokers+"-fw"], "the firmware Application's folder did not change")
		// The refresh compared the Application with the render's commit. (Its sync can wait:
		// Argo CD may still be retrying the sync the planted ClusterRoleBinding failed, above.)
		eventually(t, time.Minute, "the cam Application compared at "+head[:7], func() (bool, string) {
			rev, _, _ := unstructured.NestedString(app("cam").Object, "status", "sync", "revision")
			return rev == head, rev
		})
	})
}
