//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The cluster benchmark's measurements: the control plane's CPU, the API server's request counts,
// the Flux controllers' reconciles, and profiles.

// profileController takes a CPU profile of the first seconds of a phase from a Flux
// controller's pprof endpoint into file, when file is not empty; the function it returns waits
// for it.
func profileController(t testing.TB, name, file string, seconds int) (wait func()) {
	t.Helper()
	if file == "" {
		return func() {}
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", cluster.Process(name).Metrics, seconds))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s's pprof: %s", name, resp.Status)
			}
			f, err := os.Create(file)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}()
	}()
	return func() {
		t.Helper()
		require.NoError(t, <-done)
		t.Logf("%s's CPU profile of the phase's first %d s: %s", name, seconds, file)
	}
}

// dumpAPIServer saves, into dir, once a minute from the first minute of a phase until the
// function it returns is called: the API server's goroutines with their stacks and how long
// each has waited (goroutine-<s>.txt), a 20-second CPU profile (cpu-<s>.pprof) and its metrics
// (metrics-<s>.txt), s being the seconds since the phase began. It needs the API server's
// profiling endpoints: GITBROKER_E2E_KUBE_APISERVER_ARGS=--profiling. Where requests wait
// while the API server's CPU is idle, the goroutines say on what.
func dumpAPIServer(t testing.TB, dir string) (stop func()) {
	t.Helper()
	if dir == "" {
		return func() {}
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	get := func(ctx context.Context, path string, params map[string]string) ([]byte, error) {
		req := cluster.Client.CoreV1().RESTClient().Get().AbsPath(path)
		for k, v := range params {
			req = req.Param(k, v)
		}
		return req.DoRaw(ctx)
	}
	go func() {
		done <- func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Until(start.Add(time.Duration(int(time.Since(start).Minutes())+1) * time.Minute))):
				}
				s := int(time.Since(start).Round(time.Second).Seconds())
				for _, d := range []struct {
					file, path string
					params     map[string]string
				}{
					{fmt.Sprintf("goroutine-%d.txt", s), "/debug/pprof/goroutine", map[string]string{"debug": "2"}},
					{fmt.Sprintf("metrics-%d.txt", s), "/metrics", nil},
					{fmt.Sprintf("cpu-%d.pprof", s), "/debug/pprof/profile", map[string]string{"seconds": "20"}},
				} {
					data, err := get(ctx, d.path, d.params)
					if ctx.Err() != nil {
						return nil
					}
					if err != nil {
						return fmt.Errorf("API server %s: %w", d.path, err)
					}
					if err := os.WriteFile(filepath.Join(dir, d.file), data, 0o644); err != nil {
						return err
					}
				}
			}
		}()
	}()
	return func() {
		t.Helper()
		cancel()
		require.NoError(t, <-done)
		t.Logf("the API server's goroutines, CPU profiles and metrics, once a minute of the phase: %s", dir)
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// logKustomizations logs when each Kustomization of ns became Ready, from start.
func logKustomizations(t testing.TB, ns string, start time.Time) {
	t.Helper()
	ks, err := cluster.Dynamic.Resource(kustomizationGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var lines []string
	for _, k := range ks.Items {
		conds, _, _ := unstructured.NestedSlice(k.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				at, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
				inv, _, _ := unstructured.NestedSlice(k.Object, "status", "inventory", "entries")
				lines = append(lines, fmt.Sprintf("%6.0fs %s (%d objects)", at.Sub(start).Seconds(), k.GetName(), len(inv)))
			}
		}
	}
	sort.Strings(lines)
	t.Logf("Ready at:\n%s", strings.Join(lines, "\n"))
}

// cpuMeter reads the CPU time of the cluster's processes.
type cpuMeter struct {
	t     testing.TB
	names []string
	at    map[string]time.Duration
}

type cpuUse map[string]time.Duration

func (u cpuUse) String() string {
	var parts []string
	for _, n := range []string{"kube-apiserver", "etcd", "kustomize-controller", "source-controller", "kube-controller-manager", "kube-scheduler", "kwok", "steal"} {
		if d, ok := u[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1fs", n, d.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

func newCPUMeter(t testing.TB, names ...string) *cpuMeter {
	return &cpuMeter{t: t, names: names}
}

func (m *cpuMeter) read() map[string]time.Duration {
	out := map[string]time.Duration{"steal": machineSteal(m.t)}
	for _, n := range m.names {
		p := cluster.Process(n)
		require.NotNil(m.t, p, n)
		d, err := p.CPU()
		require.NoError(m.t, err)
		out[n] = d
	}
	return out
}

func (m *cpuMeter) mark() { m.at = m.read() }

// machineSteal reads the time the hypervisor ran something else while this machine's CPUs
// wanted to run (the steal column of /proc/stat, in USER_HZ of 10 ms), so that a slow phase
// can be told apart from one the host took CPU from (it stayed under 1 s a phase in the runs of
// 2026-12-03, when the same apply took 1.5x longer in one phase than in another).
func machineSteal(t testing.TB) time.Duration {
	data, err := os.ReadFile("/proc/stat")
	require.NoError(t, err)
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	require.True(t, len(f) > 8 && f[0] == "cpu", "/proc/stat: %q", line)
	ticks, err := strconv.ParseInt(f[8], 10, 64)
	require.NoError(t, err, "/proc/stat: steal: %q", line)
	return time.Duration(ticks) * 10 * time.Millisecond
}

func (m *cpuMeter) since() cpuUse {
	now := m.read()
	out := cpuUse{}
	for n, d := range now {
		out[n] = d - m.at[n]
	}
	return out
}

// requestCounts reads the API server's apiserver_request_total by verb, resource, dry run and
// whether the answer was 429 Too Many Requests, and the seconds they took
// (apiserver_request_duration_seconds_sum) under the same key with " seconds" appended.
func requestCounts(t testing.TB) map[string]float64 {
	t.Helper()
	raw, err := cluster.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		suffix := ""
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			if rest, ok = strings.CutPrefix(line, "apiserver_request_duration_seconds_sum{"); !ok {
				continue
			}
			suffix = " seconds"
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(val, `"`)
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		if l["dry_run"] != "" {
			key += " (dry run)"
		}
		if l["code"] == "429" {
			// Refused for the in-flight limit. The API server counts every request it refuses
			// here, including system:masters' ones, which it then serves anyway (and counts
			// again under their real code).
			key += " (429)"
		}
		out[key+suffix] += v
	}
	return out
}

// logRequests logs the requests the API server served since before, most first, with the mean
// time each took.
func logRequests(t testing.TB, what string, before map[string]float64) {
	t.Helper()
	after := requestCounts(t)
	type kv struct {
		k    string
		n, s float64
	}
	var d []kv
	total := 0.0
	for k, v := range after {
		if strings.HasSuffix(k, " seconds") {
			continue
		}
		if n := v - before[k]; n > 0 {
			d = append(d, kv{k, n, after[k+" seconds"] - before[k+" seconds"]})
			total += n
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i].n > d[j].n })
	var lines []string
	for i, e := range d {
		if i == 20 {
			break
		}
		lines = append(lines, fmt.Sprintf("%8.0f %-40s mean %6.0f ms", e.n, e.k, 1000*e.s/e.n))
	}
	refused := 0.0
	for _, e := range d {
		if strings.HasSuffix(e.k, " (429)") {
			refused += e.n
		}
	}
	t.Logf("%s: %.0f API requests (%.0f of them refused 429), most:\n%s", what, total, refused, strings.Join(lines, "\n"))
}

// logReconciles logs, for each Kustomization of ns, the reconciles kustomize-controller finished
// and failed after the first skip lines of its log, the time they took together, and the first
// failure's message.
func logReconciles(t testing.TB, file string, skip int, ns string) {
	t.Helper()
	type tally struct {
		ok, failed int
		took       time.Duration
		firstError string
	}
	all := map[string]*tally{}
	kustomizeLog(t, file, skip, ns, func(line kustomizeLogLine) {
		var took string
		var ok bool
		switch {
		case strings.HasPrefix(line.Msg, "Reconciliation finished in "):
			took, ok = strings.TrimPrefix(line.Msg, "Reconciliation finished in "), true
		case strings.HasPrefix(line.Msg, "Reconciliation failed after "):
			took = strings.TrimPrefix(line.Msg, "Reconciliation failed after ")
		default:
			return
		}
		d, _ := time.ParseDuration(strings.TrimSuffix(strings.Split(took, " ")[0], ","))
		k := all[line.Kustomization.Name]
		if k == nil {
			k = &tally{}
			all[line.Kustomization.Name] = k
		}
		k.took += d
		if ok {
			k.ok++
			return
		}
		k.failed++
		if k.firstError == "" {
			k.firstError = line.Error
			if len(k.firstError) > 160 {
				k.firstError = k.firstError[:160]
			}
		}
	})
	var lines []string
	for name, k := range all {
		lines = append(lines, fmt.Sprintf("%s: %d finished, %d failed, %s in all %s", name, k.ok, k.failed, k.took.Round(time.Second), k.firstError))
	}
	sort.Strings(lines)
	t.Logf("reconciles:\n%s", strings.Join(lines, "\n"))
}
