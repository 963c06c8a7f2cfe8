package render

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/identity"
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
func clustersOf(req Request) (api.ResolvedSettings, bool) {
	if _, unreadable := req.Unreadable[api.SettingsPath]; unreadable {
		return api.ResolvedSettings{}, false
	}
	s, errs := api.ParseSettings(api.SettingsPath, req.Files[api.SettingsPath])
	if len(errs) > 0 || !s.Clusters.Enabled() {
		return api.ResolvedSettings{}, false
	}
	return s, true
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
	if sub.cluster != nil && !maps.Equal(sub.cluster.Labels, c.Labels) {
		// Its brokers' environment changes (clusterEnv): no instance's broker inputs, made
		// with the old labels, are reused.
		sub.instanceSets = nil
	}
	cluster := c
	sub.cluster = &cluster
	return sub
}

// ClusterEnvName is the variable that tells the brokers of one cluster of several its name, and
// api.ClusterLabelEnv(<key>) its label <key>: a Configuration's broker reads where it runs (a
// site's endpoint, say) without templating in the YAML people write.
const ClusterEnvName = "GITBROKER_CLUSTER"

// clusterInputs is what a broker Deployment of one cluster of several is built with besides its
// Configuration and instance: what it is told of its cluster, and whether changes roll out
// cluster by cluster (spec.clusterRollout), which stages every broker so the cluster's recorder
// records whether it is Available.
type clusterInputs struct {
	env    map[string]string
	staged bool
}

func (p *pass) clusterInputs() clusterInputs {
	if p.r.cluster == nil {
		return clusterInputs{}
	}
	return clusterInputs{env: p.clusterEnv(), staged: p.loaded.settings.Clusters.Staged()}
}

// clusterEnv is what this pass's brokers are told of their cluster; nil for a repository of one
// cluster, whose brokers are as they always were.
func (p *pass) clusterEnv() map[string]string {
	c := p.r.cluster
	if c == nil {
		return nil
	}
	env := map[string]string{ClusterEnvName: c.Name}
	for k, v := range c.Labels {
		env[api.ClusterLabelEnv(k)] = v // no two keys give one name: gitbroker.yaml refuses it
	}
	return env
}

