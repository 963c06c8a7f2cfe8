package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
)

// copyFrozenConfigurations keeps the folders (and Flux Kustomizations) of Configurations whose
// file is invalid exactly as they were.
func (p *pass) copyFrozenConfigurations() {
	if len(p.frozenConfigs) == 0 {
		return
	}
	for _, k := range sortedKeys(p.frozenConfigs) {
		ns, name, _ := strings.Cut(k, "/")
		p.plan.config(ns, name, "invalid")
		prefix := configFolder(ns, name) + "/"
		for _, f := range p.prevPaths() {
			if strings.HasPrefix(f, prefix) {
				p.out[f] = p.prev[f]
			}
		}
	}
	for _, f := range p.prevPaths() {
		if !strings.HasPrefix(f, RenderedDir+"flux/") {
			continue
		}
		h := p.head(f, p.prev[f])
		folder := h.Spec.Path
		if strings.HasPrefix(f, FolderSourcesDir) {
			folder = h.Metadata.Annotations[AnnotationFolder]
		}
		rel := strings.TrimPrefix(path.Clean(folder), RenderedDir)
		parts := strings.Split(rel, "/")
		if len(parts) >= 2 && p.frozenConfigs[parts[0]+"/"+parts[1]] {
			p.out[f] = p.prev[f]
		}
	}
}

// kustomization is a kustomize.config.k8s.io Kustomization listing resources.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

func kustomizationFile(resources []string) []byte {
	sort.Strings(resources)
	if resources == nil {
		resources = []string{}
	}
	return marshal(kustomization{APIVersion: "kustomize.config.k8s.io/v1beta1", Kind: "Kustomization", Resources: resources})
}

// kustomization is kustomizationFile through the Renderer's memo: a folder of thousands of
// objects lists the same files render after render.
func (p *pass) kustomization(resources []string) []byte {
	sort.Strings(resources)
	h := sha256.New()
	for _, r := range resources {
		h.Write([]byte(r))
		h.Write([]byte{0})
	}
	key := "kustomization/" + hex.EncodeToString(h.Sum(nil))
	if data, ok := p.r.objs.lookup(key); ok {
		return data
	}
	data := kustomizationFile(resources)
	p.r.objs.store(key, data)
	return data
}

// fluxKustomization is the subset of kustomize.toolkit.fluxcd.io/v1 Kustomization written here.
type fluxKustomization struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       fluxSpec          `json:"spec"`
}

type fluxSpec struct {
	Interval      string        `json:"interval"`
	RetryInterval string        `json:"retryInterval"`
	Timeout       string        `json:"timeout"`
	Path          string        `json:"path"`
	Prune         bool          `json:"prune"`
	Wait          bool          `json:"wait"`
	SourceRef     fluxSourceRef `json:"sourceRef"`
	// ServiceAccountName is the account kustomize-controller impersonates to apply the folder.
	ServiceAccountName string `json:"serviceAccountName"`
}

type fluxSourceRef struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

func durationOr(d *metav1.Duration, def time.Duration) string {
	if d == nil {
		return def.String()
	}
	return d.Duration.String()
}

