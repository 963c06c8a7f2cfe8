package render_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/render"
)

const folderSourcesSettings = `apiVersion: gitbroker.dev/v1alpha1
kind: Settings
spec:
  flux:
    folderSources:
      url: https://git.example.com/fleet/edge.git
      secretRef:
        name: edge-git
`

func TestFolderSourcesGiveEachFolderItsOwnSource(t *testing.T) {
	tree := repo(map[string]string{
		"gitbroker.yaml":          folderSourcesSettings,
		"configurations/cam.yaml": podConfig,
		"configurations/fw.yaml":  jobConfig("fw", ""),
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1"), entry("fw", "plc-1")),
	})
	res := renderOK(t, tree)
	var k struct {
		Spec struct {
			Path      string              `json:"path"`
			SourceRef map[string]string   `json:"sourceRef"`
			DependsOn []map[string]string `json:"dependsOn"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(res.Files["rendered/flux/default-cam.yaml"], &k))
	require.Equal(t, map[string]string{"kind": "GitRepository", "name": "gitbroker-default-cam"}, k.Spec.SourceRef)
	require.Empty(t, k.Spec.DependsOn)

	src := res.Files["rendered/flux/sources/default-cam.yaml"]
	require.Equal(t, `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  annotations:
    gitbroker.dev/folder: rendered/default/cam
  labels:
    akri.sh/configuration: cam
    app.kubernetes.io/managed-by: gitbroker
  name: gitbroker-default-cam
  namespace: flux-system
spec:
  ignore: |
    /*
    !/rendered/
    /rendered/*
    !/rendered/default/
    /rendered/default/*
    !/rendered/default/cam/
  interval: 1m0s
  ref:
    branch: gitbroker/folders/gitbroker-default-cam
  secretRef:
    name: edge-git
  url: https://git.example.com/fleet/edge.git
  verify:
    mode: HEAD
    secretRef:
      name: gitbroker-renderer-verify
`, string(src))
	require.Equal(t, map[string]string{
		"gitbroker/folders/gitbroker-default-cam": "rendered/default/cam",
		"gitbroker/folders/gitbroker-default-fw":  "rendered/default/fw",
		"gitbroker/folders/gitbroker--namespaces": "rendered/_namespaces",
		"gitbroker/folders/flux":                  "rendered/flux",
	}, render.Companions(res.Files))
	require.NotContains(t, planText(res.Plan), "GitRepository", "a source follows its Kustomization in the plan")

	// An invalid Configuration keeps its source with its Kustomization and folder.
	tree = apply(tree, res)
	tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "image:", "imagee:", 1))
	res = render.Render(render.Request{Files: tree})
	require.Len(t, res.Errors, 1)
	require.Equal(t, src, res.Files["rendered/flux/sources/default-cam.yaml"])
	require.Contains(t, render.Companions(res.Files), "gitbroker/folders/gitbroker-default-cam")

	// Without the setting, no sources, no companions.
	tree = apply(tree, res)
	tree["configurations/cam.yaml"] = []byte(podConfig)
	delete(tree, "gitbroker.yaml")
	res = renderOK(t, tree)
	require.Empty(t, filesUnder(res.Files, "rendered/flux/sources/", ""))
	require.Empty(t, render.Companions(res.Files))
}

// Flux's root Kustomization applies rendered/flux/ in name order, and its workers take what it
// creates in that order: the namespaces' Kustomization and source come first, so their
// RoleBindings usually exist before a folder's first dry run (which fails Forbidden without them).
func TestNamespacesComeFirstInFlux(t *testing.T) {
	for _, settings := range []string{"", folderSourcesSettings} {
		files := map[string]string{
			"configurations/cam.yaml": strings.Replace(podConfig, "  name: cam\n", "  name: cam\n  namespace: 0lab\n", 1),
			"configurations/fw.yaml":  jobConfig("fw", ""),
			"inventory/edge-a.yaml": inventory("edge-a", strings.Replace(entry("cam", "c1"), "devices:", "namespace: 0lab\n    devices:", 1),
				entry("fw", "plc-1")),
		}
		if settings != "" {
			files["gitbroker.yaml"] = settings
		}
		res := renderOK(t, repo(files))
		require.Contains(t, res.Files, "rendered/0lab/cam/kustomization.yaml")
		names := map[string][]string{}
		for _, p := range filesUnder(res.Files, "rendered/flux/", ".yaml") {
			var o struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			require.NoError(t, yaml.Unmarshal(res.Files[p], &o), p)
			names[o.Kind] = append(names[o.Kind], o.Metadata.Name)
		}
		kinds := []string{"Kustomization"}
		if settings != "" {
			kinds = append(kinds, "GitRepository")
		}
		for _, kind := range kinds {
			require.Len(t, names[kind], 3, "%s: %v", kind, names)
			slices.Sort(names[kind])
			require.Equal(t, render.NamespacesKustomization, names[kind][0], "%s: %v", kind, names[kind])
		}
	}
}

func TestFolderSourcesSettingsAreValidated(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"git@github.com:fleet/edge.git", "spec.flux.folderSources.url"},
		{"https://user:secret@git.example.com/edge.git", "holds a password"},
		{"", "spec.flux.folderSources.url"},
	} {
		tree := repo(map[string]string{
			"gitbroker.yaml":          strings.Replace(folderSourcesSettings, "https://git.example.com/fleet/edge.git", c.url, 1),
			"configurations/cam.yaml": podConfig,
			"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1")),
		})
		res := render.Render(render.Request{Files: tree})
		require.NotEmpty(t, res.Errors, c.url)
		require.Contains(t, res.Errors[0].Error(), c.want)
		require.NotContains(t, res.Errors[0].Error(), "secret@")
	}
}

// With spec.clusters each cluster's folders get sources of their own: in
// rendered/<cluster>/flux/sources/, showing rendered/<cluster>/..., on branches under
// gitbroker/folders/clusters/<cluster>/, with the cluster's rendered/<cluster>/flux/ on one more.
func TestFolderSourcesPerCluster(t *testing.T) {
	tree := repo(map[string]string{
		"gitbroker.yaml": folderSourcesSettings + `  clusters:
  - name: site-a
    nodes: [edge-a]
  - name: site-b
    nodes: [edge-b]
`,
		"configurations/cam.yaml": podConfig,
		"inventory/edge-a.yaml":   inventory("edge-a", entry("cam", "c1")),
		"inventory/edge-b.yaml":   inventory("edge-b", entry("cam", "c2")),
	})
	res := renderOK(t, tree)
	for _, c := range []string{"site-a", "site-b"} {
		var g struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Ignore string `json:"ignore"`
				Ref    struct {
					Branch string `json:"branch"`
				} `json:"ref"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal(res.Files["rendered/"+c+"/flux/sources/default-cam.yaml"], &g))
		require.Equal(t, "rendered/"+c+"/default/cam", g.Metadata.Annotations["gitbroker.dev/folder"])
		require.Equal(t, "gitbroker/folders/clusters/"+c+"/gitbroker-default-cam", g.Spec.Ref.Branch)
		require.Equal(t, "/*\n!/rendered/\n/rendered/*\n!/rendered/"+c+"/\n/rendered/"+c+"/*\n!/rendered/"+c+"/default/\n/rendered/"+c+"/default/*\n!/rendered/"+c+"/default/cam/\n", g.Spec.Ignore)
	}
	companions := map[string]string{}
	for _, c := range []string{"site-a", "site-b"} {
		for branch, folder := range map[string]string{
			"gitbroker-default-cam": "default/cam",
			"gitbroker--namespaces": "_namespaces",
			"flux":                  "flux",
		} {
			companions["gitbroker/folders/clusters/"+c+"/"+branch] = "rendered/" + c + "/" + folder
		}
	}
	require.Equal(t, companions, render.Companions(res.Files))

	// An invalid Configuration keeps, in each cluster, its folder, its Kustomization and its
	// source.
	tree = apply(tree, res)
	tree["configurations/cam.yaml"] = []byte(strings.Replace(podConfig, "image:", "imagee:", 1))
	invalid := render.Render(render.Request{Files: tree})
	require.NotEmpty(t, invalid.Errors)
	for f, b := range res.Files {
		if strings.Contains(f, "/flux/") || strings.Contains(f, "/default/cam/") {
			require.Equal(t, string(b), string(invalid.Files[f]), "kept: %s", f)
		}
	}
	require.Equal(t, companions, render.Companions(invalid.Files))

	// A source in one cluster's folder naming another cluster's branch, or a one-cluster
	// source naming a cluster's, is no companion.
	forged := render.Tree{}
	for f, b := range res.Files {
		forged[f] = b
	}
	forged["rendered/site-a/flux/sources/default-cam.yaml"] = []byte(strings.ReplaceAll(string(res.Files["rendered/site-a/flux/sources/default-cam.yaml"]), "clusters/site-a/", "clusters/site-b/"))
	forged["rendered/flux/sources/x.yaml"] = res.Files["rendered/site-b/flux/sources/default-cam.yaml"]
	got := render.Companions(forged)
	require.NotContains(t, got, "gitbroker/folders/clusters/site-a/gitbroker-default-cam")
	require.Equal(t, "rendered/site-b/default/cam", got["gitbroker/folders/clusters/site-b/gitbroker-default-cam"])
	require.NotContains(t, got, "gitbroker/folders/flux")
}
