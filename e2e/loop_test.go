//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// The scenario's timing: every interval the loop waits on. A device's
// Pod can appear no sooner than the sum of one of each.
const (
	agentInterval    = time.Second
	rendererInterval = time.Second
	sourceInterval   = 2 * time.Second // the GitRepository's fetch interval
	graceVanished    = 2 * time.Second // how long a vanished device stays in the inventory
)

var nodes = []string{"edge-1", "edge-2", "edge-3"}

const (
	managed     = "app.kubernetes.io/managed-by=gitbroker"
	echoConfig  = "akri-debug-echo"
	firmware    = "plc-firmware"
	format      = "journal-format"
	reader      = "journal-reader"
	fleetSystem = "gitbroker-system"
)

// loop is the running system: the git server, the agents, the renderer
// and (once started) the recorder.
type loop struct {
	t   *testing.T
	srv *gitsynctest.Server
	// keys are the writers' signing keys by principal; person signs people's commits.
	keys    map[string]string
	allowed string
	// rendererKey is the renderer's key as the agents and the recorder pin it (--renderer-key).
	rendererKey string
	avail       map[string]string // node -> debugEcho availability file
	renderer    *gbProcess        // the replica holding the Lease
	standby     *gbProcess
	recorder    *gbProcess
}

// TestLoop runs the whole loop on the cluster: people's Configurations,
// three nodes' agents, the renderer and the recorder each writing its own ref
// of one repository and signing, .gitbroker/allowed_signers enrolling them,
// and Flux applying gitbroker/rendered, with each step observed in the cluster.
func TestLoop(t *testing.T) {
	ctx := context.Background()
	l := startLoop(t)

	var formatJobs, firstFirmware map[string]types.UID

	t.Run("every writer signs and the renderer verified every input", func(t *testing.T) {
		rendered := l.srv.On(verify.RenderedBranch)
		eventually(t, time.Minute, "a render of all three nodes", func() (bool, string) {
			meta, _ := rendered.File(render.MetadataPath)
			w := render.ParseMetadata([]byte(meta)).Writers
			return len(w) == len(nodes), fmt.Sprintf("accepted tips: %v", w)
		})
		require.Zero(t, l.renderer.metric(t, "gitbroker_renderer_untrusted_inputs"))
		out, err := l.srv.VerifyCommit(rendered.Head(), l.allowed)
		require.NoError(t, err, out)
		require.Contains(t, out, `Good "git" signature for renderer`)
		for _, n := range nodes {
			out, err := l.srv.VerifyCommit(l.srv.On(verify.InventoryBranch(n)).Head(), l.allowed)
			require.NoError(t, err, out)
			require.Contains(t, out, `Good "git" signature for node:`+n)
		}
	})

	t.Run("broker Pods and Services", func(t *testing.T) {
		eventually(t, 3*time.Minute, "a running broker Pod per node and device", func() (bool, string) {
			pods := l.pods(ctx, "default", echoConfig)
			running := 0
			for _, p := range pods {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == 6, fmt.Sprintf("%d running of %d", running, len(pods))
		})
		for _, p := range l.pods(ctx, "default", echoConfig) {
			node := p.Labels["akri.sh/target-node"]
			require.Equal(t, node, p.Spec.NodeName, "Pod %s runs on its target node", p.Name)
			dev := p.Annotations["gitbroker.dev/device-id"]
			inst := instance(echoConfig, dev, node)
			require.True(t, strings.HasPrefix(p.Name, inst+"-"), "%s is a Pod of Deployment %s", p.Name, inst)
			akri := map[string]string{
				"akri.sh/configuration":        echoConfig,
				"akri.sh/instance":             inst,
				"akri.sh/target-node":          node,
				"app.kubernetes.io/managed-by": "gitbroker",
				"controller":                   "akri.sh",
			}
			podLabels := maps.Clone(p.Labels)
			delete(podLabels, appsv1.DefaultDeploymentUniqueLabelKey)
			require.Equal(t, akri, podLabels, "Akri's labels on the broker Pod")
			d, err := cluster.Client.AppsV1().Deployments("default").Get(ctx, inst, metav1.GetOptions{})
			require.NoError(t, err)
			// Flux's: the per-configuration Kustomization applied it.
			akri["kustomize.toolkit.fluxcd.io/name"] = "gitbroker-default-" + echoConfig
			akri["kustomize.toolkit.fluxcd.io/namespace"] = FluxNamespace
			require.Equal(t, akri, d.Labels)
			require.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type)
			terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			require.Len(t, terms, 1)
			require.Equal(t, []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}, terms[0].MatchFields)
			digest := strings.ToUpper(strings.TrimPrefix(inst, echoConfig+"-"))
			env := map[string]string{}
			for _, e := range p.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			require.Equal(t, map[string]string{"DEBUG_ECHO_DESCRIPTION": dev, "DEBUG_ECHO_DESCRIPTION_" + digest: dev}, env)
			require.NotContains(t, p.Spec.Containers[0].Resources.Limits, corev1.ResourceName("{{PLACEHOLDER}}"))

			svc, err := cluster.Client.CoreV1().Services("default").Get(ctx, inst+"-svc", metav1.GetOptions{})
			require.NoError(t, err, "instance Service of %s", inst)
			require.Equal(t, map[string]string{"controller": "akri.sh", "akri.sh/instance": inst}, svc.Spec.Selector)
			require.Contains(t, svc.Spec.ClusterIP, "127.65.", "Service addresses stay on loopback")
		}
		svc, err := cluster.Client.CoreV1().Services("default").Get(ctx, echoConfig+"-svc", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"controller": "akri.sh", "akri.sh/configuration": echoConfig}, svc.Spec.Selector)
	})

	t.Run("Jobs complete and the after: Pod waits for their record", func(t *testing.T) {
		formatJobs = l.waitJobsComplete(t, format, 3)
		firstFirmware = l.waitJobsComplete(t, firmware, 3)
		for _, j := range l.jobs(ctx, firmware) {
			node := nodeOfJob(t, j)
			require.Equal(t, instance(firmware, "plc-1", node), j.Labels["akri.sh/instance"], "Job %s is pinned to its device's node", j.Name)
			require.Equal(t, "4.2.0", envOf(j.Spec.Template.Spec.Containers[0], "FIRMWARE_VERSION"))
			require.Equal(t, "disabled", j.Annotations["kustomize.toolkit.fluxcd.io/prune"])
		}
		// Succeeded, but the recorder has not written it down yet: the
		// renderer cannot know, so the reader must not start.
		waitFluxApplied(t, l.srv)
		require.Empty(t, l.pods(ctx, "plant", reader), "journal-reader Pods before journal-format is recorded")
	})

	var changed string
	t.Run("a changed Configuration waits for the previous runs to be recorded", func(t *testing.T) {
		cfg := l.file(t, "configurations/plc-firmware.yaml")
		require.Contains(t, cfg, `FIRMWARE_VERSION: "4.2.0"`)
		changed = l.commit(map[string]string{
			"configurations/plc-firmware.yaml": strings.Replace(cfg, `"4.2.0"`, `"4.3.0"`, 1),
		}, nil, "plc-firmware: 4.3.0")
		l.waitRendered(t, changed)
		waitFluxApplied(t, l.srv)
		require.Equal(t, firstFirmware, uids(l.jobs(ctx, firmware)), "no new firmware Job while the previous runs are unrecorded")
	})

	// One firmware run's Pods are deleted before the recorder ever sees it finished (it is not
	// running yet): Pod garbage collection, or a drain, while the recorder was down.
	gone := firstKey(firstFirmware)
	t.Run("recorded Jobs move to history and stay in the cluster", func(t *testing.T) {
		l.deleteJobPods(t, gone)
		l.startRecorder(t)
		// The recorder writes each outcome; the renderer then retires the
		// Jobs to history/ and starts what waited on them.
		eventually(t, 3*time.Minute, "the first runs recorded and moved to history/", func() (bool, string) {
			for name := range merge(formatJobs, firstFirmware) {
				if _, ok := l.srv.On(verify.StatusBranch).File("status/jobs/plant/" + name + ".yaml"); !ok {
					return false, name + " not recorded"
				}
				if l.historyFile(name) == "" {
					return false, name + " not in history/"
				}
				if l.renderedFile(name) != "" {
					return false, name + " still in rendered/"
				}
			}
			return true, ""
		})
		record, _ := l.srv.On(verify.StatusBranch).File("status/jobs/plant/" + firstKey(formatJobs) + ".yaml")
		require.Contains(t, record, "outcome: Succeeded")
		require.Contains(t, record, "renderedFrom: ")
		rec := l.record(t, firstKey(formatJobs))
		require.Len(t, rec.Spec.Pods, 1, "the Pod's end is recorded")
		require.Equal(t, nodeOfJob(t, l.jobByName(ctx, firstKey(formatJobs))), rec.Spec.Pods[0].Node)
		require.EqualValues(t, 0, *rec.Spec.Pods[0].Containers[0].ExitCode)
		require.Empty(t, rec.Spec.Pods[0].Containers[0].Log, "journal-format did not ask for its logs")

		// plc-firmware asks for its log tails (fixtures/demo): kwok serves them through the
		// API server's pods/log, the recorder reads them as its ServiceAccount and redacts them.
		for name := range firstFirmware {
			rec := l.record(t, name)
			if name == gone {
				require.Empty(t, rec.Spec.Pods)
				require.Contains(t, rec.Spec.PodsNote, "none of the Job's Pods were left when the recorder saw it finished", "the record says what was lost")
				continue
			}
			require.Len(t, rec.Spec.Pods, 1, name)
			c := rec.Spec.Pods[0].Containers[0]
			require.Equal(t, "flash", c.Name)
			require.Equal(t, firmwareLog, c.Log, "%s keeps its log tail, redacted", name)
			require.Equal(t, "1 redacted", c.LogNote)
		}

		eventually(t, 3*time.Minute, "the 4.3.0 firmware runs", func() (bool, string) {
			jobs := l.jobs(ctx, firmware)
			return len(jobs) == 6, fmt.Sprintf("%d firmware Jobs", len(jobs))
		})
		for _, j := range l.jobs(ctx, firmware) {
			if _, old := firstFirmware[j.Name]; old {
				continue
			}
			require.Equal(t, "4.3.0", envOf(j.Spec.Template.Spec.Containers[0], "FIRMWARE_VERSION"), "new run %s", j.Name)
		}
		eventually(t, 3*time.Minute, "journal-reader Pods once journal-format is recorded", func() (bool, string) {
			pods := l.pods(ctx, "plant", reader)
			return len(pods) == 3, fmt.Sprintf("%d reader Pods", len(pods))
		})
		for _, p := range l.pods(ctx, "plant", reader) {
			formatJob := l.jobOf(ctx, format, p.Labels["akri.sh/target-node"])
			require.NotNil(t, formatJob.Status.CompletionTime)
			require.True(t, p.CreationTimestamp.After(formatJob.Status.CompletionTime.Time) || p.CreationTimestamp.Equal(formatJob.Status.CompletionTime),
				"reader %s created %s, before its format Job completed %s", p.Name, p.CreationTimestamp, formatJob.Status.CompletionTime)
		}

		l.waitJobsComplete(t, firmware, 6)
		eventually(t, 3*time.Minute, "every run recorded and in history/", func() (bool, string) {
			for _, j := range append(l.jobs(ctx, firmware), l.jobs(ctx, format)...) {
				if l.historyFile(j.Name) == "" {
					return false, j.Name + " not in history/"
				}
			}
			return true, ""
		})
		waitFluxApplied(t, l.srv)
		// Flux pruned nothing: every Job is still there, the same object,
		// never patched since kustomize-controller created it.
		all := merge(uids(l.jobs(ctx, firmware)), uids(l.jobs(ctx, format)))
		for name, uid := range merge(formatJobs, firstFirmware) {
			require.Equal(t, uid, all[name], "Job %s kept, not re-created", name)
		}
		for _, j := range append(l.jobs(ctx, firmware), l.jobs(ctx, format)...) {
			require.EqualValues(t, 1, j.Generation, "Job %s never patched", j.Name)
			require.Equal(t, "IfNotPresent", j.Annotations["kustomize.toolkit.fluxcd.io/ssa"])
			byFlux := 0
			for _, mf := range j.ManagedFields {
				if mf.Manager == "kustomize-controller" {
					byFlux++
					require.Equal(t, metav1.ManagedFieldsOperationApply, mf.Operation)
					require.False(t, mf.Time.After(j.CreationTimestamp.Add(2*time.Second)),
						"Job %s applied again by Flux at %s (created %s)", j.Name, mf.Time, j.CreationTimestamp)
				}
			}
			require.Equal(t, 1, byFlux, "Job %s was created by Flux, once", j.Name)
		}
	})

	t.Run("a finished Job's log tail outlives its Pods", func(t *testing.T) {
		for name := range firstFirmware {
			if name != gone {
				l.deleteJobPods(t, name)
			}
		}
		for name := range firstFirmware {
			if name == gone {
				continue
			}
			entry := l.historyFile(name)
			require.NotEmpty(t, entry)
			data, ok := l.srv.On(verify.RenderedBranch).File(entry)
			require.True(t, ok)
			require.Contains(t, data, "kind: JobRecord")
			require.Contains(t, data, "flashing 4.2.0 onto plc-1", "%s: the history entry holds the log tail the Pod no longer can", entry)
			require.NotContains(t, data, "hunter2")
		}
	})

	t.Run("a vanished device's Pods are pruned, its Jobs stay", func(t *testing.T) {
		before := merge(uids(l.jobs(ctx, firmware)), uids(l.jobs(ctx, format)))
		require.NoError(t, os.WriteFile(l.avail["edge-3"], []byte("OFFLINE\n"), 0o644))
		gone := []string{instance(echoConfig, "foo0", "edge-3"), instance(echoConfig, "bar0", "edge-3")}
		eventually(t, 3*time.Minute, "edge-3's broker Pods and Services pruned", func() (bool, string) {
			n := 0
			for _, ns := range []string{"default", "plant"} {
				for _, p := range l.managedPods(ctx, ns) {
					if p.Labels["akri.sh/target-node"] == "edge-3" {
						n++
					}
				}
			}
			if n > 0 {
				return false, fmt.Sprintf("%d Pods of edge-3", n)
			}
			for _, inst := range gone {
				_, err := cluster.Client.CoreV1().Services("default").Get(ctx, inst+"-svc", metav1.GetOptions{})
				if !apierrors.IsNotFound(err) {
					return false, fmt.Sprintf("Service %s-svc still there (%v)", inst, err)
				}
			}
			return true, ""
		})
		inv, _ := l.srv.On(verify.InventoryBranch("edge-3")).File("inventory/edge-3.yaml")
		require.NotContains(t, inv, "id: ", "edge-3's inventory lists no device")
		waitFluxApplied(t, l.srv)
		require.Equal(t, before, merge(uids(l.jobs(ctx, firmware)), uids(l.jobs(ctx, format))), "finished Jobs stay")
		require.Len(t, l.pods(ctx, "default", echoConfig), 4)
	})

	t.Run("a device appears: time to its Pod", func(t *testing.T) {
		start := time.Now()
		require.NoError(t, os.WriteFile(l.avail["edge-3"], nil, 0o644))
		var inInventory, rendered time.Duration
		eventually(t, 3*time.Minute, "edge-3's Pods back", func() (bool, string) {
			if inInventory == 0 {
				if inv, _ := l.srv.On(verify.InventoryBranch("edge-3")).File("inventory/edge-3.yaml"); strings.Contains(inv, "id: foo0") {
					inInventory = time.Since(start)
				}
			}
			if rendered == 0 && l.renderedFile("deployment-"+instance(echoConfig, "foo0", "edge-3")) != "" {
				rendered = time.Since(start)
			}
			n := 0
			for _, p := range l.pods(ctx, "default", echoConfig) {
				if p.Labels["akri.sh/target-node"] == "edge-3" {
					n++
				}
			}
			return n == 2, fmt.Sprintf("%d of edge-3's Pods", n)
		})
		appeared := time.Since(start)
		report := fmt.Sprintf("device appeared -> Pod in the cluster: %s (in the inventory after %s, rendered after %s); "+
			"intervals: agent %s, renderer %s, GitRepository %s",
			appeared.Round(10*time.Millisecond), inInventory.Round(10*time.Millisecond), rendered.Round(10*time.Millisecond),
			agentInterval, rendererInterval, sourceInterval)
		t.Log(report)
		fmt.Println("e2e report:", report)
		eventually(t, 2*time.Minute, "edge-3's reader Pod back (its format Job is in history)", func() (bool, string) {
			for _, p := range l.pods(ctx, "plant", reader) {
				if p.Labels["akri.sh/target-node"] == "edge-3" {
					return true, ""
				}
			}
			return false, "no reader Pod on edge-3"
		})
	})

	t.Run("a changed Pod broker replaces its Pods", func(t *testing.T) {
		// A Pod's env cannot be changed in place: the Pods must be
		// re-created, not patched.
		cfg := l.file(t, "configurations/akri-debug-echo.yaml")
		require.Contains(t, cfg, "  capacity: 2")
		old := map[string]types.UID{}
		for _, p := range l.pods(ctx, "default", echoConfig) {
			old[p.Name] = p.UID
		}
		l.commit(map[string]string{
			"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "  capacity: 2", "  capacity: 2\n  brokerProperties:\n    RESOLUTION: 1080p", 1),
		}, nil, "akri-debug-echo: 1080p")
		eventually(t, 3*time.Minute, "every broker Pod re-created with the new env, running", func() (bool, string) {
			pods := l.pods(ctx, "default", echoConfig)
			n := 0
			for _, p := range pods {
				if envOf(p.Spec.Containers[0], "RESOLUTION") == "1080p" && p.Status.Phase == corev1.PodRunning && p.UID != old[p.Name] {
					n++
				}
			}
			return n == len(old) && len(pods) == len(old), fmt.Sprintf("%d of %d re-created", n, len(old))
		})
	})

	t.Run("an invalid Configuration changes nothing in the cluster", func(t *testing.T) {
		waitFluxApplied(t, l.srv)
		before := l.settled(t)
		cfg := l.file(t, "configurations/akri-debug-echo.yaml")
		seen := len(logLines(t, l.renderer.Log))
		l.commit(map[string]string{
			"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "image: ", "imagePulPolicy: Always\n        image: ", 1),
		}, nil, "akri-debug-echo: a typo")
		line := l.waitInvalid(t, seen, "configurations/akri-debug-echo.yaml")
		require.Contains(t, line, "configurations/akri-debug-echo.yaml")
		require.Contains(t, line, "imagePulPolicy")
		waitFluxApplied(t, l.srv)
		require.Equal(t, before, l.state(ctx))
		// Restore it, so later steps start from valid inputs.
		l.commit(map[string]string{"configurations/akri-debug-echo.yaml": cfg}, nil, "akri-debug-echo: fix the typo")
	})

	t.Run("ttlSecondsAfterFinished is refused", func(t *testing.T) {
		waitFluxApplied(t, l.srv)
		before := l.settled(t)
		cfg := l.file(t, "configurations/plc-firmware.yaml")
		ttl := strings.NewReplacer("name: plc-firmware", "name: plc-firmware-ttl", "backoffLimit: 2", "backoffLimit: 2\n      ttlSecondsAfterFinished: 600").Replace(cfg)
		require.Contains(t, ttl, "ttlSecondsAfterFinished")
		seen := len(logLines(t, l.renderer.Log))
		l.commit(map[string]string{"configurations/plc-firmware-ttl.yaml": ttl}, nil, "plc-firmware-ttl")
		line := l.waitInvalid(t, seen, "configurations/plc-firmware-ttl.yaml")
		require.Contains(t, line, "configurations/plc-firmware-ttl.yaml")
		require.Contains(t, line, "ttlSecondsAfterFinished")
		waitFluxApplied(t, l.srv)
		require.Empty(t, l.jobs(ctx, "plc-firmware-ttl"))
		for _, f := range l.srv.On(verify.RenderedBranch).Files() {
			if strings.HasPrefix(f, "rendered/") || strings.HasPrefix(f, "history/") {
				require.NotContains(t, f, "plc-firmware-ttl", "nothing rendered for the refused Configuration")
			}
		}
		require.Equal(t, before, l.state(ctx))
	})

	t.Run("the standby renderer takes over", func(t *testing.T) {
		require.False(t, hasLine(t, l.standby, "render committed"), "the standby never rendered while the other led")
		l.renderer.Stop(30 * time.Second)
		done, err := l.renderer.Exited()
		require.True(t, done)
		require.NoError(t, err, "the leader stops cleanly on SIGTERM")
		cfg := l.file(t, "configurations/akri-debug-echo.yaml")
		require.Contains(t, cfg, "RESOLUTION: 1080p")
		l.commit(map[string]string{
			"configurations/akri-debug-echo.yaml": strings.Replace(cfg, "\n  brokerProperties:\n    RESOLUTION: 1080p", "", 1),
		}, nil, "akri-debug-echo: back to the default resolution")
		eventually(t, time.Minute, "the standby to lead and render", func() (bool, string) {
			return hasLine(t, l.standby, "leading: rendering") && hasLine(t, l.standby, "render committed"), "not yet"
		})
		webhookLeads(t, l.standby)
		eventually(t, 3*time.Minute, "the broker Pods re-created without the property", func() (bool, string) {
			pods := l.pods(ctx, "default", echoConfig)
			n := 0
			for _, p := range pods {
				if envOf(p.Spec.Containers[0], "RESOLUTION") == "" && p.Status.Phase == corev1.PodRunning {
					n++
				}
			}
			return n == 6 && len(pods) == 6, fmt.Sprintf("%d of %d", n, len(pods))
		})
	})
}