// layout writes the kustomization.yaml files, the root kustomization and rendered/flux/.
func (p *pass) layout() {
	// Folders of non-frozen Configurations and the files in each directory under them.
	dirs := map[string][]string{}
	folders := map[string]bool{}
	for f := range p.out {
		ref, ok := parseObjectPath(f)
		if !ok {
			continue
		}
		folder := configFolder(ref.namespace, ref.configuration)
		folders[folder] = true
		if p.frozenConfigs[ref.namespace+"/"+ref.configuration] {
			continue
		}
		dirs[path.Dir(f)] = append(dirs[path.Dir(f)], path.Base(f))
	}
	sub := map[string][]string{}
	for d := range dirs {
		if parent := path.Dir(d); folders[parent] && !folders[d] {
			sub[parent] = append(sub[parent], path.Base(d))
		}
	}
	f := p.settings.Flux
	for d, files := range dirs {
		p.out[d+"/kustomization.yaml"] = p.kustomization(append(files, sub[d]...))
	}
	for parent, subs := range sub {
		if _, ok := dirs[parent]; !ok {
			p.out[parent+"/kustomization.yaml"] = p.kustomization(append([]string(nil), subs...))
		}
	}
	// One Flux Kustomization per leaf folder: the Configuration's folder, or each of its shards,
	// named <namespace>-<configuration>[-<shard>]. Dashes can join differently ("a-b"/"c" and
	// "a"/"b-c"), so names that would be shared get a hash of their folder instead.
	names := map[string][]string{}
	for d := range dirs {
		if len(sub[d]) == 0 {
			base := strings.ReplaceAll(strings.TrimPrefix(d, RenderedDir), "/", "-")
			names[base] = append(names[base], d)
		}
	}
	fileNames := map[string]string{}
	for base, ds := range names {
		for _, d := range ds {
			fileNames[d] = base
			if len(ds) > 1 {
				fileNames[d] = base + "-" + hashHex(8, []byte(d))
			}
		}
	}
	for _, d := range sortedKeys(fileNames) {
		parts := strings.Split(strings.TrimPrefix(d, RenderedDir), "/")
		if n, max := len(dirs[d]), p.settings.MaxObjectsPerFolder; n > max {
			w := fmt.Sprintf("folder %s holds %d objects, more than maxObjectsPerFolder (%d): kustomize builds grow with the square of the object count and Flux runs one on every reconcile; raise spec.shards of Configuration %s/%s", d, n, max, parts[0], parts[1])
			p.layoutWarns[parts[0]+"/"+parts[1]] = append(p.layoutWarns[parts[0]+"/"+parts[1]], w)
			p.warn("%s", w)
		}
		if p.scope != nil {
			// The folders are those of the last render (mergeScope checks it), and so are their
			// Flux Kustomizations.
			continue
		}
		fileName := fileNames[d]
		name := shorten("gitbroker-" + fileName)
		fk := fluxKustomization{
			APIVersion: "kustomize.toolkit.fluxcd.io/v1",
			Kind:       "Kustomization",
			Metadata: metav1.ObjectMeta{Name: name, Namespace: f.Namespace, Labels: map[string]string{
				api.LabelManagedBy: api.ManagedByGitbroker, api.LabelConfiguration: parts[1]}},
			Spec: fluxSpec{
				Interval:           durationOr(f.Interval, 10*time.Minute),
				RetryInterval:      durationOr(f.RetryInterval, 2*time.Minute),
				Timeout:            durationOr(f.Timeout, 5*time.Minute),
				Path:               "./" + d,
				Prune:              true,
				Wait:               f.Wait,
				SourceRef:          fluxSourceRef{Kind: f.SourceRef.Kind, Name: f.SourceRef.Name, Namespace: f.SourceRef.Namespace},
				ServiceAccountName: f.ServiceAccountName,
			},
		}
		p.folderSource(&fk, fileName, d, parts[1])
		p.out[RenderedDir+"flux/"+fileName+".yaml"] = marshal(fk)
	}
	if p.scope != nil {
		// And so are the root and the namespaces.
		return
	}
	var roots []string
	for folder := range folders {
		roots = append(roots, strings.TrimPrefix(folder, RenderedDir))
	}
	if p.renderNamespaces(folders) {
		roots = append(roots, strings.TrimSuffix(strings.TrimPrefix(NamespacesDir, RenderedDir), "/"))
	}
	// Frozen Configurations whose folders were empty before stay out; the others are listed.
	if len(roots) > 0 || len(p.configs) > 0 || len(p.frozenConfigs) > 0 || len(p.prev) > 0 {
		p.out[RenderedDir+"kustomization.yaml"] = kustomizationFile(roots)
	}
}

