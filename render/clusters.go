package render

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// A repository of several clusters (gitbroker.yaml spec.clusters; docs/DESIGN.md, "Many
// clusters, one repository") renders each cluster as a repository of its own: a Renderer kept
// for the cluster renders, from the Configurations that select it, the inventories of its nodes
// and its recorder's records (status/<cluster>/), on top of its own previous output, what the
// one-cluster layout would hold; that output is then written under rendered/<cluster>/ and
// history/<cluster>/. Each cluster is then what one cluster always was (its Flux folder, its
// namespaces, its deletion budget, its staged rollouts), and nothing of one cluster can reach
// another's folder. What the clusters share stays at the top of rendered/: the render metadata
// (rendered/.gitbroker-render.yaml: the source commit, the inputs digest and the writers'
// accepted tips) and the accepted tips' shards, whose shares files hold every cluster's nodes.

// clusterDir is where cluster's part of dir (RenderedDir or HistoryDir) lives.
func clusterDir(dir, cluster string) string { return dir + cluster + "/" }

// clustersOf returns the clusters of the request's settings, when it declares any and its
// settings are valid (invalid settings render nothing, whatever the layout: the single pass
// says why).
func clustersOf(req Request) (api.Clusters, bool) {
	if _, unreadable := req.Unreadable[api.SettingsPath]; unreadable {
		return api.Clusters{}, false
	}
	s, errs := api.ParseSettings(api.SettingsPath, req.Files[api.SettingsPath])
	if len(errs) > 0 || !s.Clusters.Enabled() {
		return api.Clusters{}, false
	}
	return s.Clusters, true
}

// clusterRenderer is the Renderer kept for cluster c, made on first use. It shares r's memo of
// Configuration files, which every cluster parses alike.
func (r *Renderer) clusterRenderer(c api.Cluster) *Renderer {
	if r.clusters == nil {
		r.clusters = map[string]*Renderer{}
	}
	sub, ok := r.clusters[c.Name]
	if !ok {
		sub = &Renderer{once: r.once, parent: r}
		r.clusters[c.Name] = sub
	}
	cluster := c
	sub.cluster = &cluster
	return sub
}

// renderClusters renders a repository of several clusters.
func (r *Renderer) renderClusters(req Request, cs api.Clusters) *Result {
	in := r.split(req)
	prev := in.prev
	res := &Result{Previous: prev, Files: Tree{}, InputsDigest: digestOf(req.Files, in.inputs)}
	plan := &Plan{Configurations: []*ConfigurationPlan{}, Trust: req.Trust, Untrusted: untrustedProblems(req, nil)}

	// Each node's inventory goes to its cluster; a node in none or in several is an invalid
	// input of every cluster, so each keeps what the node had there.
	inventories := map[string][]string{}
	unreadable := maps.Clone(req.Unreadable)
	if unreadable == nil {
		unreadable = map[string]string{}
	}
	for _, f := range in.inputs {
		if !isInventoryPath(f) {
			continue
		}
		node := strings.TrimSuffix(strings.TrimPrefix(f, api.InventoryDir+"/"), ".yaml")
		switch of := cs.Of(node); len(of) {
		case 1:
			inventories[of[0]] = append(inventories[of[0]], f)
		default:
			if _, ok := unreadable[f]; !ok {
				unreadable[f] = cs.MembershipError(node, of)
			}
		}
	}
	// Records go to the cluster whose recorder wrote them; a recorder of one cluster writes
	// status/<kind>/ itself, which no cluster of several reads.
	records := map[string][]string{}
	var unattributed []string
	for _, f := range in.inputs {
		if c, _, ok := api.SplitClusterStatusPath(f); ok {
			records[c] = append(records[c], f)
		} else if api.IsStatusPath(f) {
			unattributed = append(unattributed, f)
		}
	}
	if len(unattributed) > 0 {
		plan.Warnings = append(plan.Warnings, "records outside status/<cluster>/ are not read with spec.clusters (a recorder of one cluster writes them; give each cluster's recorder --cluster): "+strings.Join(unattributed, ", "))
	}
	var common []string
	for _, f := range in.inputs {
		if f == api.SettingsPath || isConfigurationPath(f) {
			common = append(common, f)
		}
	}

	errSeen := map[string]bool{}
	untrustedSeen := map[string]bool{}
	for _, u := range req.Untrusted {
		untrustedSeen[u] = true
	}
	res.Untrusted = append([]string(nil), req.Untrusted...)
	res.Rejections = append([]Problem(nil), req.Rejections...)
	var shares []map[string]sharesFile
	for _, c := range cs.List {
		sub := Request{
			Files:            Tree{},
			Previous:         Tree{},
			SourceCommit:     req.SourceCommit,
			AllowDeletions:   req.AllowDeletions,
			Unreadable:       unreadable,
			Invalid:          req.Invalid,
			Writers:          req.Writers,
			RenderedJobsOnly: req.RenderedJobsOnly,
			Trust:            req.Trust,
		}
		for _, f := range common {
			sub.Files[f] = req.Files[f]
		}
		for _, f := range inventories[c.Name] {
			sub.Files[f] = req.Files[f]
		}
		for _, f := range records[c.Name] {
			_, inner, _ := api.SplitClusterStatusPath(f)
			sub.Files[inner] = req.Files[f]
		}
		rd, hd := clusterDir(RenderedDir, c.Name), clusterDir(HistoryDir, c.Name)
		for f, b := range prev {
			if rest, ok := strings.CutPrefix(f, rd); ok {
				sub.Previous[RenderedDir+rest] = b
			} else if rest, ok := strings.CutPrefix(f, hd); ok {
				sub.Previous[HistoryDir+rest] = b
			}
		}
		// The accepted tips' shards are the top's, for every cluster alike.
		for f, b := range prev {
			if strings.HasPrefix(f, api.AcceptedDir) && strings.HasSuffix(f, "/writers.yaml") {
				sub.Previous[f] = b
			}
		}
		if m, ok := prev[clusterDir(RenderedDir, c.Name)+strings.TrimPrefix(MetadataPath, RenderedDir)]; ok {
			sub.Previous[MetadataPath] = m
		}
		sr := r.clusterRenderer(c).Render(sub)

		for f, b := range sr.Files {
			switch {
			case strings.HasPrefix(f, api.AcceptedDir):
				if strings.HasSuffix(f, "/writers.yaml") {
					res.Files[f] = b // every cluster's are the same: the request's writers
				}
			case strings.HasPrefix(f, RenderedDir):
				res.Files[rd+strings.TrimPrefix(f, RenderedDir)] = b
			case strings.HasPrefix(f, HistoryDir):
				res.Files[hd+strings.TrimPrefix(f, HistoryDir)] = b
			}
		}
		shares = append(shares, r.clusters[c.Name].shares)
		for _, e := range sr.Errors {
			if k := e.Error(); !errSeen[k] {
				errSeen[k] = true
				res.Errors = append(res.Errors, e)
			}
		}
		for _, u := range sr.Untrusted {
			if !untrustedSeen[u] {
				untrustedSeen[u] = true
				res.Untrusted = append(res.Untrusted, u)
			}
		}
		for _, h := range sr.Held {
			res.Held = append(res.Held, "cluster "+c.Name+": "+h)
		}
		if sr.Refused != nil {
			res.Held = append(res.Held, "cluster "+c.Name+": "+sr.Refused.Error()+"; its part is kept as it was")
		}
		mergePlan(plan, sr.Plan, c.Name)
	}
	r.writeClusterShares(res.Files, prev, shares)
	r.writeClustersMetadata(res, req, prev)
	res.Errors.Sort()
	plan.Errors = fieldProblems(res.Errors)
	if reason := switchedLayout(prev, cs); reason != "" && !req.AllowDeletions {
		res.Refused = &RefusedError{Reason: reason}
		plan.Refused = reason
		res.Files = prev
	}
	res.Diff = Diff(prev, res.Files)
	res.Plan = plan
	return res
}

