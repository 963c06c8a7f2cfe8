package render_test

import (
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
)

// recordJob writes the JobRecord the recorder would write for a rendered Job.
func recordJob(t *testing.T, tree render.Tree, jobPath, outcome string) render.Tree {
	t.Helper()
	var job struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	require.NoError(t, yaml.Unmarshal(tree[jobPath], &job))
	m := job.Metadata
	out := render.Tree{}
	for p, b := range tree {
		out[p] = b
	}
	out["status/jobs/"+m.Namespace+"/"+m.Name+".yaml"] = []byte(record(m.Namespace, m.Name,
		m.Labels[api.LabelConfiguration], m.Labels[api.LabelInstance], m.Annotations[api.AnnotationDeviceID], outcome))
	return out
}

func jobs(tree render.Tree, folder string) []string {
	return filesUnder(tree, "rendered/"+folder+"/", "/job-")
}

func TestForbidHoldsNextRunUntilRecorded(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/fw.yaml": jobConfig("fw", ""),
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "plc-1")),
	})
	res := renderOK(t, tree)
	tree = apply(tree, res)
	first := jobs(tree, "default/fw")
	require.Len(t, first, 1)

	// Re-rendering the same inputs never starts another run.
	res = renderOK(t, tree)
	require.False(t, res.Changed())

	// A change to the Configuration makes a new run, held behind the running one.
	tree["configurations/fw.yaml"] = []byte(strings.Replace(jobConfig("fw", ""), `VERSION: "1"`, `VERSION: "2"`, 1))
	res = renderOK(t, tree)
	require.False(t, res.Changed(), "the held run must not be rendered")
	require.Equal(t, 1, res.Plan.Summary.JobsHeld)
	require.Contains(t, planText(res.Plan), "waiting for "+strings.TrimSuffix(strings.TrimPrefix(path.Base(first[0]), "job-"), ".yaml"))

	// The record arrives: the old Job moves to history with its record, the new run starts.
	tree = recordJob(t, tree, first[0], "Succeeded")
	res = renderOK(t, tree)
	tree = apply(tree, res)
	second := jobs(tree, "default/fw")
	require.Len(t, second, 1)
	require.NotEqual(t, first, second)
	hist := filesUnder(tree, "history/jobs/default/fw/", ".yaml")
	require.Len(t, hist, 1)
	require.Contains(t, string(tree[hist[0]]), "kind: JobRecord")
	require.Contains(t, string(tree[hist[0]]), "kind: Job\n")
	require.Equal(t, 1, res.Plan.Summary.JobsRetired)
	require.Equal(t, 1, res.Plan.Summary.JobsStarted)
	require.Contains(t, string(tree[second[0]]), "value: \"2\"")
}

func TestAllowRunsAlongside(t *testing.T) {
	cfg := jobConfig("fw", "  jobPolicy:\n    concurrency: Allow\n")
	tree := repo(map[string]string{
		"configurations/fw.yaml": cfg,
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "plc-1")),
	})
	tree = apply(tree, renderOK(t, tree))
	tree["configurations/fw.yaml"] = []byte(strings.Replace(cfg, `VERSION: "1"`, `VERSION: "2"`, 1))
	tree = apply(tree, renderOK(t, tree))
	require.Len(t, jobs(tree, "default/fw"), 2)
}

func TestOnceRunsOncePerRunID(t *testing.T) {
	cfg := jobConfig("fmt", "  jobPolicy:\n    runPolicy: Once\n")
	tree := repo(map[string]string{
		"configurations/fmt.yaml": cfg,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("fmt", "disk-1")),
	})
	tree = apply(tree, renderOK(t, tree))
	first := jobs(tree, "default/fmt")
	require.Len(t, first, 1)
	tree = recordJob(t, tree, first[0], "Succeeded")
	tree = apply(tree, renderOK(t, tree))
	require.Empty(t, jobs(tree, "default/fmt"))

	// A changed spec does not run a Once Job again...
	tree["configurations/fmt.yaml"] = []byte(strings.Replace(cfg, `VERSION: "1"`, `VERSION: "2"`, 1))
	res := renderOK(t, tree)
	require.False(t, res.Changed())

	// ...a new runID does.
	tree["configurations/fmt.yaml"] = []byte(strings.Replace(cfg, "runPolicy: Once\n", "runPolicy: Once\n    runID: again\n", 1))
	tree = apply(tree, renderOK(t, tree))
	again := jobs(tree, "default/fmt")
	require.Len(t, again, 1)
	require.NotEqual(t, path.Base(first[0]), path.Base(again[0]))
}

func TestRunIDStartsNewOnChangeRun(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/fw.yaml": jobConfig("fw", ""),
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "plc-1")),
	})
	tree = apply(tree, renderOK(t, tree))
	tree = recordJob(t, tree, jobs(tree, "default/fw")[0], "Failed")
	tree = apply(tree, renderOK(t, tree))
	require.Empty(t, jobs(tree, "default/fw"), "a failed run is not retried with unchanged inputs")
	tree["configurations/fw.yaml"] = []byte(jobConfig("fw", "  jobPolicy:\n    runID: retry-1\n"))
	tree = apply(tree, renderOK(t, tree))
	require.Len(t, jobs(tree, "default/fw"), 1)
}