// writeMetadata writes rendered/.gitbroker-render.yaml only when something else in rendered/
// changed (or which file defines which Configuration changed), so a render from the renderer's
// own commit, or from a commit that changes no output, commits nothing.
func (p *pass) writeMetadata() {
	if len(p.out) == 0 && len(p.prev) == 0 {
		return
	}
	// The one pass over every file that compares the output with the previous one; a scoped
	// pass compared its Configurations' files only (mergeScope).
	if !p.diffed {
		p.diff, p.diffed = Diff(p.prev, p.out), true
	}
	defer p.diffMetadata()
	prevData, hadPrev := p.prev[MetadataPath]
	sameFiles := fmt.Sprint(p.prevMeta.ConfigurationFiles) == fmt.Sprint(p.configFiles) ||
		(len(p.prevMeta.ConfigurationFiles) == 0 && len(p.configFiles) == 0)
	// A render without writers (a work tree, a check of a clone of the rendered branch) keeps
	// the tips the last verified render recorded.
	writers := p.req.Writers
	if writers == nil {
		writers = p.prevMeta.Writers
	}
	sameWriters := maps.Equal(p.prevMeta.Writers, writers)
	if hadPrev && sameFiles && sameWriters && (len(p.diff) == 0 || len(p.diff) == 1 && p.diff[0] == MetadataPath) {
		p.out[MetadataPath] = prevData
		return
	}
	m := Metadata{
		APIVersion:         api.APIVersion,
		Kind:               "RenderMetadata",
		SourceCommit:       p.req.SourceCommit,
		InputsDigest:       p.digest,
		ConfigurationFiles: p.configFiles,
		Writers:            writers,
	}
	p.out[MetadataPath] = marshal(m)
	wroteMetadata(p.out[MetadataPath], m)
}

// diffMetadata brings the diff up to date with the metadata file just written.
func (p *pass) diffMetadata() {
	p.diff = slices.DeleteFunc(p.diff, func(f string) bool { return f == MetadataPath })
	before, had := p.prev[MetadataPath]
	after, has := p.out[MetadataPath]
	if had != has || !bytes.Equal(before, after) {
		i, _ := slices.BinarySearch(p.diff, MetadataPath)
		p.diff = slices.Insert(p.diff, i, MetadataPath)
	}
}