// switchedLayout says why a render that turns spec.clusters on over a one-cluster rendered/
// is refused: every broker moves to rendered/<cluster>/, and the one-cluster folders, which a
// Flux or Argo CD may still apply, go.
func switchedLayout(prev Tree, cs api.Clusters) string {
	for f := range prev {
		if _, ok := parseObjectPath(f); !ok {
			continue
		}
		rest := strings.TrimPrefix(f, RenderedDir)
		first, _, _ := strings.Cut(rest, "/")
		if _, isCluster := cs.Named(first); !isCluster {
			return "spec.clusters moves every broker from rendered/<namespace>/ to rendered/<cluster>/<namespace>/ (" + f + " goes): point each cluster's Flux or Argo CD at its folder, then render with --allow-deletions"
		}
	}
	return ""
}

// mergePlan adds a cluster's plan to the plan of all clusters.
func mergePlan(all, p *Plan, cluster string) {
	if p == nil {
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
	for _, w := range p.Warnings {
		all.Warnings = append(all.Warnings, "cluster "+cluster+": "+w)
	}
	if p.Refused != "" {
		all.Warnings = append(all.Warnings, "cluster "+cluster+": render refused, its part kept as it was: "+p.Refused)
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
func (r *Renderer) writeClustersMetadata(res *Result, req Request, prev Tree) {
	writers := req.Writers
	prevMeta := ParseMetadata(prev[MetadataPath])
	if writers == nil {
		writers = prevMeta.Writers
	}
	changed := !maps.Equal(prevMeta.Writers, writers)
	if !changed {
		for f, b := range res.Files {
			if old, ok := prev[f]; !ok || string(old) != string(b) {
				changed = true
				break
			}
		}
	}
	if !changed {
		for f := range prev {
			if _, ok := res.Files[f]; !ok && f != MetadataPath {
				changed = true
				break
			}
		}
	}
	if old, ok := prev[MetadataPath]; ok && !changed {
		res.Files[MetadataPath] = old
		return
	}
	if len(res.Files) == 0 {
		return
	}
	m := Metadata{APIVersion: api.APIVersion, Kind: "RenderMetadata", SourceCommit: req.SourceCommit, InputsDigest: res.InputsDigest, Writers: writers}
	// The devices whose instances use a longer digest, from every cluster, for the agents.
	for _, c := range sortedKeys(r.clusters) {
		cm := ParseMetadata(res.Files[clusterDir(RenderedDir, c)+strings.TrimPrefix(MetadataPath, RenderedDir)])
		for k, ds := range cm.InstanceDigests {
			if m.InstanceDigests == nil {
				m.InstanceDigests = map[string][]InstanceDigest{}
			}
			m.InstanceDigests[k] = mergeInstanceDigests(m.InstanceDigests[k], ds)
		}
	}
	res.Files[MetadataPath] = yamlcodec.Marshal(m)
	wroteMetadata(res.Files[MetadataPath], m)
}

// mergeInstanceDigests is the union of two lists of one Configuration's longer digests, sorted
// by device.
func mergeInstanceDigests(a, b []InstanceDigest) []InstanceDigest {
	out := slices.Clone(a)
	for _, d := range b {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}