// hasLine reports whether a daemon has logged a line with that msg.
func hasLine(t *testing.T, g *gbProcess, msg string) bool {
	for _, line := range logLines(t, g.Log) {
		if line["msg"] == msg {
			return true
		}
	}
	return false
}

// firmwareLog is what every container prints here (kwok serves it as their log), as the
// recorder keeps it for plc-firmware, which redacts password=.
const firmwareLog = "flashing 4.2.0 onto plc-1\n[REDACTED] accepted\ndone\n"

// record is the JobRecord of a Job on the recorder's ref.
func (l *loop) record(t *testing.T, job string) *api.JobRecord {
	t.Helper()
	p := api.JobRecordPath("plant", job)
	data, ok := l.srv.On(verify.StatusBranch).File(p)
	require.True(t, ok, "%s recorded", job)
	rec, errs := api.ParseJobRecordFile(p, []byte(data))
	require.Empty(t, errs)
	return rec.JobRecord
}

func (l *loop) jobByName(ctx context.Context, name string) batchv1.Job {
	j, err := cluster.Client.BatchV1().Jobs("plant").Get(ctx, name, metav1.GetOptions{})
	require.NoError(l.t, err)
	return *j
}

// deleteJobPods deletes a finished Job's Pods, as Pod garbage collection or a drain does, and
// waits until they are gone.
func (l *loop) deleteJobPods(t *testing.T, job string) {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job}
	require.NoError(t, cluster.Client.CoreV1().Pods("plant").DeleteCollection(ctx, metav1.DeleteOptions{}, sel))
	eventually(t, time.Minute, job+"'s Pods deleted", func() (bool, string) {
		pods, err := cluster.Client.CoreV1().Pods("plant").List(ctx, sel)
		require.NoError(t, err)
		return len(pods.Items) == 0, fmt.Sprintf("%d Pods left", len(pods.Items))
	})
}

