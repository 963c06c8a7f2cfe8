package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// copyFrozenConfigurations keeps the folders (and Flux Kustomizations) of Configurations whose
// file is invalid exactly as they were.
func (p *pass) copyFrozenConfigurations() {
	if len(p.loaded.frozenConfigs) == 0 {
		return
	}
	for _, k := range sortedKeys(p.loaded.frozenConfigs) {
		ns, name, _ := strings.Cut(k, "/")
		p.plan.config(ns, name, "invalid")
		prefix := configFolder(ns, name) + "/"
		for _, f := range p.prevPaths() {
			if strings.HasPrefix(f, prefix) {
				p.output.files[f] = p.prev[f]
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
		rel := strings.TrimPrefix(p.ownFolder(folder), RenderedDir)
		parts := strings.Split(rel, "/")
		if len(parts) >= 2 && p.loaded.frozenConfigs[parts[0]+"/"+parts[1]] {
			p.output.files[f] = p.prev[f]
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
	return yamlcodec.Marshal(kustomization{APIVersion: "kustomize.config.k8s.io/v1beta1", Kind: "Kustomization", Resources: resources})
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

// layout writes the kustomization.yaml files, the root kustomization and rendered/flux/.
func (p *pass) layout() {
	t := folderTreeOf(p.output.files, p.loaded.frozenConfigs)
	for d, files := range t.dirs {
		p.output.files[d+"/kustomization.yaml"] = p.kustomization(append(files, t.sub[d]...))
	}
	for parent, subs := range t.sub {
		if _, ok := t.dirs[parent]; !ok {
			p.output.files[parent+"/kustomization.yaml"] = p.kustomization(append([]string(nil), subs...))
		}
	}
	fileNames := fluxFileNames(t)
	for _, d := range sortedKeys(fileNames) {
		parts := strings.Split(strings.TrimPrefix(d, RenderedDir), "/")
		if n, max := len(t.dirs[d]), p.loaded.settings.MaxObjectsPerFolder; n > max {
			w := fmt.Sprintf("folder %s holds %d objects, more than maxObjectsPerFolder (%d): kustomize builds grow with the square of the object count and Flux runs one on every reconcile; raise spec.shards of Configuration %s/%s", d, n, max, parts[0], parts[1])
			p.output.layoutWarns[parts[0]+"/"+parts[1]] = append(p.output.layoutWarns[parts[0]+"/"+parts[1]], w)
			p.warn("%s", w)
		}
		if p.scoping.scope != nil {
			// The folders are those of the last render (mergeScope checks it), and so are their
			// Flux Kustomizations.
			continue
		}
		fk := p.fluxFor(d, fileNames[d], parts[1])
		p.folderSource(&fk, fileNames[d], d, parts[1])
		p.output.files[RenderedDir+"flux/"+fileNames[d]+".yaml"] = yamlcodec.Marshal(fk)
	}
	if p.scoping.scope != nil {
		// And so are the root and the namespaces.
		return
	}
	var roots []string
	for folder := range t.folders {
		roots = append(roots, strings.TrimPrefix(folder, RenderedDir))
	}
	if p.renderNamespaces(t.folders) {
		roots = append(roots, strings.TrimSuffix(strings.TrimPrefix(NamespacesDir, RenderedDir), "/"))
	}
	// Frozen Configurations whose folders were empty before stay out; the others are listed.
	if len(roots) > 0 || len(p.loaded.configs) > 0 || len(p.loaded.frozenConfigs) > 0 || len(p.prev) > 0 {
		p.output.files[RenderedDir+"kustomization.yaml"] = kustomizationFile(roots)
	}
}

// folderTree is the folders of the rendered objects.
type folderTree struct {
	// folders are the Configurations' folders, frozen ones too.
	folders map[string]bool
	// dirs are the files in each directory under the folders of Configurations that are not
	// frozen, and sub the subdirectories (shards) of a folder.
	dirs, sub map[string][]string
}

func folderTreeOf(out Tree, frozenConfigs map[string]bool) folderTree {
	t := folderTree{folders: map[string]bool{}, dirs: map[string][]string{}, sub: map[string][]string{}}
	for f := range out {
		ref, ok := parseObjectPath(f)
		if !ok {
			continue
		}
		t.folders[configFolder(ref.namespace, ref.configuration)] = true
		if frozenConfigs[ref.namespace+"/"+ref.configuration] {
			continue
		}
		t.dirs[path.Dir(f)] = append(t.dirs[path.Dir(f)], path.Base(f))
	}
	for d := range t.dirs {
		if parent := path.Dir(d); t.folders[parent] && !t.folders[d] {
			t.sub[parent] = append(t.sub[parent], path.Base(d))
		}
	}
	return t
}

// fluxFileNames names one Flux Kustomization per leaf folder: the Configuration's folder, or each
// of its shards, named <namespace>-<configuration>[-<shard>]. Dashes can join differently
// ("a-b"/"c" and "a"/"b-c"), so names that would be shared get a hash of their folder instead.
func fluxFileNames(t folderTree) map[string]string {
	names := map[string][]string{}
	for d := range t.dirs {
		if len(t.sub[d]) == 0 {
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
	return fileNames
}

// fluxFor is the Flux Kustomization that applies one leaf folder.
func (p *pass) fluxFor(folder, fileName, configuration string) fluxKustomization {
	f := p.loaded.settings.Flux
	return fluxKustomization{
		APIVersion: "kustomize.toolkit.fluxcd.io/v1",
		Kind:       "Kustomization",
		Metadata: metav1.ObjectMeta{Name: shorten("gitbroker-" + fileName), Namespace: f.Namespace, Labels: map[string]string{
			api.LabelManagedBy: api.ManagedByGitbroker, api.LabelConfiguration: configuration}},
		Spec: fluxSpec{
			Interval:           durationOr(f.Interval, 10*time.Minute),
			RetryInterval:      durationOr(f.RetryInterval, 2*time.Minute),
			Timeout:            durationOr(f.Timeout, 5*time.Minute),
			Path:               "./" + p.applied(folder),
			Prune:              true,
			Wait:               f.Wait,
			SourceRef:          fluxSourceRef{Kind: f.SourceRef.Kind, Name: f.SourceRef.Name, Namespace: f.SourceRef.Namespace},
			ServiceAccountName: f.ServiceAccountName,
		},
	}
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
	return yamlcodec.Marshal(struct {
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
	f := p.loaded.settings.Flux
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
		p.output.files[NamespacesDir+"namespace-"+ns+".yaml"] = yamlcodec.Marshal(struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
		}{"v1", "Namespace", meta})
		p.output.files[NamespacesDir+"rolebinding-"+ns+".yaml"] = roleBinding(ns, api.DefaultFluxServiceAccount, f.ServiceAccountName, f.Namespace)
		p.output.files[NamespacesDir+"recorder-rolebinding-"+ns+".yaml"] = roleBinding(ns, api.RecorderPodsClusterRole, p.loaded.settings.Recorder.ServiceAccountName, p.loaded.settings.Recorder.Namespace)
		files = append(files, "namespace-"+ns+".yaml", "recorder-rolebinding-"+ns+".yaml", "rolebinding-"+ns+".yaml")
	}
	p.output.files[NamespacesDir+"kustomization.yaml"] = kustomizationFile(files)
	fk := fluxKustomization{
		APIVersion: "kustomize.toolkit.fluxcd.io/v1",
		Kind:       "Kustomization",
		Metadata:   metav1.ObjectMeta{Name: NamespacesKustomization, Namespace: f.Namespace, Labels: map[string]string{api.LabelManagedBy: api.ManagedByGitbroker}},
		Spec: fluxSpec{
			Interval:           durationOr(f.Interval, 10*time.Minute),
			RetryInterval:      durationOr(f.RetryInterval, 2*time.Minute),
			Timeout:            durationOr(f.Timeout, 5*time.Minute),
			Path:               "./" + p.applied(strings.TrimSuffix(NamespacesDir, "/")),
			Prune:              false,
			SourceRef:          fluxSourceRef{Kind: f.SourceRef.Kind, Name: f.SourceRef.Name, Namespace: f.SourceRef.Namespace},
			ServiceAccountName: f.NamespacesServiceAccountName,
		},
	}
	p.folderSource(&fk, strings.TrimSuffix(path.Base(NamespacesFluxFile), ".yaml"), strings.TrimSuffix(NamespacesDir, "/"), "")
	p.output.files[NamespacesFluxFile] = yamlcodec.Marshal(fk)
	return true
}

// FolderSourcesDir holds the GitRepositories of spec.flux.folderSources, one per Flux
// Kustomization and named like it; AnnotationFolder names the folder each one shows.
const (
	FolderSourcesDir = RenderedDir + "flux/sources/"
	AnnotationFolder = "gitbroker.dev/folder"
)

// applied is where Flux finds dir of this render's output in the repository: dir itself, or,
// for one cluster of several, dir under rendered/<cluster>/ (clusters.go).
func (p *pass) applied(dir string) string {
	if p.r.cluster == nil {
		return dir
	}
	return clusterDir(RenderedDir, p.r.cluster.Name) + strings.TrimPrefix(dir, RenderedDir)
}

// ownFolder is applied undone: the folder of this render's output that a Flux object's path
// or folder annotation (as applied wrote it, with or without "./") names.
func (p *pass) ownFolder(applied string) string {
	dir := path.Clean(applied)
	if p.r.cluster != nil {
		if rest, ok := strings.CutPrefix(dir+"/", clusterDir(RenderedDir, p.r.cluster.Name)); ok {
			return path.Clean(RenderedDir + rest)
		}
	}
	return dir
}
