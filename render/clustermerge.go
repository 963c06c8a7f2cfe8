package render

import (
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// clusterMerge is the render of a repository of several clusters as it is put together: add
// takes each cluster's part in ring order (its files, changes, problems and plan), and
// finishClusters writes the top of rendered/ that the clusters share.
type clusterMerge struct {
	res    *Result
	plan   *Plan
	diff   []string
	shares []map[string]sharesFile
	// errSeen and untrustedSeen keep a problem that several clusters report once.
	errSeen, untrustedSeen map[string]bool
}

func newClusterMerge(req Request, s *clusterSplit, inputsDigest string) *clusterMerge {
	m := &clusterMerge{
		res:           &Result{Previous: s.prev, Files: Tree{}, InputsDigest: inputsDigest},
		plan:          &Plan{Configurations: []*ConfigurationPlan{}, Trust: req.Trust, Untrusted: untrustedProblems(req, nil)},
		errSeen:       map[string]bool{},
		untrustedSeen: map[string]bool{},
	}
	m.plan.Warnings = append(m.plan.Warnings, s.warnings...)
	for _, u := range req.Untrusted {
		m.untrustedSeen[u] = true
	}
	m.res.Untrusted = append([]string(nil), req.Untrusted...)
	m.res.Rejections = append([]Problem(nil), req.Rejections...)
	return m
}

// add merges one cluster's part.
func (m *clusterMerge) add(p clusterPart) {
	maps.Copy(m.res.Files, p.files)
	m.diff = append(m.diff, p.diff...)
	m.shares = append(m.shares, p.shares)
	sr := p.result
	for _, e := range sr.Errors {
		if k := e.Error(); !m.errSeen[k] {
			m.errSeen[k] = true
			m.res.Errors = append(m.res.Errors, e)
		}
	}
	for _, u := range sr.Untrusted {
		if !m.untrustedSeen[u] {
			m.untrustedSeen[u] = true
			m.res.Untrusted = append(m.res.Untrusted, u)
		}
	}
	for _, h := range sr.Held {
		m.res.Held = append(m.res.Held, "cluster "+p.cluster+": "+h)
	}
	if sr.Refused != nil {
		m.res.Held = append(m.res.Held, "cluster "+p.cluster+": "+sr.Refused.Error()+"; its part is kept as it was")
	}
	mergePlan(m.plan, sr.Plan, p.cluster, p.reused)
}

// finishClusters writes what the clusters share (the shares files, the accepted shards, the
// render metadata), removes the stale folders, and refuses a render that switches layout
// without --allow-deletions.
func (r *Renderer) finishClusters(m *clusterMerge, req Request, s *clusterSplit) *Result {
	res, plan, prev := m.res, m.plan, s.prev
	diff := append(m.diff, s.stale...)
	r.writeClusterShares(res.Files, prev, m.shares)
	prevMeta := ParseMetadata(prev[MetadataPath])
	writers := req.Writers
	if writers == nil {
		writers = prevMeta.Writers
	}
	writeAcceptedFiles(res.Files, prev, prevMeta.Writers, writers)
	for f := range s.top {
		if b, ok := res.Files[f]; f != MetadataPath && (!ok || string(b) != string(s.top[f])) {
			diff = append(diff, f)
		}
	}
	for f := range res.Files {
		if _, had := s.top[f]; !had && strings.HasPrefix(f, api.AcceptedDir) {
			diff = append(diff, f)
		}
	}
	r.writeClustersMetadata(res, req, prevMeta, writers, len(diff) > 0)
	if b, ok := res.Files[MetadataPath]; ok != (s.top[MetadataPath] != nil) || string(b) != string(s.top[MetadataPath]) {
		diff = append(diff, MetadataPath)
	}
	slices.Sort(diff)
	res.Diff = diff
	res.Errors.Sort()
	plan.Errors = fieldProblems(res.Errors)
	if reason := switchedLayout(s.stale); reason != "" && !req.AllowDeletions {
		res.Refused = &RefusedError{Reason: reason}
		plan.Refused = reason
		res.Files, res.Diff = prev, nil
	}
	res.Plan = plan
	return res
}

// mergePlan adds a cluster's plan to the plan of all clusters. A cluster's last plan taken
// again (reused) changes nothing: only what it warned of still holds.
func mergePlan(all, p *Plan, cluster string, reused bool) {
	if p == nil {
		return
	}
	for _, w := range p.Warnings {
		all.Warnings = append(all.Warnings, "cluster "+cluster+": "+w)
	}
	if reused {
		return
	}
	for _, c := range p.Configurations {
		c.Cluster = cluster
		all.Configurations = append(all.Configurations, c)
	}
	for _, n := range p.Namespaces {
		n.Cluster = cluster
		all.Namespaces = append(all.Namespaces, n)
	}
	if p.Refused != "" {
		all.Warnings = append(all.Warnings, "cluster "+cluster+": render refused, its part kept as it was: "+p.Refused)
	}
	if !p.Summary.Empty() {
		all.Clusters = append(all.Clusters, cluster)
	}
	a, b := reflect.ValueOf(&all.Summary).Elem(), reflect.ValueOf(p.Summary)
	for i := range a.NumField() {
		a.Field(i).SetInt(a.Field(i).Int() + b.Field(i).Int())
	}
}

// writeClusterShares writes each accepted shard's shares file from every cluster's: the nodes
// of one shard may be in several clusters, and no node is in two. A file whose content is the
// previous one keeps its bytes.
func (r *Renderer) writeClusterShares(files, prev Tree, perCluster []map[string]sharesFile) {
	shards := map[string]map[string]map[string]int{}
	for _, kept := range perCluster {
		for shard, sf := range kept {
			if shards[shard] == nil {
				shards[shard] = map[string]map[string]int{}
			}
			maps.Copy(shards[shard], sf.nodes)
		}
	}
	for shard, nodes := range shards {
		if len(nodes) == 0 {
			continue
		}
		f := api.SharesFile(shard)
		b := yamlcodec.Marshal(api.DeviceShares{APIVersion: api.APIVersion, Kind: api.KindDeviceShares, Nodes: nodes})
		if old, ok := prev[f]; ok && string(old) == string(b) {
			b = old
		}
		files[f] = b
	}
}

// writeClustersMetadata writes the top's render metadata: the source commit, the inputs digest
// and the writers' accepted tips of the whole repository (each cluster keeps what only it needs
// in its own folder's). Like a cluster's, it is rewritten only when another file changed.
func (r *Renderer) writeClustersMetadata(res *Result, req Request, prevMeta Metadata, writers map[string]string, changed bool) {
	old, had := res.Previous[MetadataPath]
	if had && !changed && maps.Equal(prevMeta.Writers, writers) {
		res.Files[MetadataPath] = old
		return
	}
	if len(res.Files) == 0 {
		return
	}
	m := Metadata{APIVersion: api.APIVersion, Kind: "RenderMetadata", SourceCommit: req.SourceCommit, InputsDigest: res.InputsDigest, Writers: writers}
	// The devices whose instances use a longer digest, from every cluster, each with its
	// cluster, for the agents of that cluster's nodes.
	for _, c := range sortedKeys(r.clusters) {
		cm := ParseMetadata(res.Files[clusterDir(RenderedDir, c)+strings.TrimPrefix(MetadataPath, RenderedDir)])
		for k, ds := range cm.InstanceDigests {
			if m.InstanceDigests == nil {
				m.InstanceDigests = map[string][]InstanceDigest{}
			}
			m.InstanceDigests[k] = mergeInstanceDigests(m.InstanceDigests[k], ds, c)
		}
	}
	res.Files[MetadataPath] = yamlcodec.Marshal(m)
	wroteMetadata(res.Files[MetadataPath], m)
}

// mergeInstanceDigests adds cluster's list of one Configuration's longer digests to a, each
// entry naming cluster, sorted by device, node and cluster.
func mergeInstanceDigests(a, b []InstanceDigest, cluster string) []InstanceDigest {
	out := slices.Clone(a)
	for _, d := range b {
		d.Cluster = cluster
		out = append(out, d)
	}
	slices.SortFunc(out, func(x, y InstanceDigest) int {
		return cmp.Or(strings.Compare(x.Device, y.Device), strings.Compare(x.Node, y.Node), strings.Compare(x.Cluster, y.Cluster))
	})
	return out
}