// startLoop prepares the cluster for the scenario and starts everything
// that writes to the repository except the recorder.
func startLoop(t *testing.T) *loop {
	ctx := context.Background()
	for _, ns := range []string{"plant", fleetSystem} {
		require.NoError(t, cluster.CreateNamespace(ctx, ns))
	}
	// The renderer and the recorder run as their ServiceAccounts, with the
	// RBAC in deploy/: the permissions they are given are the ones tested.
	applyWritersRBAC(t, cluster)

	require.NoError(t, cluster.SetContainerLog("flashing 4.2.0 onto plc-1", "password=hunter2 accepted", "done"))

	files := map[string]string{}
	seed, err := filepath.Glob("../fixtures/demo/repo/configurations/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, seed)
	for _, f := range seed {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		files["configurations/"+filepath.Base(f)] = string(data)
	}
	settings, err := os.ReadFile("testdata/gitbroker.yaml")
	require.NoError(t, err)
	files["gitbroker.yaml"] = string(settings)
	l := &loop{t: t, srv: gitsynctest.NewServer(t, "main", files), avail: map[string]string{}, keys: map[string]string{}}
	// Every writer and a person get a key; a person's signed commit enrolls them all.
	l.keys, l.allowed = writerKeys(t, append([]string{"renderer", "recorder", "alice@example.com"}, nodePrincipals(nodes)...))
	l.commit(map[string]string{".gitbroker/allowed_signers": l.allowed}, nil, "enroll the writers")
	// The agents pin the renderer's key, as deploy/ does: allowed_signers names it as renderer.
	rendererKey := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(rendererKey, []byte(l.allowed), 0o644))
	l.rendererKey = rendererKey

	// Flux's objects are deploy/flux's, pointed at this server, fetching often, and verifying
	// the renderer's signature; its applier is granted the two broker namespaces.
	applyFlux(t, FluxNamespace, l.srv.URL(), l.keys["renderer"]+".pub", "default", "plant")

	for _, n := range nodes {
		require.NoError(t, cluster.AddNode(ctx, n))
		l.avail[n] = filepath.Join(t.TempDir(), "availability")
		startGitbroker(t, "agent-"+n, "agent started", "agent", "--allow-debug-echo",
			"--git", l.srv.URL(), "--branch", "main", "--node", n, "--signing-key", l.keys[trust.NodePrincipal(n)], "--renderer-key", rendererKey,
			"--interval", agentInterval.String(),
			"--grace-period", graceVanished.String(), "--local-grace-period", graceVanished.String(),
			"--debug-echo-shared=false", "--debug-echo-availability-file", l.avail[n],
			"--discovery-handlers-dir", "",
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	}
	// Two renderer replicas, as deploy/ runs them: one holds the Lease and
	// renders, the other stands by.
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, fleetSystem, "gitbroker-renderer")
	require.NoError(t, err)
	var replicas []*gbProcess
	// Each serves push notifications (deploy/'s gitbroker-notify Secret, here the nudge's
	// alone), and the one that leads points the gitbroker-renderer-webhook Service at itself.
	notifyDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(notifyDir, "nudge-secret"), []byte("loop-nudge\n"), 0o600))
	for i, name := range []string{"renderer-a", "renderer-b"} {
		replicas = append(replicas, startGitbrokerEnv(t, name, "renderer started",
			// Pod addresses as a cluster gives them (an EndpointSlice refuses loopback ones); only
			// the EndpointSlice is checked, nothing is sent there.
			[]string{"POD_NAME=" + name, fmt.Sprintf("POD_IP=10.244.0.%d", i+1)}, "render",
			"--git", l.srv.URL(), "--branch", "main", "--watch", "--interval", rendererInterval.String(), "--signing-key", l.keys["renderer"],
			"--enable-leader-election", "--leader-election-namespace", fleetSystem, "--kubeconfig", kubeconfig,
			"--leader-election-lease-duration", "15s", "--leader-election-renew-deadline", "10s", "--leader-election-retry-period", "1s",
			"--webhook-addr", "127.0.0.1:0", "--notify-secrets-dir", notifyDir,
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"))
	}
	eventually(t, time.Minute, "one renderer to hold the Lease", func() (bool, string) {
		for i, r := range replicas {
			if hasLine(t, r, "leading: rendering") {
				l.renderer, l.standby = r, replicas[1-i]
				return true, ""
			}
		}
		return false, "no leader yet"
	})
	lease, err := cluster.Client.CoordinationV1().Leases(fleetSystem).Get(ctx, "gitbroker-renderer", metav1.GetOptions{})
	require.NoError(t, err, "the renderer's Role allows its Lease")
	require.NotEmpty(t, *lease.Spec.HolderIdentity)
	webhookLeads(t, l.renderer)
	return l
}

// webhookLeads waits for the gitbroker-renderer-webhook EndpointSlice to name the leader's Pod
// (deploy/'s Role allows the renderer that one EndpointSlice).
func webhookLeads(t *testing.T, leader *gbProcess) {
	t.Helper()
	pod := leader.Name // its POD_NAME
	eventually(t, time.Minute, "the webhook Service to point at "+pod, func() (bool, string) {
		es, err := cluster.Client.DiscoveryV1().EndpointSlices(fleetSystem).Get(context.Background(), "gitbroker-renderer-webhook", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(es.Endpoints) != 1 || es.Endpoints[0].TargetRef == nil {
			return false, fmt.Sprintf("%+v", es.Endpoints)
		}
		return es.Endpoints[0].TargetRef.Name == pod && es.Labels["kubernetes.io/service-name"] == "gitbroker-renderer-webhook",
			es.Endpoints[0].TargetRef.Name + " " + strings.Join(es.Endpoints[0].Addresses, ",")
	})
}

func (l *loop) startRecorder(t *testing.T) {
	kubeconfig, err := cluster.ServiceAccountKubeconfig(context.Background(), fleetSystem, "gitbroker-recorder")
	require.NoError(t, err)
	l.recorder = startGitbroker(l.t, "recorder", "recorder started", "record",
		"--git", l.srv.URL(), "--branch", "main", "--kubeconfig", kubeconfig, "--batch", "500ms", "--signing-key", l.keys["recorder"], "--renderer-key", l.rendererKey,
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
}

// commit is a person's signed commit on main.
func (l *loop) commit(files map[string]string, remove []string, message string) string {
	return l.srv.CommitSigned(l.keys["alice@example.com"], files, remove, message)
}

func nodePrincipals(nodes []string) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, trust.NodePrincipal(n))
	}
	return out
}