func TestHistoryLimitKeepsNewestRuns(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/fw.yaml": jobConfig("fw", "  jobPolicy:\n    historyLimit: 2\n"),
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "plc-1")),
	})
	var names []string
	for i := 0; i < 4; i++ {
		tree["configurations/fw.yaml"] = []byte(strings.Replace(jobConfig("fw", "  jobPolicy:\n    historyLimit: 2\n"), `VERSION: "1"`, `VERSION: "`+string(rune('a'+i))+`"`, 1))
		tree = apply(tree, renderOK(t, tree))
		js := jobs(tree, "default/fw")
		require.Len(t, js, 1)
		names = append(names, path.Base(js[0]))
		tree = recordJob(t, tree, js[0], "Succeeded")
		// Each run completes an hour after the previous one (10:01, 11:01, ...).
		p := "status/jobs/default/" + strings.TrimSuffix(strings.TrimPrefix(names[i], "job-"), ".yaml") + ".yaml"
		tree[p] = []byte(strings.Replace(string(tree[p]), "10:01:00Z", "1"+string(rune('0'+i))+":01:00Z", 1))
	}
	tree = apply(tree, renderOK(t, tree))
	hist := filesUnder(tree, "history/jobs/default/fw/", ".yaml")
	require.Len(t, hist, 2)
	for _, n := range names[2:] {
		found := false
		for _, h := range hist {
			found = found || path.Base(h) == strings.TrimPrefix(n, "job-")
		}
		require.True(t, found, "newest runs are kept: %s not in %v", n, hist)
	}
}

func TestVanishedDeviceKeepsRunningJob(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/fw.yaml": jobConfig("fw", ""),
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "plc-1", "plc-2")),
	})
	tree = apply(tree, renderOK(t, tree))
	require.Len(t, jobs(tree, "default/fw"), 2)
	tree["inventory/edge-a.yaml"] = []byte(inventory("edge-a", entry("fw", "plc-2")))
	res := renderOK(t, tree)
	tree = apply(tree, res)
	require.Len(t, jobs(tree, "default/fw"), 2, "a Job that may be running is never removed")
	require.Equal(t, 1, res.Plan.Summary.JobsKept)
	require.Contains(t, planText(res.Plan), "its device is gone")
}

func TestDeletedConfigurationKeepsJobsDropsPods(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/fw.yaml":  jobConfig("fw", ""),
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("fw", "plc-1"), entry("cam", "c1", "c2", "c3")),
	})
	tree = apply(tree, renderOK(t, tree))
	delete(tree, "configurations/cam.yaml")
	delete(tree, "configurations/fw.yaml")
	// Removing every Pod and Service is more than the deletion budget allows.
	res := render.Render(render.Request{Files: tree})
	require.NotNil(t, res.Refused)
	require.False(t, res.Changed())
	res = render.Render(render.Request{Files: tree, AllowDeletions: true})
	tree = apply(tree, res)
	require.Len(t, jobs(tree, "default/fw"), 1)
	require.Empty(t, filesUnder(tree, "rendered/default/cam/", ""))
	require.Contains(t, planText(res.Plan), "its Configuration was deleted")
}

func TestAfterWaitsForSucceededJob(t *testing.T) {
	reader := strings.Replace(podConfig, "  name: cam\n", "  name: reader\n  annotations:\n    gitbroker.dev/after: fmt\n", 1)
	tree := repo(map[string]string{
		"configurations/fmt.yaml":    jobConfig("fmt", "  jobPolicy:\n    runPolicy: Once\n"),
		"configurations/reader.yaml": reader,
		"inventory/edge-a.yaml":      inventory("edge-a", entry("fmt", "disk-1"), entry("reader", "disk-1")),
	})
	res := renderOK(t, tree)
	tree = apply(tree, res)
	require.Empty(t, filesUnder(tree, "rendered/default/reader/", "/deployment-"))
	require.Equal(t, 1, res.Plan.Summary.DeploymentsHeld)

	failed := recordJob(t, tree, jobs(tree, "default/fmt")[0], "Failed")
	res = renderOK(t, failed)
	after := apply(failed, res)
	require.Empty(t, filesUnder(after, "rendered/default/reader/", "/deployment-"))
	require.Contains(t, planText(res.Plan), "failed")

	ok := recordJob(t, tree, jobs(tree, "default/fmt")[0], "Succeeded")
	ok = apply(ok, renderOK(t, ok))
	require.Len(t, filesUnder(ok, "rendered/default/reader/", "/deployment-"), 1)
	// The Pod stays once its Job is in history.
	res = renderOK(t, ok)
	require.False(t, res.Changed())
}

// A Configuration that asks for log tails puts its resolved policy on the Jobs it renders, where
// the recorder reads it; turning capture on or off is not a new run.
func TestLogPolicyRidesOnTheJob(t *testing.T) {
	tree := repo(map[string]string{
		"configurations/fw.yaml": jobConfig("fw", ""),
		"inventory/edge-a.yaml":  inventory("edge-a", entry("fw", "plc-1")),
	})
	res := renderOK(t, tree)
	off := jobs(apply(tree, res), "default/fw")
	require.Len(t, off, 1)
	require.NotContains(t, string(res.Files[off[0]]), "gitbroker.dev/log-", "off unless asked for")

	tree["configurations/fw.yaml"] = []byte(jobConfig("fw", "  jobPolicy:\n    logs:\n      tailBytes: 4096\n      redact: ['password=\\S+']\n"))
	fresh := repo(map[string]string{"configurations/fw.yaml": string(tree["configurations/fw.yaml"]), "inventory/edge-a.yaml": inventory("edge-a", entry("fw", "plc-1"))})
	res = renderOK(t, fresh)
	on := jobs(apply(fresh, res), "default/fw")
	require.Equal(t, path.Base(off[0]), path.Base(on[0]), "the same run: log capture is not part of what the Job does")
	job := string(res.Files[on[0]])
	require.Contains(t, job, "gitbroker.dev/log-tail-lines: \"200\"\n")
	require.Contains(t, job, "gitbroker.dev/log-tail-bytes: \"4096\"\n")
	require.Contains(t, job, "gitbroker.dev/log-redact: password=\\S+\n")
}