// planFromDiff adds the Pod, Service and Flux changes, found by comparing files. Job changes
// were added while applying the lifecycle.
func (p *pass) planFromDiff() {
	newIDs := p.outIndex()
	moved := map[string]int{}
	for _, f := range p.diff {
		if f == NamespacesFluxFile {
			continue
		}
		if strings.HasPrefix(f, NamespacesDir) {
			name, ok := strings.CutPrefix(path.Base(f), "namespace-")
			if !ok {
				continue
			}
			ch := Change{Kind: "Namespace", Name: strings.TrimSuffix(name, ".yaml")}
			switch {
			case p.prev[f] == nil:
				ch.Action, ch.Reason = Created, "with the RoleBindings that let Flux apply brokers in it and the recorder keep their Pods' ends; never pruned"
			case p.out[f] == nil:
				ch.Action, ch.Reason = Removed, "no longer rendered; it stays in the cluster (namespaces are never pruned: deleting one deletes everything in it)"
			default:
				ch.Action = Updated
			}
			p.plan.plan.Namespaces = append(p.plan.plan.Namespaces, ch)
			continue
		}
		if strings.HasPrefix(f, FolderSourcesDir) {
			// Each follows its Kustomization, which the plan lists.
			continue
		}
		if strings.HasPrefix(f, RenderedDir+"flux/") {
			ns, cfg := "", ""
			data := p.out[f]
			if data == nil {
				data = p.prev[f]
			}
			h := p.head(f, data)
			parts := strings.Split(strings.TrimPrefix(path.Clean(h.Spec.Path), RenderedDir), "/")
			if len(parts) >= 2 {
				ns, cfg = parts[0], parts[1]
			}
			action := Updated
			switch {
			case p.prev[f] == nil:
				action = Created
			case p.out[f] == nil:
				action = Removed
			}
			p.plan.add(ns, cfg, "", Change{Action: action, Kind: "Kustomization", Name: h.Metadata.Name, Reason: "Flux applies " + h.Spec.Path})
			continue
		}
		ref, ok := parseObjectPath(f)
		if !ok || ref.kind == "job" {
			continue
		}
		kind := map[string]string{"pod": "Pod", "service": "Service"}[ref.kind]
		newF, inNew := newIDs[ref.key()]
		oldF, inOld := p.prevID(ref.key())
		if inNew && inOld && newF != oldF {
			if f == newF {
				moved[ref.namespace+"/"+ref.configuration]++
			}
			if !bytes.Equal(p.prev[oldF], p.out[newF]) && f == newF {
				m := p.meta[f]
				p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
				p.plan.add(m.ns, m.cfg, m.inst, Change{Action: replacedVerb(kind), Kind: kind, Name: ref.name, Reason: fieldDiff(p.prev[oldF], p.out[newF])})
			}
			continue
		}
		switch {
		case p.out[f] != nil && p.prev[f] == nil:
			m := p.meta[f]
			p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
			p.plan.add(m.ns, m.cfg, m.inst, Change{Action: startedVerb(kind), Kind: kind, Name: ref.name})
		case p.out[f] != nil:
			m := p.meta[f]
			if m.cfg == "" { // carried over from a frozen Configuration: not a change
				continue
			}
			p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
			p.plan.add(m.ns, m.cfg, m.inst, Change{Action: replacedVerb(kind), Kind: kind, Name: ref.name, Reason: fieldDiff(p.prev[f], p.out[f])})
		default:
			h := p.head(f, p.prev[f])
			inst := h.Metadata.Labels[api.LabelInstance]
			reason := ""
			if _, ok := p.configs[ref.namespace+"/"+ref.configuration]; !ok {
				p.plan.config(ref.namespace, ref.configuration, "deleted")
				reason = "its Configuration was deleted"
			} else if inst != "" && p.instance(ref.namespace+"/"+ref.configuration+"/"+inst) == nil {
				reason = "its device is no longer reported"
			}
			if inst != "" {
				p.plan.instance(ref.namespace, ref.configuration, inst, h.Metadata.Annotations[api.AnnotationDeviceID], nil)
			}
			p.plan.add(ref.namespace, ref.configuration, inst, Change{Action: Removed, Kind: kind, Name: ref.name, Reason: reason})
		}
	}
	for _, k := range sortedKeys(moved) {
		ns, name, _ := strings.Cut(k, "/")
		shards := 1
		if cfg, ok := p.configs[k]; ok {
			shards = cfg.Policy.Shards
		}
		c := p.plan.config(ns, name, "")
		c.Notes = append(c.Notes, fmt.Sprintf("%d objects move to other folders (spec.shards is now %d): they move between Flux Kustomizations, which re-apply them under a new owner", moved[k], shards))
	}
}

func startedVerb(kind string) string {
	if kind == "Pod" {
		return Started
	}
	return Created
}

func replacedVerb(kind string) string {
	if kind == "Pod" {
		return Replaced
	}
	return Updated
}

// checkSafety refuses renders that would remove too much: more than maxDeletionPercent of the
// broker objects, or all of them. Jobs retired to history are not deletions.
func (p *pass) checkSafety() string {
	newIDs := p.outIndex()
	removed := 0
	gone := func(id objectKey) {
		if _, kept := newIDs[id]; !kept && !p.retired[id] {
			removed++
		}
	}
	if p.outFromDiff {
		// Every object of prev has one file, and only the diff's files took theirs away.
		for _, f := range p.diff {
			if ref, ok := parseObjectPath(f); ok {
				if was, _ := p.prevID(ref.key()); was != f {
					continue
				}
				gone(ref.key())
			}
		}
	} else {
		for id := range p.prevIndex() {
			gone(id)
		}
	}
	total := p.prevLen()
	if total == 0 || removed == 0 || removed <= p.settings.DeletionAllowance {
		return ""
	}
	if len(newIDs) == 0 {
		return fmt.Sprintf("the render would remove all %d broker objects and leave rendered/ empty; if that is intended, render again with --allow-deletions", total)
	}
	if max := p.settings.MaxDeletionPercent; removed*100 > max*total {
		return fmt.Sprintf("the render would remove %d of %d broker objects (%d%%), more than maxDeletionPercent (%d%%); check the inventory and Configurations, or render again with --allow-deletions", removed, total, removed*100/total, max)
	}
	return ""
}