// file is a file at the branch head, which must exist.
func (l *loop) file(t *testing.T, name string) string {
	data, ok := l.srv.File(name)
	require.True(t, ok, "%s at the head", name)
	return data
}

// historyFile and renderedFile find a file under history/ or rendered/
// whose name contains name.
func (l *loop) historyFile(name string) string  { return l.find("history/", name) }
func (l *loop) renderedFile(name string) string { return l.find("rendered/", name) }

func (l *loop) find(prefix, name string) string {
	for _, f := range l.srv.On(verify.RenderedBranch).Files() {
		if strings.HasPrefix(f, prefix) && strings.Contains(filepath.Base(f), name) {
			return f
		}
	}
	return ""
}

// waitRendered waits until the renderer has finished two renders that
// started after source was committed, so source has been rendered whether
// or not it changed a file.
func (l *loop) waitRendered(t *testing.T, source string) {
	t.Helper()
	n := l.renderer.metric(t, "gitbroker_renderer_renders_total")
	eventually(t, time.Minute, "the renderer to render "+source[:12], func() (bool, string) {
		m := l.renderer.metric(t, "gitbroker_renderer_renders_total")
		return m >= n+2, fmt.Sprintf("%v renders since", m-n)
	})
}

// waitInvalid waits for a renderer log line, after the first seen, that
// reports invalid inputs in file, and returns its error.
func (l *loop) waitInvalid(t *testing.T, seen int, file string) string {
	t.Helper()
	var found string
	eventually(t, time.Minute, "the renderer to report invalid inputs in "+file, func() (bool, string) {
		lines := logLines(t, l.renderer.Log)
		for _, line := range lines[min(seen, len(lines)):] {
			msg := fmt.Sprint(line["error"])
			if strings.HasPrefix(fmt.Sprint(line["msg"]), "invalid inputs") && strings.Contains(msg, file) {
				found = msg
				return true, ""
			}
		}
		return false, "no such line"
	})
	return found
}

