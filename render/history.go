package render

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
)

// Run is one finished Job as a person reviewing a device reads it: where its record is and what
// it says.
type Run struct {
	// Cluster is, with spec.clusters, the cluster the Job ran in.
	Cluster       string `json:"cluster,omitempty"`
	Namespace     string `json:"namespace"`
	Configuration string `json:"configuration"`
	Instance      string `json:"instance"`
	Job           string `json:"job"`
	// Path is the history/ entry (the Job with its record), or the status/ record of a Job the
	// renderer has not retired yet.
	Path   string         `json:"path"`
	Record *api.JobRecord `json:"record"`
	// From the Job that ran (history/ keeps it with its record; a Job not retired yet is read
	// from rendered/): its containers' images, the properties its brokers got (broker and
	// device properties, without Akri's digest-suffixed copies), the source commit that
	// rendered it, and the whole Job.
	Images       []string          `json:"images,omitempty"`
	Properties   map[string]string `json:"properties,omitempty"`
	SourceCommit string            `json:"sourceCommit,omitempty"`
	Manifest     *batchv1.Job      `json:"manifest,omitempty"`
}

// RunFilter selects runs; an empty field matches any.
type RunFilter struct {
	Namespace, Configuration, Instance, DeviceID, Node string
	// Outcome is Succeeded or Failed.
	Outcome string
	// Since keeps runs that completed at or after it.
	Since time.Time
}

func (f RunFilter) match(r *api.JobRecord) bool {
	if f.Namespace != "" && r.Namespace != f.Namespace ||
		f.Configuration != "" && r.Spec.Configuration != f.Configuration ||
		f.Instance != "" && r.Spec.Instance != f.Instance ||
		f.DeviceID != "" && r.Spec.DeviceID != f.DeviceID ||
		f.Outcome != "" && !strings.EqualFold(r.Spec.Outcome, f.Outcome) ||
		!f.Since.IsZero() && completion(r).Before(f.Since) {
		return false
	}
	if f.Node == "" {
		return true
	}
	for _, p := range r.Spec.Pods {
		if p.Node == f.Node {
			return true
		}
	}
	return false
}

// Runs lists the finished Jobs of a tree (a work tree, or the rendered branch with the inputs it
// carries): every history/ entry, and every status/ record whose Job is not in history/ yet,
// newest first. A file that cannot be read is returned as an error and skipped.
func Runs(tree Tree, f RunFilter) ([]Run, []error) {
	var out []Run
	var errs []error
	// With spec.clusters each cluster's part is under its own folder (clusters.go): a path is
	// read as one cluster's, and its cluster kept with the run.
	settings, _ := api.ParseSettings(api.SettingsPath, tree[api.SettingsPath])
	inner := func(p string) (cluster, in string) {
		if c, in, ok := api.SplitClusterStatusPath(p); ok {
			return c, in
		}
		for _, dir := range []string{RenderedDir, HistoryDir} {
			if rest, ok := strings.CutPrefix(p, dir); ok {
				if c, rest, ok := strings.Cut(rest, "/"); ok {
					if _, ok := settings.Clusters.Named(c); ok {
						return c, dir + rest
					}
				}
			}
		}
		return "", p
	}
	seen := map[string]bool{}
	for _, p := range tree.Paths() {
		cluster, in := inner(p)
		if !strings.HasPrefix(in, "history/jobs/") {
			continue
		}
		e, err := parseHistory(in, tree[p])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		seen[cluster+"/"+e.record.Namespace+"/"+e.record.Name] = true
		if f.match(e.record) {
			run := Run{Cluster: cluster, Namespace: e.namespace, Configuration: e.config, Instance: e.instance, Job: e.job, Path: p, Record: e.record}
			run.describe(e.manifest)
			out = append(out, run)
		}
	}
	rendered := map[string]string{} // cluster/namespace/job -> its file under rendered/
	for _, p := range tree.Paths() {
		cluster, in := inner(p)
		if name, ok := strings.CutPrefix(path.Base(in), "job-"); ok && strings.HasPrefix(in, RenderedDir) {
			if ref, ok := parseObjectPath(in); ok {
				rendered[cluster+"/"+ref.namespace+"/"+strings.TrimSuffix(name, ".yaml")] = p
			}
		}
	}
	for _, p := range tree.Paths() {
		cluster, in := inner(p)
		if !isRecordPath(in) {
			continue
		}
		rec, perrs := api.ParseJobRecordFile(in, tree[p])
		if len(perrs) > 0 {
			errs = append(errs, perrs)
			continue
		}
		if seen[cluster+"/"+rec.Namespace+"/"+rec.Name] || !f.match(rec.JobRecord) {
			continue
		}
		run := Run{Cluster: cluster, Namespace: rec.Namespace, Configuration: rec.Spec.Configuration, Instance: rec.Spec.Instance, Job: rec.Name, Path: p, Record: rec.JobRecord}
		if f, ok := rendered[cluster+"/"+rec.Namespace+"/"+rec.Name]; ok {
			var job batchv1.Job
			if err := yaml.Unmarshal(tree[f], &job); err == nil {
				run.describe(&job)
			}
		}
		out = append(out, run)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := completion(out[i].Record), completion(out[j].Record)
		if !a.Equal(b) {
			return a.After(b)
		}
		return out[i].Path < out[j].Path
	})
	return out, errs
}