// overBudgetNodes is asked when a render would break the fleet-wide deletion budget. It finds
// the nodes whose inventory alone would remove more than maxDeletionPercent of the broker
// objects pinned to them: a node that suddenly reports nothing (wiped, misconfigured, or
// compromised) is then held as it was, and the rest of the fleet renders instead of the whole
// render being refused. An object counts against a node only when its Configuration still
// exists and its instance is gone from that node; a person's change to Configurations stays
// judged fleet-wide.
func (p *pass) overBudgetNodes() map[string]string {
	newIDs := p.outIndex()
	total, removed := map[string]int{}, map[string]int{}
	for _, f := range p.prevPaths() {
		ref, ok := parseObjectPath(f)
		if !ok {
			continue
		}
		h := p.head(f, p.prev[f])
		nodes := h.nodes()
		_, kept := newIDs[ref.key()]
		gone := !kept && !p.retired[ref.key()]
		_, cfgOK := p.configs[ref.namespace+"/"+ref.configuration]
		var sees map[string]bool
		if in := p.instance(ref.namespace + "/" + ref.configuration + "/" + h.Metadata.Labels[api.LabelInstance]); in != nil {
			sees = map[string]bool{}
			for _, n := range in.nodes {
				sees[n] = true
			}
		}
		for _, n := range nodes {
			total[n]++
			if gone && cfgOK && !sees[n] {
				removed[n]++
			}
		}
	}
	held := map[string]string{}
	limit := p.settings.MaxDeletionPercent
	for _, n := range sortedKeys(removed) {
		if r, t := removed[n], total[n]; r > p.settings.DeletionAllowance && r*100 > limit*t {
			held[n] = fmt.Sprintf("node %s: its inventory would remove %d of its %d broker objects (%d%%), more than maxDeletionPercent (%d%%); its part is kept as it was while the rest renders (check the node, or render with --allow-deletions)",
				n, r, t, r*100/t, limit)
		}
	}
	return held
}

// Where the broker namespaces are rendered: "_" cannot start a namespace's name, so the folder
// never meets a namespace's own. The name of their Flux Kustomization (and of its folder source)
// sorts before every folder's ("gitbroker-" and a namespace, which starts with a letter or a
// digit): the root Kustomization applies its objects in that order, so Flux creates, fetches
// and reconciles the namespaces first (renderNamespaces).
const (
	NamespacesDir           = RenderedDir + "_namespaces/"
	NamespacesFluxFile      = RenderedDir + "flux/_namespaces.yaml"
	NamespacesKustomization = "gitbroker--namespaces"
)

// roleBinding binds a ClusterRole to a ServiceAccount in namespace ns; it is named after the
// ServiceAccount.
func roleBinding(ns, clusterRole, account, accountNamespace string) []byte {
	return marshal(struct {
		APIVersion string              `json:"apiVersion"`
		Kind       string              `json:"kind"`
		Metadata   metav1.ObjectMeta   `json:"metadata"`
		RoleRef    map[string]string   `json:"roleRef"`
		Subjects   []map[string]string `json:"subjects"`
	}{"rbac.authorization.k8s.io/v1", "RoleBinding",
		metav1.ObjectMeta{Name: account, Namespace: ns, Labels: map[string]string{api.LabelManagedBy: api.ManagedByGitbroker}},
		map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": clusterRole},
		[]map[string]string{{"kind": "ServiceAccount", "name": account, "namespace": accountNamespace}}})
}

func renderNamespaces(f api.FluxSettings) bool { return f.Namespaces == nil || *f.Namespaces }

