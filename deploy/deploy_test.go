package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

func TestObjectsSetURLAndBranch(t *testing.T) {
	for _, folder := range []string{"flux", "argocd"} {
		objs, err := Objects(folder, "https://git.example.org/plant/edge.git#frag", "release/2026: 11")
		require.NoError(t, err)
		require.NotEmpty(t, objs)
		for name, data := range objs {
			text := string(data)
			require.NotContains(t, text, PlaceholderURL, "%s/%s", folder, name)
			require.NotRegexp(t, `(?m)^\s*(branch|revision|targetRevision): gitbroker/rendered$`, text, "%s/%s", folder, name)
			// Quoted values stay one YAML string, whatever they hold.
			var doc map[string]any
			require.NoError(t, yaml.Unmarshal(data, &doc), "%s/%s", folder, name)
			if strings.Contains(text, "repoURL") || strings.Contains(text, "url:") {
				require.Contains(t, text, `"https://git.example.org/plant/edge.git#frag"`)
			}
		}
	}
	flux, err := Objects("flux", "https://git.example.org/plant/edge.git", "release/2026: 11")
	require.NoError(t, err)
	var repo struct {
		Spec struct {
			URL string `json:"url"`
			Ref struct {
				Branch string `json:"branch"`
			} `json:"ref"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(flux["gitrepository.yaml"], &repo))
	require.Equal(t, "https://git.example.org/plant/edge.git", repo.Spec.URL)
	// The admission policy's parameters hold the same URL: the only one a rendered
	// GitRepository may fetch.
	require.Contains(t, string(flux["admission.yaml"]), `url: "https://git.example.org/plant/edge.git"`)
	require.Equal(t, "release/2026: 11", repo.Spec.Ref.Branch)
	// The Receiver the renderer tells fetches the GitRepository when that branch moved.
	var receiver struct {
		Spec struct {
			ResourceFilter string `json:"resourceFilter"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(flux["receiver.yaml"], &receiver))
	require.Equal(t, `req.branches.exists(b, b == 'release/2026: 11')`, receiver.Spec.ResourceFilter)

	objs, err := Objects("argocd", "https://x.example/r.git", "prod")
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(objs["applicationset.yaml"]), `"https://x.example/r.git"`), "the generator and the template")
	require.Contains(t, string(objs["applicationset.yaml"]), `revision: "prod"`)
}

// deploy/flux's GitRepository is the source the renderer's Flux Kustomizations name by default,
// so a user who applies deploy/flux without touching gitbroker.yaml gets Kustomizations whose
// source exists.
func TestFluxSourceIsTheRenderersDefault(t *testing.T) {
	objs, err := Objects("flux", PlaceholderURL, "main")
	require.NoError(t, err)
	type ref struct {
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	}
	var repo struct {
		ref
		Metadata ref `json:"metadata"`
	}
	require.NoError(t, yaml.Unmarshal(objs["gitrepository.yaml"], &repo))
	var root struct {
		Metadata ref `json:"metadata"`
		Spec     struct {
			SourceRef ref `json:"sourceRef"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(objs["rendered.yaml"], &root))

	defaults := api.DefaultSettings().Flux
	require.Equal(t, defaults.SourceRef.Kind, repo.Kind)
	require.Equal(t, defaults.SourceRef.Name, repo.Metadata.Name)
	require.Equal(t, defaults.Namespace, repo.Metadata.Namespace)
	require.Equal(t, repo.Metadata.Name, root.Spec.SourceRef.Name)
	require.Equal(t, repo.Metadata.Namespace, root.Metadata.Namespace)

	// And what the renderer writes for a repository without gitbroker.yaml names it.
	res := render.Render(render.Request{Files: render.Tree{
		"configurations/echo.yaml": podConfiguration("echo"),
		"inventory/n1.yaml":        inventory("echo"),
	}})
	require.Empty(t, res.Errors)
	var ks struct {
		Metadata ref `json:"metadata"`
		Spec     struct {
			SourceRef ref `json:"sourceRef"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(res.Files["rendered/flux/default-echo.yaml"], &ks))
	require.Equal(t, ref{Kind: repo.Kind, Name: repo.Metadata.Name}, ks.Spec.SourceRef)
	require.Equal(t, repo.Metadata.Namespace, ks.Metadata.Namespace)
}

// deploy/flux-folder-sources is deploy/flux with the root GitRepository on the branch the
// renderer keeps for rendered/flux/ alone.
func TestFluxFolderSourcesOverlay(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), "flux-folder-sources")
	require.NoError(t, err)
	base, err := k.Run(filesys.MakeFsOnDisk(), "flux")
	require.NoError(t, err)
	require.Equal(t, base.Size()+1, m.Size(), "the same objects and gitbroker-sources")
	for _, r := range m.Resources() {
		if r.GetKind() != "GitRepository" {
			continue
		}
		data, err := r.AsYAML()
		require.NoError(t, err)
		var repo struct {
			Spec struct {
				Ref struct {
					Branch string `json:"branch"`
				} `json:"ref"`
				Ignore string `json:"ignore"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal(data, &repo))
		require.Equal(t, api.FluxFolderBranch, repo.Spec.Ref.Branch)
		require.Equal(t, "/*\n!/rendered/\n/rendered/*\n!/rendered/flux/", strings.TrimSpace(repo.Spec.Ignore))
		return
	}
	t.Fatal("no GitRepository")
}

// With deploy/flux-folder-sources, the root Kustomization applies the folders' Kustomizations and
// gitbroker-sources their GitRepositories, each rendered object by exactly one of them. Built as
// kustomize-controller builds a path without a kustomization.yaml: every manifest under it, with
// the Kustomization's spec.patches (e2e's TestFolderSources and make bench-cluster run the real
// controller on it).
func TestFluxFolderSourcesSplitsTheRoot(t *testing.T) {
	files := render.Tree{
		api.SettingsPath: []byte(`apiVersion: gitbroker.dev/v1alpha1
kind: Settings
spec:
  flux:
    folderSources:
      url: https://git.example.com/fleet/edge.git
      verifySecretRef: {name: gitbroker-renderer-verify}
`),
		"inventory/n1.yaml": inventory("echo", "cam"),
	}
	for _, name := range []string{"echo", "cam"} {
		files["configurations/"+name+".yaml"] = podConfiguration(name)
	}
	res := render.Render(render.Request{Files: files})
	require.Empty(t, res.Errors)
	repo := t.TempDir()
	rendered := map[string]string{}
	for p, data := range res.Files {
		if !strings.HasPrefix(p, render.RenderedDir+"flux/") {
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Join(repo, path.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(repo, p), data, 0o644))
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal(data, &o), p)
		rendered[o.Kind+"/"+o.Metadata.Name] = p
	}
	require.Contains(t, rendered, "GitRepository/gitbroker-default-echo")
	require.Contains(t, rendered, "Kustomization/gitbroker-default-echo")

	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "flux-folder-sources")
	require.NoError(t, err)
	applied := map[string]string{}
	for _, r := range m.Resources() {
		if r.GetKind() != "Kustomization" {
			continue
		}
		data, err := r.AsYAML()
		require.NoError(t, err)
		var ks struct {
			Spec struct {
				Path    string           `json:"path"`
				Patches []map[string]any `json:"patches"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal(data, &ks))
		for _, o := range fluxBuild(t, filepath.Join(repo, ks.Spec.Path), ks.Spec.Patches) {
			id := o.GetKind() + "/" + o.GetName()
			require.NotContains(t, applied, id, "%s applied by %s and %s", id, applied[id], r.GetName())
			applied[id] = r.GetName()
		}
	}
	require.Len(t, applied, len(rendered), "every object of rendered/flux/, once")
	for id := range rendered {
		want := "gitbroker"
		if strings.HasPrefix(id, "GitRepository/") {
			want = "gitbroker-sources"
		}
		require.Equal(t, want, applied[id], id)
	}
}

