package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gitbroker/gitbroker/api"
)

const clustersSettings = `apiVersion: gitbroker.dev/v1alpha1
kind: Settings
spec:
  clusters:
  - name: plant-a
    labels: {ring: canary, region: eu}
    nodes: [edge-a, "plant-a-*"]
  - name: plant-b
    labels: {region: eu}
    nodes: ["plant-b-?", "plant-b-[0-9]*"]
  - name: store-7
    nodes: ["store-7-*", edge-shared]
  - name: lab
    nodes: [edge-shared]
`

func TestClusterMembership(t *testing.T) {
	s, errs := api.ParseSettings("gitbroker.yaml", []byte(clustersSettings))
	require.Empty(t, errs)
	cs := s.Clusters
	require.True(t, cs.Enabled())
	for node, want := range map[string][]string{
		"edge-a":        {"plant-a"},
		"plant-a-17":    {"plant-a"},
		"plant-b-x":     {"plant-b"},
		"plant-b-42":    {"plant-b"},
		"plant-b-":      nil,
		"store-7-till1": {"store-7"},
		"edge-shared":   {"store-7", "lab"},
		"edge-b":        nil,
		"plant-a":       nil,
	} {
		require.Equal(t, want, nilIfEmpty(cs.Of(node)), node)
	}
	require.Contains(t, cs.MembershipError("edge-b", nil), "node edge-b is in no cluster of gitbroker.yaml's spec.clusters")
	require.Contains(t, cs.MembershipError("edge-shared", cs.Of("edge-shared")), "in 2 clusters of gitbroker.yaml's spec.clusters (store-7, lab)")

	c, ok := cs.Named("plant-a")
	require.True(t, ok)
	require.Equal(t, 5, c.Line)
	require.False(t, api.DefaultSettings().Clusters.Enabled())
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestClusterSettingsErrors(t *testing.T) {
	bad := strings.NewReplacer(
		"name: plant-b\n", "name: Plant_B\n",
		"name: lab\n", "name: plant-a\n",
		"{region: eu}", "{\"region/\": eu}",
		"[edge-shared]", "[\"edge-[\", \"a/b\"]",
		"nodes: [\"store-7-*\", edge-shared]", "nodes: []",
		"{ring: canary, region: eu}", "{ring: canary, region: eu, re.gion: x1, re_gion: y1}",
	).Replace(clustersSettings)
	_, errs := api.ParseSettings("gitbroker.yaml", []byte(bad))
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	require.Equal(t, []string{
		`gitbroker.yaml:6: spec.clusters[0].labels.re_gion: labels re.gion and re_gion are both GITBROKER_CLUSTER_LABEL_RE_GION in the brokers' environment; rename one`,
		`gitbroker.yaml:8: spec.clusters[1].name: "Plant_B" is not a valid cluster name (a DNS label: it names rendered/<cluster>/ and the cluster's refs)`,
		`gitbroker.yaml:9: spec.clusters[1].labels.region/: "region/" is not a label key: ` + labelKeyError(t, "region/"),
		`gitbroker.yaml:12: spec.clusters[2].nodes: required: the names or globs of the cluster's nodes`,
		`gitbroker.yaml:13: spec.clusters[3].name: cluster "plant-a" is already spec.clusters[0]`,
		`gitbroker.yaml:14: spec.clusters[3].nodes[0]: "edge-[" is not a node name or glob (path.Match: *, ?, [a-z])`,
		`gitbroker.yaml:14: spec.clusters[3].nodes[1]: "a/b" is not a node name or glob (path.Match: *, ?, [a-z])`,
	}, got)
}

// labelKeyError is what Kubernetes says of an invalid label key.
func labelKeyError(t *testing.T, key string) string {
	t.Helper()
	return strings.Join(validation.IsQualifiedName(key), "; ")
}

func TestConfigurationClusterSelector(t *testing.T) {
	parse := func(t *testing.T, doc string) (*api.ParsedConfiguration, api.ErrorList) {
		t.Helper()
		cs, errs := api.ParseConfigurations("configurations/cam.yaml", []byte(doc), "default")
		if len(errs) > 0 {
			return nil, errs
		}
		require.Len(t, cs, 1)
		return cs[0], nil
	}
	akri := "apiVersion: akri.sh/v0\nkind: Configuration\nmetadata:\n  name: cam\n  annotations:\n    gitbroker.dev/clusters: ring=canary,region in (eu, us)\nspec:\n  discoveryHandler: {name: debugEcho, discoveryDetails: \"descriptions: [a]\"}\n"
	c, errs := parse(t, akri)
	require.Empty(t, errs)
	require.Equal(t, "region in (eu,us),ring=canary", c.Policy.ClusterSelector)
	sel := c.Policy.Clusters()
	require.True(t, api.Cluster{Labels: map[string]string{"ring": "canary", "region": "eu"}}.Selects(sel))
	require.False(t, api.Cluster{Labels: map[string]string{"region": "eu"}}.Selects(sel))

	own := "apiVersion: gitbroker.dev/v1alpha1\nkind: Configuration\nmetadata:\n  name: cam\nspec:\n  clusterSelector:\n    matchLabels: {region: eu}\n    matchExpressions: [{key: ring, operator: NotIn, values: [canary]}]\n  discoveryHandler: {name: debugEcho, discoveryDetails: \"descriptions: [a]\"}\n"
	c, errs = parse(t, own)
	require.Empty(t, errs)
	require.True(t, api.Cluster{Labels: map[string]string{"region": "eu"}}.Selects(c.Policy.Clusters()))
	require.False(t, api.Cluster{Labels: map[string]string{"region": "eu", "ring": "canary"}}.Selects(c.Policy.Clusters()))

	none := strings.Replace(akri, "    gitbroker.dev/clusters: ring=canary,region in (eu, us)\n", "    gitbroker.dev/other: x\n", 1)
	none = strings.Replace(none, "gitbroker.dev/other: x", "example.com/x: other", 1)
	c, errs = parse(t, none)
	require.Empty(t, errs)
	require.Empty(t, c.Policy.ClusterSelector)
	require.Nil(t, c.Policy.Clusters(), "every cluster")

	_, errs = parse(t, strings.Replace(akri, "ring=canary,region in (eu, us)", "region in eu", 1))
	require.Len(t, errs, 1)
	require.Equal(t, 6, errs[0].Line)
	require.Equal(t, "metadata.annotations.gitbroker.dev/clusters", errs[0].Field)
	require.Contains(t, errs[0].Message, "not a label selector")

	_, errs = parse(t, strings.Replace(own, "operator: NotIn", "operator: Near", 1))
	require.Len(t, errs, 1)
	require.Equal(t, "spec.clusterSelector", errs[0].Field)

	both := strings.Replace(own, "  name: cam\n", "  name: cam\n  annotations: {gitbroker.dev/clusters: ring=canary}\n", 1)
	_, errs = parse(t, both)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Message, "conflicts with spec.clusterSelector")

	onAkri := strings.Replace(akri, "spec:\n", "spec:\n  clusterSelector: {matchLabels: {ring: canary}}\n", 1)
	_, errs = parse(t, onAkri)
	require.NotEmpty(t, errs, "spec.clusterSelector is gitbroker.dev/v1alpha1's")
}
