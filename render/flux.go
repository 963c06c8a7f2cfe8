package render

import (
	"encoding/json"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

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
	fs := p.loaded.settings.Flux.FolderSources
	if fs == nil {
		return
	}
	var g gitRepository
	g.APIVersion, g.Kind = "source.toolkit.fluxcd.io/v1", "GitRepository"
	// Where Flux finds the folder: for one cluster of several, under rendered/<cluster>/, on a
	// branch under the cluster's prefix.
	folder = p.applied(folder)
	g.Metadata = metav1.ObjectMeta{Name: fk.Metadata.Name, Namespace: fk.Metadata.Namespace,
		Labels:      map[string]string{api.LabelManagedBy: api.ManagedByGitbroker},
		Annotations: map[string]string{AnnotationFolder: folder}}
	if configuration != "" {
		g.Metadata.Labels[api.LabelConfiguration] = configuration
	}
	g.Spec.URL, g.Spec.SecretRef = fs.URL, fs.SecretRef
	g.Spec.Interval = durationOr(fs.Interval, time.Minute)
	g.Spec.Ref.Branch = FolderBranch(fk.Metadata.Name)
	if c := p.r.cluster; c != nil {
		g.Spec.Ref.Branch = api.ClusterFolderBranchPrefix(c.Name) + strings.TrimPrefix(g.Spec.Ref.Branch, api.FolderBranchPrefix)
	}
	g.Spec.Verify.Mode, g.Spec.Verify.SecretRef = "HEAD", *fs.VerifySecretRef
	g.Spec.Ignore = folderIgnore(folder)
	p.output.files[FolderSourcesDir+fileName+".yaml"] = yamlcodec.Marshal(g)
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

// AcceptedCompanions lists the branches of the accepted-tips shards a rendered tree holds, each
// with its folder (api.AcceptedBranchPrefix): what the renderer moves with its commit, so that
// a restarted writer reads its accepted tip from its shard's branch alone.
func AcceptedCompanions(files Tree) map[string]string {
	out := map[string]string{}
	for i := range api.AcceptedShards {
		shard := api.AcceptedShardName(i)
		if _, ok := files[api.AcceptedFile(shard)]; ok {
			out[api.AcceptedBranchPrefix+shard] = api.AcceptedFolder(shard)
		}
	}
	return out
}

// IsFolderSourcePath reports whether p is in the folder sources' folder of the rendered
// branch: rendered/flux/sources/, or rendered/<cluster>/flux/sources/ with spec.clusters.
func IsFolderSourcePath(p string) bool {
	_, ok := folderSourceOf(p)
	return ok
}

// folderSourceOf tells whether p is under a folder sources' folder, and whose: "" for the
// repository of one cluster, or the cluster's name.
func folderSourceOf(p string) (cluster string, ok bool) {
	rest, ok := strings.CutPrefix(p, RenderedDir)
	if !ok {
		return "", false
	}
	if strings.HasPrefix(rest, "flux/sources/") {
		return "", true
	}
	c, inner, nested := strings.Cut(rest, "/")
	if !nested || !strings.HasPrefix(inner, "flux/sources/") || api.CheckClusterName(c) != nil {
		return "", false
	}
	return c, true
}

// Companions lists the branches of the folder sources a rendered tree holds, each with the
// folder it shows, and with them api.FluxFolderBranch for rendered/flux: what the renderer
// moves with its commit (gitsync.Change.Companions). In a repository of several clusters each
// cluster's sources are in rendered/<cluster>/flux/sources/, on branches under
// api.ClusterFolderBranchPrefix(cluster), and its rendered/<cluster>/flux/ has a branch there
// too; a source is listed only when its branch and its folder are its own cluster's.
func Companions(files Tree) map[string]string {
	out := map[string]string{}
	for f, data := range files {
		cluster, ok := folderSourceOf(f)
		if !ok || !strings.HasSuffix(f, ".yaml") {
			continue
		}
		var g gitRepository
		js, err := yamlcodec.ToJSON(data)
		if err != nil || json.Unmarshal(js, &g) != nil {
			continue
		}
		branches, dir, fluxBranch := api.FolderBranchPrefix, RenderedDir, api.FluxFolderBranch
		if cluster != "" {
			branches, dir = api.ClusterFolderBranchPrefix(cluster), clusterDir(RenderedDir, cluster)
			fluxBranch = branches + "flux"
		} else if strings.HasPrefix(g.Spec.Ref.Branch, api.FolderBranchPrefix+"clusters/") {
			continue // a cluster's branch named by a one-cluster source
		}
		branch, folder := g.Spec.Ref.Branch, g.Metadata.Annotations[AnnotationFolder]
		if strings.HasPrefix(branch, branches) && strings.HasPrefix(folder+"/", dir) {
			out[branch] = folder
			out[fluxBranch] = dir + "flux"
		}
	}
	return out
}
