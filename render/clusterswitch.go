package render

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// oneClusterJobs is what a repository that turns spec.clusters on carries from its one-cluster
// rendered/ and history/ into the clusters' layout: each rendered Job (frozen until recorded)
// and each finished one in history, under the path a cluster's own Renderer gives it, for every
// cluster whose nodes the Job was pinned to. A cluster's first render in the new layout takes
// them as its previous output, so no finished Job runs again and no history is lost; every
// other object is rendered anew there. stale are the previous files outside every declared
// cluster's folder (renderClusters).
type oneClusterJobs struct {
	files map[string]Tree     // by cluster: path as the cluster's Renderer writes it -> bytes
	jobs  map[string][]string // namespace/job -> the clusters that took it
	// running and finished count the Jobs carried, for the plan.
	running, finished int
}

// summary says in the plan what the switch does with the Jobs, "" when it carries none.
func (o oneClusterJobs) summary() string {
	if o.running+o.finished == 0 {
		return ""
	}
	return fmt.Sprintf("turning spec.clusters on: %d rendered Job(s) and %d finished one(s) of the one-cluster layout move with their nodes to their clusters (rendered/<cluster>/, history/<cluster>/), with the one-cluster recorder's records of them; none runs again",
		o.running, o.finished)
}

func carriedJobs(prev Tree, stale []string, cs api.Clusters) oneClusterJobs {
	out := oneClusterJobs{files: map[string]Tree{}, jobs: map[string][]string{}}
	for _, f := range stale {
		data := prev[f]
		var h *objectHead
		var ns, name string
		switch ref, ok := parseObjectPath(f); {
		case ok && ref.kind == "job":
			h = parseHead(data)
			if h.err != nil || h.Metadata.Namespace != ref.namespace {
				continue // a cluster's folder of a cluster no longer declared, not the one-cluster layout
			}
			ns, name = ref.namespace, h.Metadata.Name
		case strings.HasPrefix(f, historyJobsDir):
			e, err := parseHistory(f, data)
			if err != nil {
				continue
			}
			// A history file is the retired Job, then its record.
			job, _, _ := bytes.Cut(data, []byte("\n---\n"))
			h = parseHead(job)
			if h.err != nil {
				continue
			}
			ns, name = e.namespace, e.job
		default:
			continue
		}
		seen := map[string]bool{}
		for _, node := range h.nodes() {
			for _, c := range cs.Of(node) {
				if seen[c] {
					continue
				}
				seen[c] = true
				if out.files[c] == nil {
					out.files[c] = Tree{}
				}
				out.files[c][f] = data
				out.jobs[ns+"/"+name] = append(out.jobs[ns+"/"+name], c)
			}
		}
		switch {
		case len(seen) == 0: // pinned to no node of a declared cluster: not carried
		case strings.HasPrefix(f, historyJobsDir):
			out.finished++
		default:
			out.running++
		}
	}
	return out
}

// jobRecordName is the namespace/job a one-cluster recorder's record path names
// (status/jobs/<namespace>/<job>.yaml), if it is one.
func jobRecordName(f string) (string, bool) {
	rest, ok := strings.CutPrefix(f, api.JobRecordsDir+"/")
	if !ok || !strings.HasSuffix(rest, ".yaml") || strings.Count(rest, "/") != 1 {
		return "", false
	}
	return strings.TrimSuffix(rest, ".yaml"), true
}
