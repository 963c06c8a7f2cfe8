package render

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// oneClusterJobs is what a repository that turns spec.clusters on carries from its one-cluster
// rendered/ and history/ into the clusters' layout, and what a cluster taken out of
// spec.clusters (or renamed) leaves to the clusters its nodes are in now: each rendered Job
// (frozen until recorded) and each finished one in history, under the path a cluster's own
// Renderer gives it, for every cluster whose nodes the Job was pinned to. The cluster's render
// takes them as part of its previous output, so no finished Job runs again and no history is
// lost; every other object is rendered anew there. stale are the previous files outside every
// declared cluster's folder (renderClusters).
type oneClusterJobs struct {
	files map[string]Tree     // by cluster: path as the cluster's Renderer writes it -> bytes
	jobs  map[string][]string // namespace/job -> the clusters that took it
	// running and finished count the Jobs carried, for the plan; formerClusters says some
	// come from the folder of a cluster no longer declared.
	running, finished int
	formerClusters    bool
}

// summary says in the plan what the switch does with the Jobs, "" when it carries none.
func (o oneClusterJobs) summary() string {
	if o.running+o.finished == 0 {
		return ""
	}
	if o.formerClusters {
		return fmt.Sprintf("clusters taken out of spec.clusters (or renamed): %d rendered Job(s) and %d finished one(s) of their folders move with their nodes to their clusters (rendered/<cluster>/, history/<cluster>/); none runs again",
			o.running, o.finished)
	}
	return fmt.Sprintf("turning spec.clusters on: %d rendered Job(s) and %d finished one(s) of the one-cluster layout move with their nodes to their clusters (rendered/<cluster>/, history/<cluster>/), with the one-cluster recorder's records of them; none runs again",
		o.running, o.finished)
}

func carriedJobs(prev Tree, stale []string, cs api.Clusters) oneClusterJobs {
	out := oneClusterJobs{files: map[string]Tree{}, jobs: map[string][]string{}}
	for _, f := range stale {
		j, ok := readCarriedJob(f, prev[f])
		if !ok {
			continue
		}
		seen := map[string]bool{}
		for _, node := range jobNodes(prev, f, instanceFolderOf(f), j.head) {
			for _, c := range cs.Of(node) {
				if seen[c] {
					continue
				}
				seen[c] = true
				if out.files[c] == nil {
					out.files[c] = Tree{}
				}
				out.files[c][j.path] = prev[f]
				if !j.former {
					out.jobs[j.id] = append(out.jobs[j.id], c)
				}
			}
		}
		switch {
		case len(seen) == 0: // pinned to no node of a declared cluster: not carried
			continue
		case strings.HasPrefix(j.path, historyJobsDir):
			out.finished++
		default:
			out.running++
		}
		out.formerClusters = out.formerClusters || j.former
	}
	return out
}

// carriedJob is a Job file of the one-cluster layout, or of the folder of a cluster no longer
// declared (former), read where a cluster's own Renderer has it (path).
type carriedJob struct {
	path, id string
	former   bool
	head     *objectHead
}

// readCarriedJob reads a previous file outside every declared cluster's folder as a Job the
// clusters carry: a rendered Job (rendered/<namespace>/..., or rendered/<cluster>/<namespace>/...
// of a former cluster; the Job's namespace tells the two apart) or a finished one
// (history/jobs/..., or history/<cluster>/jobs/...).
func readCarriedJob(f string, data []byte) (carriedJob, bool) {
	paths := []carriedJob{{path: f}}
	if dir, rest, ok := strings.Cut(f, "/"); ok {
		if _, inner, ok := strings.Cut(rest, "/"); ok {
			paths = append(paths, carriedJob{path: dir + "/" + inner, former: true})
		}
	}
	var head *objectHead // of a rendered Job, read once whichever layout its path is of
	for _, j := range paths {
		if ref, ok := parseObjectPath(j.path); ok && ref.kind == "job" {
			if head == nil {
				head = parseHead(data)
			}
			if j.head = head; head.err == nil && head.Metadata.Namespace == ref.namespace {
				j.id = ref.namespace + "/" + head.Metadata.Name
				return j, true
			}
		} else if strings.HasPrefix(j.path, historyJobsDir) {
			e, err := parseHistory(j.path, data)
			if err != nil {
				continue
			}
			// A history file is the retired Job, then its record.
			job, _, _ := bytes.Cut(data, []byte("\n---\n"))
			if j.head = parseHead(job); j.head.err == nil {
				j.id = e.namespace + "/" + e.job
				return j, true
			}
		}
	}
	return carriedJob{}, false
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