// describe fills in what the Job that ran says: images, properties, source commit.
func (r *Run) describe(job *batchv1.Job) {
	if job == nil {
		return
	}
	r.Manifest = job
	r.SourceCommit = job.Annotations[api.AnnotationRenderedFrom]
	ps := job.Spec.Template.Spec
	for _, c := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
		if !slices.Contains(r.Images, c.Image) {
			r.Images = append(r.Images, c.Image)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				continue
			}
			if r.Properties == nil {
				r.Properties = map[string]string{}
			}
			r.Properties[e.Name] = e.Value
		}
	}
	// Akri gives each property twice, as KEY and KEY_<digest>: keep KEY.
	for k, v := range r.Properties {
		if i := strings.LastIndexByte(k, '_'); i > 0 {
			if base, ok := r.Properties[k[:i]]; ok && base == v {
				delete(r.Properties, k)
			}
		}
	}
}

func completion(r *api.JobRecord) time.Time {
	if r.Spec.CompletionTime != nil {
		return r.Spec.CompletionTime.Time
	}
	return time.Time{}
}

// WriteRuns writes runs for a terminal: per run its outcome and times, per Pod and container the
// node and exit code, and the first lines of each log tail. Every name and text from a record is
// escaped, so neither a log nor a forged record can act on the terminal.
func WriteRuns(w io.Writer, runs []Run, lines int) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "No finished runs.")
		return
	}
	for i, run := range runs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		r := run.Record
		fmt.Fprintf(w, "%s/%s  %s  %s%s\n", printable(run.Namespace), printable(run.Job), r.Spec.Outcome, runTimes(r), printable(clusterSuffix(run.Cluster)))
		fmt.Fprintf(w, "  configuration %s, instance %s, device %s\n", printable(run.Configuration), printable(run.Instance), printable(r.Spec.DeviceID))
		fmt.Fprintf(w, "  record %s\n", printable(run.Path))
		if len(run.Images) > 0 {
			fmt.Fprintf(w, "  image %s\n", printable(strings.Join(run.Images, ", ")))
		}
		if len(run.Properties) > 0 {
			var props []string
			for _, k := range slices.Sorted(maps.Keys(run.Properties)) {
				props = append(props, k+"="+run.Properties[k])
			}
			fmt.Fprintf(w, "  properties %s\n", printable(strings.Join(props, " ")))
		}
		if run.SourceCommit != "" {
			fmt.Fprintf(w, "  rendered from %s\n", printable(run.SourceCommit))
		}
		if r.Spec.Reason != "" || r.Spec.Message != "" {
			fmt.Fprintf(w, "  %s: %s\n", printable(r.Spec.Reason), printable(r.Spec.Message))
		}
		if r.Spec.PodsNote != "" {
			fmt.Fprintf(w, "  note: %s\n", printable(r.Spec.PodsNote))
		}
		for _, p := range r.Spec.Pods {
			fmt.Fprintf(w, "  pod %s on %s (%s)\n", printable(p.Name), orDash(p.Node), orDash(p.Phase))
			for _, c := range append(append([]api.ContainerRecord{}, p.InitContainers...), p.Containers...) {
				writeContainer(w, c, lines)
			}
		}
	}
}