// fluxBuild builds dir as kustomize-controller does when it has no kustomization.yaml: a
// generated one listing every manifest under it, with patches.
func fluxBuild(t *testing.T, dir string, patches []map[string]any) []*resource.Resource {
	t.Helper()
	var resources []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
			rel, _ := filepath.Rel(dir, p)
			resources = append(resources, filepath.ToSlash(rel))
		}
		return err
	}))
	k, err := yaml.Marshal(map[string]any{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": resources, "patches": patches})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), k, 0o644))
	defer os.Remove(filepath.Join(dir, "kustomization.yaml"))
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err)
	return m.Resources()
}

// podConfiguration is a Configuration of debugEcho devices with a Pod broker.
func podConfiguration(name string) []byte {
	return []byte(`apiVersion: akri.sh/v0
kind: Configuration
metadata: {name: ` + name + `}
spec:
  discoveryHandler: {name: debugEcho, discoveryDetails: "descriptions: [a]"}
  brokerSpec:
    brokerPodSpec:
      containers: [{name: b, image: busybox}]
`)
}

// inventory is node n1's inventory with one device, d<i>, for each of configurations.
func inventory(configurations ...string) []byte {
	s := "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata: {name: n1}\nspec:\n  configurations:\n"
	for i, c := range configurations {
		s += fmt.Sprintf("  - name: %s\n    devices: [{id: d%d}]\n", c, i)
	}
	return []byte(s)
}

// DEPLOYING.md's patch for microk8s, whose kubelet keeps its state under /var/snap, moves the
// agent's two kubelet volumes there and nothing else.
func TestMicrok8sPatchInDeploying(t *testing.T) {
	doc, err := os.ReadFile("../docs/DEPLOYING.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "```yaml\npatches:\n- target: {kind: DaemonSet, name: gitbroker-agent}")
	require.True(t, ok, "DEPLOYING.md shows the microk8s patch")
	block, _, _ := strings.Cut("patches:\n- target: {kind: DaemonSet, name: gitbroker-agent}"+rest, "```")
	base, err := filepath.Abs(".")
	require.NoError(t, err)
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, base) // kustomize takes a base by relative path only
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte("resources:\n- "+rel+"\n"+block), 0o644))
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	require.NoError(t, err)
	var paths []string
	for _, r := range m.Resources() {
		if r.GetKind() != "DaemonSet" {
			continue
		}
		obj, err := r.Map()
		require.NoError(t, err)
		spec := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		for _, v := range spec["volumes"].([]any) {
			if hp, ok := v.(map[string]any)["hostPath"].(map[string]any); ok {
				paths = append(paths, hp["path"].(string))
			}
		}
	}
	require.Contains(t, paths, "/var/snap/microk8s/common/var/lib/kubelet/device-plugins")
	require.Contains(t, paths, "/var/snap/microk8s/common/var/lib/kubelet/pod-resources")
	require.Contains(t, paths, "/sys", "the other volumes stay")
	for _, p := range paths {
		require.False(t, strings.HasPrefix(p, "/var/lib/kubelet/"), "no volume left on kubeadm's kubelet folder: %s", p)
	}
}
