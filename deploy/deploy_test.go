package deploy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
			require.NotRegexp(t, `(?m)^\s*(branch|revision|targetRevision): main$`, text, "%s/%s", folder, name)
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