// renderNamespaces writes a Namespace for every namespace a rendered folder is in, with the
// RoleBinding that lets the applier account apply there and the one that lets the recorder read
// its broker Pods and their logs (list pods, get pods/log), and the Flux Kustomization that applies
// them (never pruning: deleting a namespace deletes everything in it). The folders' Kustomizations
// do not depend on it. With one source for all, a dependency must have applied the source's
// revision first, re-checked every --requeue-dependency (30 s): every render would wait. With
// folder sources, Flux enqueues a Kustomization's dependencies with it whenever its source moves
// (fluxcd/pkg/runtime dependency.Sort), so every device change would reconcile the namespaces
// too. Instead its name sorts first (NamespacesKustomization): Flux applies the root's
// Kustomizations and then their sources in name order, and its workers take them in the order
// they appear, so the namespaces are applied before all but the folders that start at the same
// moment. A folder applied before its namespace's RoleBinding exists fails (Forbidden) and
// retries after its retryInterval. It reports whether it wrote any.
func (p *pass) renderNamespaces(folders map[string]bool) bool {
	f := p.settings.Flux
	if !renderNamespaces(f) || len(folders) == 0 {
		return false
	}
	set := map[string]bool{}
	for folder := range folders {
		ns, _, _ := strings.Cut(strings.TrimPrefix(folder, RenderedDir), "/")
		set[ns] = true
	}
	var files []string
	for _, ns := range sortedKeys(set) {
		meta := metav1.ObjectMeta{Name: ns, Labels: map[string]string{api.LabelManagedBy: api.ManagedByGitbroker},
			Annotations: map[string]string{"kustomize.toolkit.fluxcd.io/prune": "disabled"}}
		p.out[NamespacesDir+"namespace-"+ns+".yaml"] = marshal(struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
		}{"v1", "Namespace", meta})
		p.out[NamespacesDir+"rolebinding-"+ns+".yaml"] = roleBinding(ns, api.DefaultFluxServiceAccount, f.ServiceAccountName, f.Namespace)
		p.out[NamespacesDir+"recorder-rolebinding-"+ns+".yaml"] = roleBinding(ns, api.RecorderPodsClusterRole, p.settings.Recorder.ServiceAccountName, p.settings.Recorder.Namespace)
		files = append(files, "namespace-"+ns+".yaml", "recorder-rolebinding-"+ns+".yaml", "rolebinding-"+ns+".yaml")
	}
	p.out[NamespacesDir+"kustomization.yaml"] = kustomizationFile(files)
	fk := fluxKustomization{
		APIVersion: "kustomize.toolkit.fluxcd.io/v1",
		Kind:       "Kustomization",
		Metadata:   metav1.ObjectMeta{Name: NamespacesKustomization, Namespace: f.Namespace, Labels: map[string]string{api.LabelManagedBy: api.ManagedByGitbroker}},
		Spec: fluxSpec{
			Interval:           durationOr(f.Interval, 10*time.Minute),
			RetryInterval:      durationOr(f.RetryInterval, 2*time.Minute),
			Timeout:            durationOr(f.Timeout, 5*time.Minute),
			Path:               "./" + strings.TrimSuffix(NamespacesDir, "/"),
			Prune:              false,
			SourceRef:          fluxSourceRef{Kind: f.SourceRef.Kind, Name: f.SourceRef.Name, Namespace: f.SourceRef.Namespace},
			ServiceAccountName: f.NamespacesServiceAccountName,
		},
	}
	p.folderSource(&fk, strings.TrimSuffix(path.Base(NamespacesFluxFile), ".yaml"), strings.TrimSuffix(NamespacesDir, "/"), "")
	p.out[NamespacesFluxFile] = marshal(fk)
	return true
}

// FolderSourcesDir holds the GitRepositories of spec.flux.folderSources, one per Flux
// Kustomization and named like it; AnnotationFolder names the folder each one shows.
const (
	FolderSourcesDir = RenderedDir + "flux/sources/"
	AnnotationFolder = "gitbroker.dev/folder"
)

