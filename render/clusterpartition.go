package render

import (
	"maps"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// clusterSplit is a render request of several clusters partitioned by cluster: the inputs each
// cluster's Renderer reads, the part of the previous output each wrote, and what belongs to no
// cluster (the top of rendered/, the stale folders). partitionClusters makes it; nothing
// changes it after.
type clusterSplit struct {
	prev Tree
	// inventories and records are each cluster's input paths (records as the repository holds
	// them, status/<cluster>/...); carriedRecords the one-cluster recorder's records of the
	// Jobs a cluster carries from the one-cluster layout.
	inventories, records, carriedRecords map[string][]string
	// common are gitbroker.yaml and the Configurations, which every cluster reads.
	common []string
	// unreadable is the request's, and each inventory of a node in no cluster or in several.
	unreadable map[string]string
	// writers are each cluster's writers' tips: its nodes' and its recorder's.
	writers map[string]map[string]string
	// counts are how many previous files each cluster has in its folders; jobFiles which of
	// them are Jobs.
	counts   map[string]int
	jobFiles map[string][]string
	// top is the previous top of rendered/ (metadata, accepted shards); sharesFiles its shares
	// files, what the nodes were given, for a cluster's new Renderer.
	top, sharesFiles Tree
	// stale are previous files outside every declared cluster's folder, which go.
	stale []string
	// carried are the Jobs of stale folders the clusters take (clusterswitch.go); elsewhere
	// the Jobs a moved node ran in another cluster (clustermoves.go).
	carried   oneClusterJobs
	elsewhere map[string]map[string]elsewhereRun
	// warnings are for the plan, before any cluster's.
	warnings []string
}

// partitionClusters partitions req, whose inputs and previous output in has, among cs.
func (r *Renderer) partitionClusters(req Request, in split, cs api.Clusters) *clusterSplit {
	s := &clusterSplit{prev: in.prev}
	s.partitionInputs(req, in.inputs, cs)
	s.partitionPrevious(cs)
	// A repository that turns clusters on keeps its Jobs: each cluster's first render takes the
	// one-cluster layout's Jobs and history of its nodes, and the one-cluster recorder's
	// records of those Jobs (signed by recorder, checked against the Job by the cluster's
	// render as any record is).
	s.carried = carriedJobs(s.prev, s.stale, cs)
	s.elsewhere = r.ranElsewhere(s.prev, s.jobFiles, cs)
	if w := s.carried.summary(); w != "" {
		s.warnings = append(s.warnings, w)
	}
	s.carriedRecords = map[string][]string{}
	var notRead []string
	for _, f := range in.inputs {
		if _, _, ok := api.SplitClusterStatusPath(f); ok || !api.IsStatusPath(f) {
			continue
		}
		job, ok := jobRecordName(f)
		if !ok || len(s.carried.jobs[job]) == 0 {
			notRead = append(notRead, f)
			continue
		}
		for _, c := range s.carried.jobs[job] {
			s.carriedRecords[c] = append(s.carriedRecords[c], f)
		}
	}
	if len(notRead) > 0 {
		s.warnings = append(s.warnings, "records outside status/<cluster>/ are not read with spec.clusters (a recorder of one cluster writes them; give each cluster's recorder --cluster): "+strings.Join(notRead, ", "))
	}
	return s
}

// partitionInputs gives each cluster its nodes' inventories, its recorder's records and its
// writers' tips. A node in no cluster or in several is an invalid input of every cluster, so
// each keeps what the node had there. A recorder of one cluster writes status/<kind>/ itself,
// which no cluster of several reads.
func (s *clusterSplit) partitionInputs(req Request, inputs []string, cs api.Clusters) {
	s.inventories, s.records = map[string][]string{}, map[string][]string{}
	s.unreadable = maps.Clone(req.Unreadable)
	if s.unreadable == nil {
		s.unreadable = map[string]string{}
	}
	for _, f := range inputs {
		switch c, _, isRecord := api.SplitClusterStatusPath(f); {
		case f == api.SettingsPath || isConfigurationPath(f):
			s.common = append(s.common, f)
		case isRecord:
			s.records[c] = append(s.records[c], f)
		case isInventoryPath(f):
			node := strings.TrimSuffix(strings.TrimPrefix(f, api.InventoryDir+"/"), ".yaml")
			if of := cs.Of(node); len(of) == 1 {
				s.inventories[of[0]] = append(s.inventories[of[0]], f)
			} else if _, ok := s.unreadable[f]; !ok {
				s.unreadable[f] = cs.MembershipError(node, of)
			}
		}
	}
	s.writers = map[string]map[string]string{}
	for ref, tip := range req.Writers {
		var c string
		if node, ok := strings.CutPrefix(ref, api.InventoryPrefix); ok {
			if of := cs.Of(node); len(of) == 1 {
				c = of[0]
			}
		} else if name, ok := strings.CutPrefix(ref, api.StatusBranch+"/"); ok {
			c = name
		}
		if _, ok := cs.Named(c); !ok {
			continue
		}
		if s.writers[c] == nil {
			s.writers[c] = map[string]string{}
		}
		s.writers[c][ref] = tip
	}
}

// partitionPrevious reads the previous output in one pass: each cluster's part, as its own
// Renderer wrote it; the files of the top; and the stale ones, of a cluster no longer declared
// or of the one-cluster layout.
func (s *clusterSplit) partitionPrevious(cs api.Clusters) {
	s.counts, s.jobFiles, s.top, s.sharesFiles = map[string]int{}, map[string][]string{}, Tree{}, Tree{}
	for f, b := range s.prev {
		dir, rest, _ := strings.Cut(f, "/")
		cluster, _, nested := strings.Cut(rest, "/")
		switch _, isCluster := cs.Named(cluster); {
		case dir+"/" == RenderedDir && (!nested || strings.HasPrefix(f, api.AcceptedDir)):
			s.top[f] = b
			if strings.HasPrefix(f, api.AcceptedDir) && strings.HasSuffix(f, "/shares.yaml") {
				s.sharesFiles[f] = b
			}
		case isCluster && nested:
			s.counts[cluster]++
			if _, inner, _ := strings.Cut(rest, "/"); isClusterJobFile(dir+"/", inner) {
				s.jobFiles[cluster] = append(s.jobFiles[cluster], f)
			}
		default:
			s.stale = append(s.stale, f)
		}
	}
}

// request is what cluster c's Renderer renders (without its previous output, which
// clusterPrevious chooses), its rollout held by holds.
func (s *clusterSplit) request(c string, req Request, holds map[string]string) Request {
	sub := Request{
		Files:            Tree{},
		SourceCommit:     req.SourceCommit,
		AllowDeletions:   req.AllowDeletions,
		Unreadable:       s.unreadable,
		Invalid:          req.Invalid,
		Writers:          s.writers[c],
		RenderedJobsOnly: req.RenderedJobsOnly,
		Trust:            req.Trust,
		holdRollout:      holds,
		elsewhere:        s.elsewhere[c],
	}
	if req.Writers != nil && sub.Writers == nil {
		sub.Writers = map[string]string{} // verified, and none of its writers left
	}
	for _, f := range s.common {
		sub.Files[f] = req.Files[f]
	}
	for _, f := range s.inventories[c] {
		sub.Files[f] = req.Files[f]
	}
	for _, f := range s.records[c] {
		_, inner, _ := api.SplitClusterStatusPath(f)
		sub.Files[inner] = req.Files[f]
	}
	if s.counts[c] == 0 {
		for _, f := range s.carriedRecords[c] {
			if _, own := sub.Files[f]; !own { // the cluster's recorder's record wins
				sub.Files[f] = req.Files[f]
			}
		}
	}
	return sub
}

// previousOf is the previous output of cluster c as its own Renderer writes it (rendered/...,
// history/...).
func (s *clusterSplit) previousOf(c string) Tree {
	rd, hd := clusterDir(RenderedDir, c), clusterDir(HistoryDir, c)
	out := Tree{}
	for f, b := range s.prev {
		if rest, ok := strings.CutPrefix(f, rd); ok {
			out[RenderedDir+rest] = b
		} else if rest, ok := strings.CutPrefix(f, hd); ok {
			out[HistoryDir+rest] = b
		}
	}
	return out
}