func (l *loop) managedPods(ctx context.Context, ns string) []corev1.Pod {
	list, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: managed})
	require.NoError(l.t, err)
	return list.Items
}

func (l *loop) pods(ctx context.Context, ns, configuration string) []corev1.Pod {
	list, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=" + configuration})
	require.NoError(l.t, err)
	return list.Items
}

func (l *loop) jobs(ctx context.Context, configuration string) []batchv1.Job {
	list, err := cluster.Client.BatchV1().Jobs("plant").List(ctx, metav1.ListOptions{LabelSelector: managed + ",akri.sh/configuration=" + configuration})
	require.NoError(l.t, err)
	return list.Items
}

// jobOf is the (single) Job of a configuration pinned to node.
func (l *loop) jobOf(ctx context.Context, configuration, node string) batchv1.Job {
	for _, j := range l.jobs(ctx, configuration) {
		if nodeOfJob(l.t, j) == node {
			return j
		}
	}
	l.t.Fatalf("no %s Job on %s", configuration, node)
	return batchv1.Job{}
}

// waitJobsComplete waits for n Jobs of a configuration to complete on kwok
// and returns them by name.
func (l *loop) waitJobsComplete(t *testing.T, configuration string, n int) map[string]types.UID {
	t.Helper()
	ctx := context.Background()
	eventually(t, 3*time.Minute, fmt.Sprintf("%d %s Jobs complete", n, configuration), func() (bool, string) {
		jobs := l.jobs(ctx, configuration)
		done := 0
		for _, j := range jobs {
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
					done++
				}
			}
		}
		return len(jobs) == n && done == n, fmt.Sprintf("%d Jobs, %d complete", len(jobs), done)
	})
	return uids(l.jobs(ctx, configuration))
}