func writeContainer(w io.Writer, c api.ContainerRecord, lines int) {
	end := orDash(c.Reason)
	if c.ExitCode != nil {
		end = fmt.Sprintf("exit %d, %s", *c.ExitCode, end)
	}
	fmt.Fprintf(w, "    %s: %s", printable(c.Name), end)
	if c.Message != "" {
		fmt.Fprintf(w, ": %s", printable(c.Message))
	}
	fmt.Fprintln(w)
	if c.LogNote != "" {
		fmt.Fprintf(w, "      (log: %s)\n", printable(c.LogNote))
	}
	log := c.LogBytes()
	if len(log) == 0 || lines <= 0 {
		return
	}
	if c.LogBase64 != "" {
		fmt.Fprintf(w, "      (log is not UTF-8: %d bytes; shown with escapes)\n", len(log))
	}
	if c.LogTruncated {
		fmt.Fprintln(w, "      (earlier output was not kept)")
	}
	shown := 0
	for len(log) > 0 && shown < lines {
		line := log
		if i := bytes.IndexByte(log, '\n'); i >= 0 {
			line, log = log[:i], log[i+1:]
		} else {
			log = nil
		}
		fmt.Fprintf(w, "      | %s\n", terminalLine(line))
		shown++
	}
	if rest := countLines(log); rest > 0 {
		fmt.Fprintf(w, "      | … %d more lines in the record\n", rest)
	}
}

// terminalLine shows one log line with its control characters and invalid bytes escaped.
func terminalLine(b []byte) string {
	s := strings.TrimSuffix(string(b), "\r")
	q := printable(s)
	if q != s {
		return q[1 : len(q)-1] // the escapes, without the quotes
	}
	return s
}

func countLines(b []byte) int {
	n := bytes.Count(b, []byte{'\n'})
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

func runTimes(r *api.JobRecord) string {
	var parts []string
	if r.Spec.StartTime != nil {
		parts = append(parts, "started "+r.Spec.StartTime.UTC().Format(time.RFC3339))
	}
	if r.Spec.CompletionTime != nil {
		parts = append(parts, "finished "+r.Spec.CompletionTime.UTC().Format(time.RFC3339))
		if r.Spec.StartTime != nil {
			parts = append(parts, "took "+r.Spec.CompletionTime.Sub(r.Spec.StartTime.Time).String())
		}
	}
	return strings.Join(parts, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return printable(s)
}

// recordSummary is what a plan says of a record besides its outcome: where its last Pod ran and
// how its containers ended.
func recordSummary(r *api.JobRecord) string {
	if len(r.Spec.Pods) == 0 {
		return ""
	}
	p := r.Spec.Pods[len(r.Spec.Pods)-1]
	var ends []string
	for _, c := range p.Containers {
		if c.ExitCode != nil {
			ends = append(ends, fmt.Sprintf("%s exit %d", printable(c.Name), *c.ExitCode))
		}
	}
	s := " on " + orDash(p.Node)
	if len(ends) > 0 {
		s += " (" + strings.Join(ends, ", ") + ")"
	}
	return s
}

type historyParse struct {
	entry *historyEntry
	err   error
}

// historyEntry is one finished Job kept under history/jobs/<ns>/<cfg>/<instance>/<job>.yaml.
type historyEntry struct {
	path                        string
	namespace, config, instance string
	job                         string
	completion                  time.Time
	record                      *api.JobRecord
	manifest                    *batchv1.Job
}

func historyPath(ns, cfg, inst, job string) string {
	return path.Join("history/jobs", ns, cfg, inst, job+".yaml")
}

func parseHistory(p string, data []byte) (*historyEntry, error) {
	parts := strings.Split(strings.TrimPrefix(p, "history/jobs/"), "/")
	if len(parts) != 4 || !strings.HasSuffix(parts[3], ".yaml") {
		return nil, fmt.Errorf("not a history/jobs/<namespace>/<configuration>/<instance>/<job>.yaml path")
	}
	e := &historyEntry{path: p, namespace: parts[0], config: parts[1], instance: parts[2], job: strings.TrimSuffix(parts[3], ".yaml")}
	docs, err := api.SplitDocuments(p, data)
	if err != nil {
		return e, err
	}
	for _, d := range docs {
		if _, kind := d.TypeMeta(); kind == "Job" && e.manifest == nil {
			var job batchv1.Job
			if err := yaml.Unmarshal(d.JSON, &job); err == nil {
				e.manifest = &job
			}
		}
		if _, kind := d.TypeMeta(); kind == api.KindJobRecord {
			rec, errs := api.ParseJobRecord("", d)
			if len(errs) > 0 {
				return e, errs
			}
			e.record = rec.JobRecord
			if t := rec.Spec.CompletionTime; t != nil {
				e.completion = t.Time
			}
		}
	}
	if e.record == nil {
		return e, fmt.Errorf("no JobRecord in history file")
	}
	return e, nil
}

// historyFile is a retired Job followed by its record.
func historyFile(job, record []byte) []byte {
	out := make([]byte, 0, len(job)+len(record)+4)
	out = append(out, job...)
	out = append(out, "---\n"...)
	out = append(out, record...)
	return out
}
