package deploy

import (
	"strings"
	"testing"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/render"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
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
	require.Equal(t, "release/2026: 11", repo.Spec.Ref.Branch)

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
		"configurations/echo.yaml": []byte(`apiVersion: akri.sh/v0
kind: Configuration
metadata: {name: echo}
spec:
  discoveryHandler: {name: debugEcho}
  brokerSpec:
    brokerPodSpec:
      containers: [{name: b, image: busybox}]
`),
		"inventory/n1.yaml": []byte(`apiVersion: gitbroker.dev/v1alpha1
kind: NodeInventory
metadata: {name: n1}
spec:
  configurations:
  - name: echo
    devices: [{id: d0}]
`),
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
	require.Equal(t, base.Size(), m.Size(), "the same objects")
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
