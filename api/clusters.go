package api

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Cluster is one cluster of spec.clusters, validated.
type Cluster struct {
	Name   string
	Labels map[string]string
	// Nodes are its node names and globs, as written.
	Nodes []string
	// Line is where the cluster is in gitbroker.yaml.
	Line int
}

// Clusters are the clusters of spec.clusters, in the order written, with what a node's
// membership is looked up by.
type Clusters struct {
	List []Cluster
	// exact maps a node name written as such to the clusters naming it.
	exact map[string][]int
	// globs maps the literal start of each glob (up to its first *, ? or [) to the globs with
	// that start, so a node is matched only against the globs it could match.
	globs map[string][]clusterGlob
	// starts are the distinct lengths of the globs' literal starts.
	starts []int
	file   string
	// byName indexes List by name.
	byName map[string]int
	// rollout is spec.clusterRollout; nil changes every cluster at once.
	rollout *ClusterRolloutSpec
}

type clusterGlob struct {
	pattern string
	cluster int
}

// ClusterNameMaxLength keeps rendered/<cluster>/ and the refs named after a cluster
// (gitbroker/status/<cluster>) short: a DNS label.
const ClusterNameMaxLength = validation.DNS1123LabelMaxLength

// validateClusters validates spec.clusters of d.
func validateClusters(d *Document, specs []ClusterSpec) (Clusters, ErrorList) {
	var errs ErrorList
	add := func(field, format string, args ...any) { errs = append(errs, d.Errorf(field, format, args...)) }
	cs := Clusters{exact: map[string][]int{}, globs: map[string][]clusterGlob{}, byName: map[string]int{}}
	seen := map[string]int{}
	for i, spec := range specs {
		f := fmt.Sprintf("spec.clusters[%d]", i)
		if err := CheckClusterName(spec.Name); err != nil {
			add(f+".name", "%v", err)
		} else if j, dup := seen[spec.Name]; dup {
			add(f+".name", "cluster %q is already spec.clusters[%d]", spec.Name, j)
		}
		seen[spec.Name] = i
		envs := map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(spec.Labels)) {
			if other, ok := envs[ClusterLabelEnv(k)]; ok {
				add(f+".labels."+k, "labels %s and %s are both %s in the brokers' environment; rename one", other, k, ClusterLabelEnv(k))
			}
			envs[ClusterLabelEnv(k)] = k
			if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
				add(f+".labels."+k, "%q is not a label key: %s", k, strings.Join(msgs, "; "))
			} else if msgs := validation.IsValidLabelValue(spec.Labels[k]); len(msgs) > 0 {
				add(f+".labels."+k, "%q is not a label value: %s", spec.Labels[k], strings.Join(msgs, "; "))
			}
		}
		if len(spec.Nodes) == 0 {
			add(f+".nodes", "required: the names or globs of the cluster's nodes")
		}
		for j, n := range spec.Nodes {
			if _, err := path.Match(n, ""); err != nil || n == "" || strings.ContainsAny(n, "/\\") {
				add(fmt.Sprintf("%s.nodes[%d]", f, j), "%q is not a node name or glob (path.Match: *, ?, [a-z])", n)
				continue
			}
			start := n
			if k := strings.IndexAny(n, "*?["); k >= 0 {
				start = n[:k]
			} else {
				cs.exact[n] = append(cs.exact[n], i)
				continue
			}
			if _, ok := cs.globs[start]; !ok && !slices.Contains(cs.starts, len(start)) {
				cs.starts = append(cs.starts, len(start))
			}
			cs.globs[start] = append(cs.globs[start], clusterGlob{n, i})
		}
		if _, dup := cs.byName[spec.Name]; !dup {
			cs.byName[spec.Name] = len(cs.List)
		}
		cs.List = append(cs.List, Cluster{Name: spec.Name, Labels: spec.Labels, Nodes: spec.Nodes, Line: d.LineOf(f)})
	}
	slices.Sort(cs.starts)
	return cs, errs
}

// Enabled reports whether the repository declares clusters.
func (cs Clusters) Enabled() bool { return len(cs.List) > 0 }

// Of returns the names of the clusters node is in: exactly one for a node that belongs, none or
// several for a node that is an error.
func (cs Clusters) Of(node string) []string {
	var in []int
	add := func(i int) {
		if !slices.Contains(in, i) {
			in = append(in, i)
		}
	}
	for _, i := range cs.exact[node] {
		add(i)
	}
	for _, n := range cs.starts {
		if n > len(node) {
			break
		}
		for _, g := range cs.globs[node[:n]] {
			if ok, _ := path.Match(g.pattern, node); ok {
				add(g.cluster)
			}
		}
	}
	slices.Sort(in)
	names := make([]string, len(in))
	for k, i := range in {
		names[k] = cs.List[i].Name
	}
	return names
}

// MembershipError says why node is in no cluster, or in several: what the plan reports at the
// node's inventory file, whose devices then render nowhere.
func (cs Clusters) MembershipError(node string, in []string) string {
	if len(in) == 0 {
		return fmt.Sprintf("node %s is in no cluster of %s's spec.clusters: add it to one (by name or glob); its devices render nowhere until then", node, cs.fileName())
	}
	return fmt.Sprintf("node %s is in %d clusters of %s's spec.clusters (%s): a node belongs to one; its devices render nowhere until then", node, len(in), cs.fileName(), strings.Join(in, ", "))
}

func (cs Clusters) fileName() string {
	if cs.file == "" {
		return SettingsPath
	}
	return cs.file
}

