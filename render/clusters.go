package render

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/identity"
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

// parsedSettings are a request's gitbroker.yaml, parsed once per render, and its errors.
type parsedSettings struct {
	settings   api.ResolvedSettings
	errs       api.ErrorList
	unreadable bool
}

func settingsOf(req Request) parsedSettings {
	if _, unreadable := req.Unreadable[api.SettingsPath]; unreadable {
		return parsedSettings{unreadable: true}
	}
	s, errs := api.ParseSettings(api.SettingsPath, req.Files[api.SettingsPath])
	return parsedSettings{settings: s, errs: errs}
}

// clusters reports whether the settings declare clusters and are valid (invalid settings
// render nothing, whatever the layout: the single pass says why).
func (s parsedSettings) clusters() bool {
	return !s.unreadable && len(s.errs) == 0 && s.settings.Clusters.Enabled()
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

// renderClusters renders a repository of several clusters: partitionClusters gives each
// cluster its inputs and previous output, renderCluster renders each (in ring order, a ring's
// rollout held while an earlier ring has not settled), and a clusterMerge puts their parts and
// the top of rendered/ together.
func (r *Renderer) renderClusters(req Request, settings api.ResolvedSettings) *Result {
	// The clusters' passes take the settings parsed here: gitbroker.yaml of a thousand
	// clusters is parsed once, not once per cluster.
	r.settings = &settings
	defer func() { r.settings = nil }()
	cs := settings.Clusters
	in := r.split(req)
	s := r.partitionClusters(req, in, cs)
	m := newClusterMerge(req, s, digestOf(req.Files, in.inputs))
	for name := range r.clusters {
		if _, ok := cs.Named(name); !ok {
			delete(r.clusters, name)
		}
	}
	// The rings of a rollout across clusters, first first: a ring's changed brokers of a
	// Configuration wait while a cluster of a ring before it has not settled that
	// Configuration (unsettled, with why).
	unsettled := map[string]string{}
	var holds map[string]string
	for i, g := range cs.Rings() {
		if cs.Staged() {
			m.plan.Rings = append(m.plan.Rings, PlanRing{Name: g.Name, Clusters: g.Clusters})
		}
		holds = nil
		if i > 0 && len(unsettled) > 0 {
			holds = maps.Clone(unsettled)
		}
		for _, name := range g.Clusters {
			c, _ := cs.Named(name)
			part := r.renderCluster(c, req, s, holds)
			m.add(part)
			if cs.Staged() {
				settle(unsettled, c.Name, part.result, func(p string) []byte { return req.Files[api.ClusterStatusPath(c.Name, p)] })
			}
		}
	}
	return r.finishClusters(m, req, s)
}

// clusterPart is one cluster's render, placed in the repository.
type clusterPart struct {
	cluster string
	result  *Result
	// reused says result is the cluster's last render, taken again: nothing of it changed.
	reused bool
	// files are the result's files where the repository holds them (rendered/<cluster>/...),
	// and diff the paths of those that changed.
	files  Tree
	diff   []string
	shares map[string]sharesFile
}

// renderCluster renders cluster c of the repository with its Renderer, on top of what that
// Renderer wrote last when the repository still holds it, or else of the cluster's part of the
// previous output (and of the Jobs it carries from stale folders).
func (r *Renderer) renderCluster(c api.Cluster, req Request, s *clusterSplit, holds map[string]string) clusterPart {
	sub := s.request(c.Name, req, holds)
	cr := r.clusterRenderer(c)
	carry := s.carried.files[c.Name]
	count := s.counts[c.Name]
	part := clusterPart{cluster: c.Name}
	if last := cr.lastRun; last != nil && count == len(last.out) && last.outIn(s.prev) {
		if last.sameInputs(sub) && len(carry) == 0 {
			// Nothing of the cluster changed: its render would be the last one again
			// (even under a new source commit, which only a changed file records).
			part.result, part.reused, part.files, part.shares = last.result, true, last.out, cr.shares
			return part
		}
		sub.Previous = last.result.Files // the very map: its Renderer's fast path
	} else if count > 0 || cr.shares == nil {
		sub.Previous = s.previousOf(c.Name)
	} else {
		sub.Previous = Tree{}
	}
	if len(carry) > 0 {
		if count > 0 {
			sub.Previous = maps.Clone(sub.Previous) // never its Renderer's last output
		}
		maps.Copy(sub.Previous, carry)
	}
	if cr.shares == nil {
		// A Renderer new to the cluster finds what its nodes were given in the repository's
		// shares files.
		maps.Copy(sub.Previous, s.sharesFiles)
	}
	sr := cr.Render(sub)
	part.result, part.shares = sr, cr.shares
	rd, hd := clusterDir(RenderedDir, c.Name), clusterDir(HistoryDir, c.Name)
	place := func(f string) string {
		if rest, ok := strings.CutPrefix(f, RenderedDir); ok {
			return rd + rest
		}
		return hd + strings.TrimPrefix(f, HistoryDir)
	}
	part.files = make(Tree, len(sr.Files))
	for f, b := range sr.Files {
		if !strings.HasPrefix(f, api.AcceptedDir) {
			part.files[place(f)] = b
		}
	}
	cr.lastRun = nil
	if !r.once && sr.Refused == nil {
		cr.lastRun = &clusterRun{request: sub, result: sr, out: part.files}
	}
	changed := sr.Diff
	switch {
	case count == 0 && len(carry) > 0:
		// Its render was made on top of the one-cluster layout's Jobs, which the repository
		// holds elsewhere: every file of the cluster is new here.
		changed = sortedKeys(sr.Files)
	case len(carry) > 0:
		// Made on top of Jobs a former cluster's folder holds: what it kept of them is new
		// here, besides what its render changed.
		set := map[string]bool{}
		for _, f := range sr.Diff {
			set[f] = true
		}
		for f := range carry {
			if _, kept := sr.Files[f]; kept {
				set[f] = true
			}
		}
		changed = sortedKeys(set)
	}
	for _, f := range changed {
		if !strings.HasPrefix(f, api.AcceptedDir) { // the top's, not the cluster's
			part.diff = append(part.diff, place(f))
		}
	}
	return part
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