// state is what the scenario's objects look like: every managed Pod,
// Service and Job with its UID and resourceVersion.
func (l *loop) state(ctx context.Context) []string {
	var out []string
	for _, ns := range []string{"default", "plant"} {
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: managed})
		require.NoError(l.t, err)
		for _, p := range pods.Items {
			out = append(out, fmt.Sprintf("pod %s/%s %s %s", ns, p.Name, p.UID, p.ResourceVersion))
		}
		svcs, err := cluster.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: managed})
		require.NoError(l.t, err)
		for _, s := range svcs.Items {
			out = append(out, fmt.Sprintf("service %s/%s %s %s", ns, s.Name, s.UID, s.ResourceVersion))
		}
		jobs, err := cluster.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: managed})
		require.NoError(l.t, err)
		for _, j := range jobs.Items {
			out = append(out, fmt.Sprintf("job %s/%s %s %s", ns, j.Name, j.UID, j.ResourceVersion))
		}
	}
	sort.Strings(out)
	return out
}

// settled waits until every managed Pod has reached its phase (Running,
// or Succeeded for a Job's) and nothing changes for two seconds, and
// returns that state.
func (l *loop) settled(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var prev []string
	eventually(t, 2*time.Minute, "the cluster to settle", func() (bool, string) {
		for _, ns := range []string{"default", "plant"} {
			for _, p := range l.managedPods(ctx, ns) {
				if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodSucceeded {
					prev = nil
					return false, fmt.Sprintf("Pod %s is %s", p.Name, p.Status.Phase)
				}
			}
		}
		cur := l.state(ctx)
		same := prev != nil && fmt.Sprint(prev) == fmt.Sprint(cur)
		prev = cur
		if !same {
			time.Sleep(2 * time.Second)
		}
		return same, "still changing"
	})
	return prev
}

// nodeOfJob is the node a Job's required node affinity pins it to.
func nodeOfJob(t *testing.T, j batchv1.Job) string {
	a := j.Spec.Template.Spec.Affinity
	require.NotNil(t, a, "Job %s has node affinity", j.Name)
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	require.Len(t, terms, 1)
	require.Len(t, terms[0].MatchFields, 1)
	require.Len(t, terms[0].MatchFields[0].Values, 1)
	return terms[0].MatchFields[0].Values[0]
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func uids(jobs []batchv1.Job) map[string]types.UID {
	m := map[string]types.UID{}
	for _, j := range jobs {
		m[j.Name] = j.UID
	}
	return m
}

func merge(ms ...map[string]types.UID) map[string]types.UID {
	out := map[string]types.UID{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func firstKey(m map[string]types.UID) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys[0]
}