// Named returns the cluster called name.
func (cs Clusters) Named(name string) (Cluster, bool) {
	i, ok := cs.byName[name]
	if !ok {
		return Cluster{}, false
	}
	return cs.List[i], true
}

// Selects reports whether selector (nil: every cluster) selects c.
func (c Cluster) Selects(selector labels.Selector) bool {
	return selector == nil || selector.Matches(labels.Set(c.Labels))
}

// reservedClusterName reports whether name is a folder of status/ itself (status/jobs/, ...),
// which a cluster's records folder, status/<cluster>/, must not be.
func reservedClusterName(name string) bool {
	for _, k := range StatusKinds {
		if path.Base(k.Dir) == name {
			return true
		}
	}
	return false
}

// ClusterStatusPath is where cluster's recorder writes the record a recorder of one cluster
// writes at p (status/jobs/plant/x.yaml: status/<cluster>/jobs/plant/x.yaml).
func ClusterStatusPath(cluster, p string) string {
	return "status/" + cluster + "/" + strings.TrimPrefix(p, "status/")
}

// SplitClusterStatusPath is ClusterStatusPath undone: the cluster and the record's path as one
// cluster's, for a record of a cluster's recorder.
func SplitClusterStatusPath(p string) (cluster, inner string, ok bool) {
	rest, ok := strings.CutPrefix(p, "status/")
	if !ok {
		return "", "", false
	}
	cluster, rest, ok = strings.Cut(rest, "/")
	if !ok || reservedClusterName(cluster) || len(validation.IsDNS1123Label(cluster)) > 0 {
		return "", "", false
	}
	inner = "status/" + rest
	if !IsStatusPath(inner) {
		return "", "", false
	}
	return cluster, inner, true
}

// ClusterStatusBranch is the ref the recorder of cluster writes (StatusBranch is a recorder's of
// a repository of one cluster).
func ClusterStatusBranch(cluster string) string { return StatusBranch + "/" + cluster }

// ClusterFolderBranchPrefix is where the folder sources' branches of cluster live
// (spec.flux.folderSources): ClusterFolderBranchPrefix(cluster)+"flux" shows
// rendered/<cluster>/flux/, and +<Kustomization name> each of its rendered folders. Under
// FolderBranchPrefix, and never a one-cluster folder's branch: those are named after a
// Kustomization, which starts with "gitbroker-", or are FluxFolderBranch.
func ClusterFolderBranchPrefix(cluster string) string {
	return FolderBranchPrefix + "clusters/" + cluster + "/"
}

// CheckClusterName says what is wrong with name as a cluster's name, or nil.
func CheckClusterName(name string) error {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return fmt.Errorf("%q is not a valid cluster name (a DNS label: it names rendered/<cluster>/ and the cluster's refs)", name)
	}
	if reservedClusterName(name) {
		return fmt.Errorf("%q names a folder of the recorder's records (status/%s/); choose another name", name, name)
	}
	return nil
}

// Ring is one ring of a rollout across clusters: the clusters that change together.
type Ring struct {
	// Name is the label's value, or "rest" for the clusters no listed value names.
	Name     string
	Clusters []string
}

// Rings orders the clusters in the rings of spec.clusterRollout, first first; without it every
// cluster is one ring.
func (cs Clusters) Rings() []Ring {
	r := cs.rollout
	if r == nil {
		var all []string
		for _, c := range cs.List {
			all = append(all, c.Name)
		}
		return []Ring{{Name: "all", Clusters: all}}
	}
	rings := make([]Ring, len(r.Rings)+1)
	for i, v := range r.Rings {
		rings[i].Name = v
	}
	rings[len(r.Rings)].Name = "rest"
	for _, c := range cs.List {
		i := slices.Index(r.Rings, c.Labels[r.Label])
		if _, labelled := c.Labels[r.Label]; !labelled || i < 0 {
			i = len(r.Rings)
		}
		rings[i].Clusters = append(rings[i].Clusters, c.Name)
	}
	return slices.DeleteFunc(rings, func(g Ring) bool { return len(g.Clusters) == 0 })
}

// Staged reports whether changes roll out cluster by cluster (spec.clusterRollout).
func (cs Clusters) Staged() bool { return cs.rollout != nil }

// validateClusterRollout validates spec.clusterRollout of d.
func validateClusterRollout(d *Document, r *ClusterRolloutSpec, clusters bool) ErrorList {
	var errs ErrorList
	add := func(field, format string, args ...any) { errs = append(errs, d.Errorf(field, format, args...)) }
	if !clusters {
		add("spec.clusterRollout", "needs spec.clusters: it orders clusters")
	}
	if msgs := validation.IsQualifiedName(r.Label); len(msgs) > 0 {
		add("spec.clusterRollout.label", "%q is not a label key: %s", r.Label, strings.Join(msgs, "; "))
	}
	if len(r.Rings) == 0 {
		add("spec.clusterRollout.rings", "required: the label's values, first ring first (a canary ring, say)")
	}
	for i, v := range r.Rings {
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 || v == "" {
			add(fmt.Sprintf("spec.clusterRollout.rings[%d]", i), "%q is not a label value", v)
		} else if slices.Index(r.Rings, v) < i {
			add(fmt.Sprintf("spec.clusterRollout.rings[%d]", i), "%q is listed twice", v)
		}
	}
	return errs
}

// ClusterLabelEnv is the environment variable that tells the brokers of a cluster its label
// key's value: GITBROKER_CLUSTER_LABEL_ and the key upper-cased, with every character that is
// neither a letter nor a digit an underscore.
func ClusterLabelEnv(key string) string {
	return "GITBROKER_CLUSTER_LABEL_" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, key)
}