// withClusterEnv adds the cluster's variables to a broker's environment; they win over any of
// the same name (a Configuration's brokerProperties), since they are gitbroker's own.
func withClusterEnv(env []corev1.EnvVar, ce map[string]string) []corev1.EnvVar {
	if ce == nil {
		return env
	}
	out := make([]corev1.EnvVar, 0, len(env)+len(ce))
	for _, e := range env {
		if _, ours := ce[e.Name]; !ours {
			out = append(out, e)
		}
	}
	for k, v := range ce {
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// renderClusters renders a repository of several clusters.
func (r *Renderer) renderClusters(req Request, settings api.ResolvedSettings) *Result {
	// The clusters' passes take the settings parsed here: gitbroker.yaml of a thousand
	// clusters is parsed once, not once per cluster.
	r.settings = &settings
	defer func() { r.settings = nil }()
	cs := settings.Clusters
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
	// Each cluster's render records its own writers' tips (its nodes', its recorder's); the
	// repository's metadata and accepted shards hold every writer's.
	writersOf := map[string]map[string]string{}
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
		if writersOf[c] == nil {
			writersOf[c] = map[string]string{}
		}
		writersOf[c][ref] = tip
	}
	// Records go to the cluster whose recorder wrote them; a recorder of one cluster writes
	// status/<kind>/ itself, which no cluster of several reads.
	records, carriedRecords := map[string][]string{}, map[string][]string{}
	var unattributed []string
	for _, f := range in.inputs {
		if c, _, ok := api.SplitClusterStatusPath(f); ok {
			records[c] = append(records[c], f)
		} else if api.IsStatusPath(f) {
			unattributed = append(unattributed, f)
		}
	}
	var common []string
	for _, f := range in.inputs {
		if f == api.SettingsPath || isConfigurationPath(f) {
			common = append(common, f)
		}
	}

	// The previous output of each cluster, as its own Renderer wrote it, in one pass over the
	// tree; the files of the top (the metadata, the accepted shards); and the stale ones, of a
	// cluster no longer declared or of the one-cluster layout, which go.
	counts := map[string]int{}
	jobFiles := map[string][]string{}
	top := Tree{}
	var stale []string
	for f, b := range prev {
		dir, rest, _ := strings.Cut(f, "/")
		cluster, _, nested := strings.Cut(rest, "/")
		switch _, isCluster := cs.Named(cluster); {
		case dir+"/" == RenderedDir && (!nested || strings.HasPrefix(f, api.AcceptedDir)):
			top[f] = b
		case isCluster && nested:
			counts[cluster]++
			if _, inner, _ := strings.Cut(rest, "/"); isClusterJobFile(dir+"/", inner) {
				jobFiles[cluster] = append(jobFiles[cluster], f)
			}
		default:
			stale = append(stale, f)
		}
	}
	// A repository that turns clusters on keeps its Jobs: each cluster's first render takes the
	// one-cluster layout's Jobs and history of its nodes, and the one-cluster recorder's
	// records of those Jobs (signed by recorder, checked against the Job by the cluster's
	// render as any record is).
	carried := carriedJobs(prev, stale, cs)
	elsewhere := r.ranElsewhere(prev, jobFiles, cs)
	if s := carried.summary(); s != "" {
		plan.Warnings = append(plan.Warnings, s)
	}
	var notRead []string
	for _, f := range unattributed {
		job, ok := jobRecordName(f)
		if !ok || len(carried.jobs[job]) == 0 {
			notRead = append(notRead, f)
			continue
		}
		for _, c := range carried.jobs[job] {
			carriedRecords[c] = append(carriedRecords[c], f)
		}
	}
	if len(notRead) > 0 {
		plan.Warnings = append(plan.Warnings, "records outside status/<cluster>/ are not read with spec.clusters (a recorder of one cluster writes them; give each cluster's recorder --cluster): "+strings.Join(notRead, ", "))
	}
	// prevOf is the previous output of cluster c as its own Renderer writes it; made only for
	// a cluster whose part is not its Renderer's last output.
	prevOf := func(c string) Tree {
		rd, hd := clusterDir(RenderedDir, c), clusterDir(HistoryDir, c)
		out := Tree{}
		for f, b := range prev {
			if rest, ok := strings.CutPrefix(f, rd); ok {
				out[RenderedDir+rest] = b
			} else if rest, ok := strings.CutPrefix(f, hd); ok {
				out[HistoryDir+rest] = b
			}
		}
		return out
	}
	sharesFiles := Tree{}
	for f, b := range top {
		if strings.HasPrefix(f, api.AcceptedDir) && strings.HasSuffix(f, "/shares.yaml") {
			sharesFiles[f] = b // for a cluster's new Renderer, what its nodes were given
		}
	}
	for name := range r.clusters {
		if _, ok := cs.Named(name); !ok {
			delete(r.clusters, name)
		}
	}
	var diff []string
	errSeen := map[string]bool{}
	untrustedSeen := map[string]bool{}
	for _, u := range req.Untrusted {
		untrustedSeen[u] = true
	}
	res.Untrusted = append([]string(nil), req.Untrusted...)
	res.Rejections = append([]Problem(nil), req.Rejections...)
	var shares []map[string]sharesFile
	// The rings of a rollout across clusters, first first: a ring's changed brokers of a
	// Configuration wait while a cluster of a ring before it has not settled that
	// Configuration (unsettled, with why).
	rings := cs.Rings()
	unsettled := map[string]string{}
	if cs.Staged() {
		for _, g := range rings {
			plan.Rings = append(plan.Rings, PlanRing{Name: g.Name, Clusters: g.Clusters})
		}
	}
	var order []api.Cluster
	ringOf := map[string]int{}
	for i, g := range rings {
		for _, name := range g.Clusters {
			c, _ := cs.Named(name)
			order = append(order, c)
			ringOf[name] = i
		}
	}
	var ringHolds map[string]string
	ring := -1
	for _, c := range order {
		if ringOf[c.Name] != ring {
			ring = ringOf[c.Name]
			ringHolds = nil
			if ring > 0 && len(unsettled) > 0 {
				ringHolds = maps.Clone(unsettled)
			}
		}
		sub := Request{
			Files:            Tree{},
			SourceCommit:     req.SourceCommit,
			AllowDeletions:   req.AllowDeletions,
			Unreadable:       unreadable,
			Invalid:          req.Invalid,
			Writers:          writersOf[c.Name],
			RenderedJobsOnly: req.RenderedJobsOnly,
			Trust:            req.Trust,
			holdRollout:      ringHolds,
			elsewhere:        elsewhere[c.Name],
		}
		if req.Writers != nil && sub.Writers == nil {
			sub.Writers = map[string]string{} // verified, and none of its writers left
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
		if counts[c.Name] == 0 {
			for _, f := range carriedRecords[c.Name] {
				if _, own := sub.Files[f]; !own { // the cluster's recorder's record wins
					sub.Files[f] = req.Files[f]
				}
			}
		}
		cr := r.clusterRenderer(c)
		var sr *Result
		reused := false
		carry := carried.files[c.Name]
		if last := cr.lastRun; last != nil && counts[c.Name] == len(last.out) && last.outIn(prev) {
			if last.sameInputs(sub) && len(carry) == 0 {
				// Nothing of the cluster changed: its render would be the last one again
				// (even under a new source commit, which only a changed file records).
				sr, reused = last.result, true
			} else {
				sub.Previous = last.result.Files // the very map: its Renderer's fast path
			}
		} else if counts[c.Name] > 0 || cr.shares == nil {
			sub.Previous = prevOf(c.Name)
		} else {
			sub.Previous = Tree{}
		}
		if len(carry) > 0 {
			if counts[c.Name] > 0 {
				sub.Previous = maps.Clone(sub.Previous) // never its Renderer's last output
			}
			maps.Copy(sub.Previous, carry)
		}
		if sr == nil {
			if cr.shares == nil {
				// A Renderer new to the cluster finds what its nodes were given in the
				// repository's shares files.
				maps.Copy(sub.Previous, sharesFiles)
			}
			sr = cr.Render(sub)
		}

		rd, hd := clusterDir(RenderedDir, c.Name), clusterDir(HistoryDir, c.Name)
		in := func(f string) string {
			if rest, ok := strings.CutPrefix(f, RenderedDir); ok {
				return rd + rest
			}
			return hd + strings.TrimPrefix(f, HistoryDir)
		}
		if reused {
			maps.Copy(res.Files, cr.lastRun.out)
		} else {
			out := make(Tree, len(sr.Files))
			for f, b := range sr.Files {
				if !strings.HasPrefix(f, api.AcceptedDir) {
					out[in(f)] = b
				}
			}
			maps.Copy(res.Files, out)
			cr.lastRun = nil
			if !r.once && sr.Refused == nil {
				cr.lastRun = &clusterRun{request: sub, result: sr, out: out}
			}
		}
		switch {
		case reused:
		case counts[c.Name] == 0 && len(carry) > 0:
			// Its render was made on top of the one-cluster layout's Jobs, which the
			// repository holds elsewhere: every file of the cluster is new here.
			for f := range sr.Files {
				if !strings.HasPrefix(f, api.AcceptedDir) {
					diff = append(diff, in(f))
				}
			}
		case len(carry) > 0:
			// Made on top of Jobs a former cluster's folder holds: what it kept of them is
			// new here, besides what its render changed.
			changed := map[string]bool{}
			for _, f := range sr.Diff {
				changed[f] = true
			}
			for f := range carry {
				if _, kept := sr.Files[f]; kept {
					changed[f] = true
				}
			}
			for _, f := range sortedKeys(changed) {
				if !strings.HasPrefix(f, api.AcceptedDir) {
					diff = append(diff, in(f))
				}
			}
		default:
			for _, f := range sr.Diff {
				if !strings.HasPrefix(f, api.AcceptedDir) { // the top's, not the cluster's
					diff = append(diff, in(f))
				}
			}
		}
		shares = append(shares, cr.shares)
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
		mergePlan(plan, sr.Plan, c.Name, reused)
		if cs.Staged() {
			settle(unsettled, c.Name, sr, func(p string) []byte { return req.Files[api.ClusterStatusPath(c.Name, p)] })
		}
	}
	diff = append(diff, stale...)
	r.writeClusterShares(res.Files, prev, shares)
	prevMeta := ParseMetadata(prev[MetadataPath])
	writers := req.Writers
	if writers == nil {
		writers = prevMeta.Writers
	}
	writeAcceptedFiles(res.Files, prev, prevMeta.Writers, writers)
	for f := range top {
		if b, ok := res.Files[f]; f != MetadataPath && (!ok || string(b) != string(top[f])) {
			diff = append(diff, f)
		}
	}
	for f := range res.Files {
		if _, had := top[f]; !had && strings.HasPrefix(f, api.AcceptedDir) {
			diff = append(diff, f)
		}
	}
	r.writeClustersMetadata(res, req, prevMeta, writers, len(diff) > 0)
	if b, ok := res.Files[MetadataPath]; ok != (top[MetadataPath] != nil) || string(b) != string(top[MetadataPath]) {
		diff = append(diff, MetadataPath)
	}
	slices.Sort(diff)
	res.Diff = diff
	res.Errors.Sort()
	plan.Errors = fieldProblems(res.Errors)
	if reason := switchedLayout(stale); reason != "" && !req.AllowDeletions {
		res.Refused = &RefusedError{Reason: reason}
		plan.Refused = reason
		res.Files, res.Diff = prev, nil
	}
	res.Plan = plan
	return res
}

// switchedLayout says why a render that removes a whole folder no declared cluster renders is
// refused, whatever the deletion budget: turning spec.clusters on over a one-cluster rendered/
// (every broker moves to rendered/<cluster>/, and the folders a Flux or Argo CD may still apply
// go), or a cluster taken out of spec.clusters (all its brokers go). stale are the previous
// files outside every cluster's folder.
func switchedLayout(stale []string) string {
	for _, f := range stale {
		if _, ok := parseObjectPath(f); ok {
			return "the render removes the brokers of a folder no declared cluster renders (" + f + " goes): turning spec.clusters on moves every broker from rendered/<namespace>/ to rendered/<cluster>/<namespace>/, and a cluster taken out of spec.clusters loses its brokers; point each cluster's Flux or Argo CD at its folder, then render with --allow-deletions"
		}
	}
	return ""
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

// clusterRun is a cluster's last render, which a render of the repository reuses when nothing
// of the cluster changed.
type clusterRun struct {
	request Request
	result  *Result
	// out is the result's files where they are in the repository (rendered/<cluster>/...).
	out Tree
}

// outIn reports whether tree holds the run's output, the very bytes, where it belongs.
func (run *clusterRun) outIn(tree Tree) bool {
	for f, b := range run.out {
		if y, ok := tree[f]; !ok || !identity.Bytes(b, y) {
			return false
		}
	}
	return true
}

// sameInputs reports whether req has the very inputs of the run's request: the same files (by
// the identity of their bytes), the same invalid inputs and writers, and the same options.
func (run *clusterRun) sameInputs(req Request) bool {
	last := run.request
	return sameTree(req.Files, last.Files) && maps.Equal(req.Unreadable, last.Unreadable) &&
		maps.Equal(req.holdRollout, last.holdRollout) && maps.Equal(req.elsewhere, last.elsewhere) &&
		maps.Equal(req.Writers, last.Writers) && (req.Writers == nil) == (last.Writers == nil) &&
		slices.Equal(req.Invalid, last.Invalid) && req.AllowDeletions == last.AllowDeletions &&
		req.RenderedJobsOnly == last.RenderedJobsOnly && req.Trust == last.Trust
}

// sameTree reports whether a and b hold the same paths with the very same bytes.
func sameTree(a, b Tree) bool {
	if len(a) != len(b) {
		return false
	}
	for f, x := range a {
		y, ok := b[f]
		if !ok || !identity.Bytes(x, y) {
			return false
		}
	}
	return true
}

// settle notes in unsettled the Pod broker Configurations cluster has not settled, with why:
// those with a broker Deployment its render held, or one its recorder has not recorded
// Available with the inputs it is rendered with (record reads a record of the cluster's by the
// path one cluster's recorder gives it).
func settle(unsettled map[string]string, cluster string, res *Result, record func(p string) []byte) {
	if res.Plan != nil {
		for _, cp := range res.Plan.Configurations {
			for _, in := range cp.Instances {
				for _, ch := range in.Changes {
					if ch.Kind == "Deployment" && ch.Action == Held {
						k := cp.Namespace + "/" + cp.Name
						if _, ok := unsettled[k]; !ok {
							unsettled[k] = fmt.Sprintf("cluster %s (an earlier ring) still holds Deployment %s", cluster, ch.Name)
						}
					}
				}
			}
		}
	}
	for _, f := range sortedKeys(res.Files) {
		if !strings.HasPrefix(path.Base(f), "deployment-") || !strings.HasPrefix(f, RenderedDir) {
			continue
		}
		k := configKeyOf(f)
		if _, ok := unsettled[k]; ok || k == "" {
			continue
		}
		ns, _, _ := strings.Cut(k, "/")
		name := strings.TrimSuffix(strings.TrimPrefix(path.Base(f), "deployment-"), ".yaml")
		hash := inputsHashOf(res.Files[f])
		rec, errs := api.ParseRolloutFile(api.RolloutPath(ns, name), record(api.RolloutPath(ns, name)))
		switch {
		case record(api.RolloutPath(ns, name)) == nil:
			unsettled[k] = fmt.Sprintf("Deployment %s/%s in cluster %s (an earlier ring) has no record yet (is its recorder, record --cluster %s, running?)", ns, name, cluster, cluster)
		case len(errs) > 0 || !rec.Spec.Available || rec.Spec.InputsHash != hash:
			why := "not recorded Available with its new spec"
			if rec != nil && rec.Spec.Message != "" {
				why += ": " + rec.Spec.Message
			}
			unsettled[k] = fmt.Sprintf("Deployment %s/%s in cluster %s (an earlier ring) is %s", ns, name, cluster, why)
		}
	}
}

// inputsHashOf is a rendered object's gitbroker.dev/inputs-hash, read from its bytes.
func inputsHashOf(data []byte) string {
	_, rest, ok := strings.Cut(string(data), api.AnnotationInputsHash+": ")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "\n")
	return strings.Trim(v, "\"")
}