// gitRepository is the subset of source.toolkit.fluxcd.io/v1 GitRepository written here.
type gitRepository struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		URL       string                    `json:"url"`
		SecretRef *api.LocalObjectReference `json:"secretRef,omitempty"`
		Interval  string                    `json:"interval"`
		Ref       struct {
			Branch string `json:"branch"`
		} `json:"ref"`
		Verify struct {
			Mode      string                   `json:"mode"`
			SecretRef api.LocalObjectReference `json:"secretRef"`
		} `json:"verify"`
		Ignore string `json:"ignore"`
	} `json:"spec"`
}

// folderSource points fk at a GitRepository of its own when spec.flux.folderSources is set, and
// writes it: it follows FolderBranch(name), which the renderer moves only when folder changes
// (Companions), verifies the renderer's signature like deploy/flux's, and keeps only folder in
// its artifact.
func (p *pass) folderSource(fk *fluxKustomization, fileName, folder, configuration string) {
	fs := p.settings.Flux.FolderSources
	if fs == nil {
		return
	}
	var g gitRepository
	g.APIVersion, g.Kind = "source.toolkit.fluxcd.io/v1", "GitRepository"
	g.Metadata = metav1.ObjectMeta{Name: fk.Metadata.Name, Namespace: fk.Metadata.Namespace,
		Labels:      map[string]string{api.LabelManagedBy: api.ManagedByGitbroker},
		Annotations: map[string]string{AnnotationFolder: folder}}
	if configuration != "" {
		g.Metadata.Labels[api.LabelConfiguration] = configuration
	}
	g.Spec.URL, g.Spec.SecretRef = fs.URL, fs.SecretRef
	g.Spec.Interval = durationOr(fs.Interval, time.Minute)
	g.Spec.Ref.Branch = FolderBranch(fk.Metadata.Name)
	g.Spec.Verify.Mode, g.Spec.Verify.SecretRef = "HEAD", *fs.VerifySecretRef
	g.Spec.Ignore = folderIgnore(folder)
	p.out[FolderSourcesDir+fileName+".yaml"] = marshal(g)
	fk.Spec.SourceRef = fluxSourceRef{Kind: "GitRepository", Name: g.Metadata.Name}
}

// FolderBranch is the branch a folder's source follows, named after its Flux Kustomization
// (unique in its namespace, and a DNS subdomain, so a valid branch name unless it ends in
// ".lock").
func FolderBranch(kustomization string) string {
	if strings.HasSuffix(kustomization, ".lock") {
		kustomization += "-" + hashHex(8, []byte(kustomization))
	}
	return api.FolderBranchPrefix + kustomization
}

// folderIgnore is the .gitignore that keeps only folder (and its parents' entries to it) in
// a source's artifact.
func folderIgnore(folder string) string {
	var b strings.Builder
	b.WriteString("/*\n")
	parts := strings.Split(folder, "/")
	for i := range parts {
		dir := "/" + strings.Join(parts[:i+1], "/")
		if i > 0 {
			b.WriteString("/" + strings.Join(parts[:i], "/") + "/*\n")
		}
		b.WriteString("!" + dir + "/\n")
	}
	return b.String()
}

// Companions lists the branches of the folder sources a rendered tree holds, each with the
// folder it shows, and with them api.FluxFolderBranch for rendered/flux: what the renderer
// moves with its commit (gitsync.Change.Companions).
func Companions(files Tree) map[string]string {
	out := map[string]string{}
	defer func() {
		if len(out) > 0 {
			out[api.FluxFolderBranch] = RenderedDir + "flux"
		}
	}()
	for f, data := range files {
		if !strings.HasPrefix(f, FolderSourcesDir) || !strings.HasSuffix(f, ".yaml") {
			continue
		}
		var g gitRepository
		js, err := api.YAMLToJSON(data)
		if err != nil || json.Unmarshal(js, &g) != nil {
			continue
		}
		branch, folder := g.Spec.Ref.Branch, g.Metadata.Annotations[AnnotationFolder]
		if strings.HasPrefix(branch, api.FolderBranchPrefix) && strings.HasPrefix(folder+"/", RenderedDir) {
			out[branch] = folder
		}
	}
	return out
}
