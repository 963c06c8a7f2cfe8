package render

import (
	"bytes"
	"encoding/json"
	"path"
	"slices"
	"strings"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// A node that moves from one declared cluster to another (gitbroker.yaml's spec.clusters lists
// it elsewhere) takes its devices' instances with it: the new cluster renders them from its
// inventory under the same names, and would render a Job run that already ran, or still runs,
// in the cluster the node left. ranElsewhere is what each cluster is told of those runs: a run
// in another cluster's history/ has finished and never starts again; a run still rendered there
// (frozen until that cluster's recorder records it, which its renderer keeps as "its device is
// gone") holds the instance's Jobs here, as a run of its own would under concurrency Forbid. The
// history stays where the run ran (history/<old cluster>/). Only Jobs pinned to a node that has
// left their cluster are read: a shared device seen from two clusters keeps two runs, one each.

// elsewhereRun is a run of a Job in another cluster's folder, for the cluster its node is in now.
type elsewhereRun struct {
	cluster  string // where it ran, or is rendered
	instance string // namespace/configuration/instance
	finished bool   // in that cluster's history/
}

// isClusterJobFile says whether rest (a path inside rendered/<cluster>/ or history/<cluster>/)
// is a Job's file: a rendered Job or a finished one.
func isClusterJobFile(dir, rest string) bool {
	if dir == RenderedDir {
		return strings.HasPrefix(path.Base(rest), "job-") && strings.HasSuffix(rest, ".yaml")
	}
	return strings.HasPrefix(rest, "jobs/") && strings.HasSuffix(rest, ".yaml")
}

// ranElsewhere returns, by cluster, the runs of Jobs whose node it has now that are in another
// declared cluster's folder. jobFiles are those previous files (rendered/<c>/... Jobs and
// history/<c>/jobs/...), by the cluster whose folder holds them. A file new to the memo of pins
// is read through the memo of heads of the cluster's own Renderer, under the path that Renderer
// reads it by: its render finds the head there.
func (r *Renderer) ranElsewhere(prev Tree, jobFiles map[string][]string, cs api.Clusters) map[string]map[string]elsewhereRun {
	defer r.pins.rotate() // the pins of this render's files, and no others, are kept
	var out map[string]map[string]elsewhereRun
	of := map[string][]string{}
	clustersOf := func(node string) []string {
		in, ok := of[node]
		if !ok {
			in = cs.Of(node)
			of[node] = in
		}
		return in
	}
	for _, from := range sortedKeys(jobFiles) {
		files := jobFiles[from]
		var miss []string
		for _, f := range files {
			if !r.pins.has(f, prev[f]) {
				miss = append(miss, f)
			}
		}
		if len(miss) > 0 {
			c, _ := cs.Named(from)
			heads := &r.clusterRenderer(c).heads
			keys := make([]string, len(miss))
			parsed := make([]*objectHead, len(miss))
			var parse []int
			for i, f := range miss {
				keys[i] = headKey(f, from)
				if heads.has(keys[i], prev[f]) {
					parsed[i] = heads.cur[keys[i]].val
				} else {
					parse = append(parse, i)
				}
			}
			parallel(len(parse), func(k int) { i := parse[k]; parsed[i] = jobFileHead(miss[i], prev[miss[i]]) })
			for _, i := range parse {
				heads.set(keys[i], prev[miss[i]], parsed[i])
			}
			for i, f := range miss {
				r.pins.set(f, prev[f], pinOf(parsed[i]))
			}
		}
		for _, f := range files {
			pin := r.pins.cur[f].val
			if pin.head != nil {
				pin.nodes = jobNodes(prev, f, instanceFolderOf(f), pin.head)
			}
			if pin.id == "" || !slices.ContainsFunc(pin.nodes, func(n string) bool { return !slices.Contains(clustersOf(n), from) }) {
				continue // none of its nodes left: a shared device another cluster sees keeps its own runs
			}
			run := elsewhereRun{cluster: from, instance: pin.instance, finished: strings.HasPrefix(f, HistoryDir)}
			for _, n := range pin.nodes {
				for _, to := range clustersOf(n) {
					if to == from {
						continue
					}
					if out == nil {
						out = map[string]map[string]elsewhereRun{}
					}
					if out[to] == nil {
						out[to] = map[string]elsewhereRun{}
					}
					if had, ok := out[to][pin.id]; !ok || run.finished && !had.finished {
						out[to][pin.id] = run // finished anywhere: this exact run never starts again
					}
				}
			}
		}
	}
	return out
}

// jobPin is what ranElsewhere needs of a Job file: its namespace/name, its instance key and the
// nodes it is pinned to. A file that cannot be read has no id: its cluster's render says so.
type jobPin struct {
	id, instance string
	nodes        []string
	// head is kept for a Job the render did not pin, whose nodes are read again each render
	// from its instance's ResourceSlice (jobNodes), which may change while the Job does not.
	head *objectHead
}

func pinOf(h *objectHead) jobPin {
	if h == nil || h.err != nil || h.Metadata.Name == "" || h.Metadata.Namespace == "" {
		return jobPin{}
	}
	pin := jobPin{id: h.Metadata.Namespace + "/" + h.Metadata.Name, nodes: h.nodes(),
		instance: h.Metadata.Namespace + "/" + h.Metadata.Labels[api.LabelConfiguration] + "/" + h.Metadata.Labels[api.LabelInstance]}
	if len(pin.nodes) == 0 {
		pin.head = h
	}
	return pin
}

// headKey is the key of a Job file of cluster's folder in the memo of the cluster's Renderer: a
// rendered Job by the path that Renderer reads it at; a history file, whose Job is the part
// before its record, by a key of its own.
func headKey(f, cluster string) string {
	if rest, ok := strings.CutPrefix(f, clusterDir(RenderedDir, cluster)); ok {
		return RenderedDir + rest
	}
	return "\x00history-job\x00" + HistoryDir + strings.TrimPrefix(f, clusterDir(HistoryDir, cluster))
}

// jobFileHead reads the head of a rendered Job, or of the Job a history file retired.
func jobFileHead(f string, data []byte) *objectHead {
	if strings.HasPrefix(f, HistoryDir) {
		data, _, _ = bytes.Cut(data, []byte("\n---\n"))
	}
	return parseHead(data)
}

// jobNodes are the nodes a Job file belongs to. A Job the render pinned names them; one it did
// not pin (a shared device's in DRA mode, which runs where the scheduler allocates the device)
// has those of its instance's ResourceSlice in the same previous output, or, for a finished one
// whose slice is gone, the nodes its record says its Pods ran on. f is the file's path in prev,
// folder the folder of its instance's objects there (rendered/[<cluster>/]<namespace>/<configuration>
// for a history file, where an unsharded Configuration keeps them).
func jobNodes(prev Tree, f, folder string, h *objectHead) []string {
	if nodes := h.nodes(); len(nodes) > 0 {
		return nodes
	}
	ns, inst := h.Metadata.Namespace, h.Metadata.Labels[api.LabelInstance]
	if inst != "" {
		if b, ok := prev[folder+"/resourceslice-"+api.DRAResourceSliceName(ns, inst)+".yaml"]; ok {
			var s sliceHead
			if js, err := yamlcodec.ToJSON(b); err == nil && json.Unmarshal(js, &s) == nil {
				if s.Spec.NodeName != "" {
					return []string{s.Spec.NodeName}
				}
				seen := map[string]bool{}
				for _, t := range s.Spec.NodeSelector.Terms {
					for _, e := range t.MatchExpressions {
						if e.Key == hostnameLabel {
							for _, v := range e.Values {
								seen[v] = true
							}
						}
					}
				}
				if len(seen) > 0 {
					return sortedKeys(seen)
				}
			}
		}
	}
	if _, rec, ok := bytes.Cut(prev[f], []byte("\n---\n")); ok && strings.HasPrefix(f, HistoryDir) {
		var r struct {
			Spec struct {
				Pods []api.PodRecord `json:"pods"`
			} `json:"spec"`
		}
		if js, err := yamlcodec.ToJSON(rec); err == nil && json.Unmarshal(js, &r) == nil {
			seen := map[string]bool{}
			for _, p := range r.Spec.Pods {
				if p.Node != "" {
					seen[p.Node] = true
				}
			}
			return sortedKeys(seen)
		}
	}
	return nil
}

// sliceHead is what jobNodes reads of a ResourceSlice.
type sliceHead struct {
	Spec struct {
		NodeName     string `json:"nodeName"`
		NodeSelector struct {
			Terms []struct {
				MatchExpressions []struct {
					Key    string   `json:"key"`
					Values []string `json:"values"`
				} `json:"matchExpressions"`
			} `json:"nodeSelectorTerms"`
		} `json:"nodeSelector"`
	} `json:"spec"`
}

// instanceFolderOf is the folder of the instance objects of a Job file at f of prev: a rendered
// Job's own; for a history file (history/[<cluster>/]jobs/<namespace>/<configuration>/...), the
// Configuration's folder of the same layout.
func instanceFolderOf(f string) string {
	if strings.HasPrefix(f, RenderedDir) {
		return path.Dir(f)
	}
	rest := strings.TrimPrefix(f, HistoryDir)
	cluster := ""
	if !strings.HasPrefix(rest, "jobs/") {
		c, r, _ := strings.Cut(rest, "/")
		cluster, rest = c+"/", r
	}
	parts := strings.SplitN(strings.TrimPrefix(rest, "jobs/"), "/", 3)
	if len(parts) < 2 {
		return ""
	}
	return RenderedDir + cluster + parts[0] + "/" + parts[1]
}
