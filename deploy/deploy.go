// Package deploy owns gitbroker's Kubernetes manifests: the kustomize bases
// of the agent, the renderer and the recorder with their RBAC (this folder),
// and the Flux (flux/, and flux-folder-sources/ for spec.flux.folderSources) and Argo CD
// (argocd/) objects that apply a gitbroker repository. The Flux and Argo CD objects are embedded so that
// `gitbroker init` writes exactly these into a new repository.
package deploy

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

//go:embed flux/*.yaml flux-folder-sources/*.yaml argocd/*.yaml
var files embed.FS

// PlaceholderURL is the repository URL the manifests carry until it is set.
const PlaceholderURL = "https://git.example.com/fleet/edge.git"

var branchField = regexp.MustCompile(`(?m)^(\s*(?:branch|revision|targetRevision): )gitbroker/rendered$`)

// destination is the AppProject's one example destination namespace, which init sets to the
// namespace its example Configuration renders into.
var destination = regexp.MustCompile(`(?m)^(  - server: https://kubernetes\.default\.svc\n    namespace: )plant$`)

// WithDestination returns an AppProject (argocd/appproject.yaml) whose example destination is
// namespace instead of plant.
func WithDestination(appProject []byte, namespace string) []byte {
	return destination.ReplaceAll(appProject, []byte("${1}"+quote(namespace)))
}

// Objects returns the files of folder ("flux", "flux-folder-sources" or "argocd"), keyed by their
// name in it, with the repository URL and branch set (quoted, so any value
// stays one YAML string).
func Objects(folder, url, branch string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(files, folder, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(data), PlaceholderURL, quote(url))
		text = branchField.ReplaceAllStringFunc(text, func(m string) string {
			return branchField.FindStringSubmatch(m)[1] + quote(branch)
		})
		// The Receiver's filter names the branch too, as a CEL string.
		text = strings.ReplaceAll(text, quote(receiverFilter("gitbroker/rendered")), quote(receiverFilter(branch)))
		out[strings.TrimPrefix(p, folder+"/")] = []byte(text)
		return nil
	})
	return out, err
}

// quote writes s as a JSON string, which YAML reads as the same string.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// receiverFilter is deploy/flux's Receiver's resourceFilter for a rendered branch.
func receiverFilter(branch string) string {
	return "req.branches.exists(b, b == " + celQuote(branch) + ")"
}

// celQuote writes s as a CEL string literal (single-quoted, escaped).
func celQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// ForCluster is deploy/flux's objects for the Flux of one cluster of several (gitbroker.yaml
// spec.clusters): the GitRepository's artifact holds rendered/<cluster>/ alone (a site does not
// download every other site's brokers), the root Kustomization applies rendered/<cluster>/flux/
// and the admission policy's ConfigMap keeps every rendered Kustomization to rendered/<cluster>/.
func ForCluster(objs map[string][]byte, cluster string) map[string][]byte {
	out := make(map[string][]byte, len(objs))
	for name, data := range objs {
		text := string(data)
		switch name {
		case "gitrepository.yaml":
			text = strings.Replace(text, "    !/rendered/\n", "    !/rendered/\n    /rendered/*\n    !/rendered/"+cluster+"/\n", 1)
		case "rendered.yaml":
			text = strings.Replace(text, "  path: ./rendered/flux\n", "  path: ./rendered/"+cluster+"/flux\n", 1)
		case "admission.yaml":
			text = strings.Replace(text, "  folder: ./rendered\n", "  folder: ./rendered/"+cluster+"\n", 1)
		}
		out[name] = []byte(text)
	}
	return out
}

// ForClusterFolderSources is deploy/flux-folder-sources's overlay for the Flux of one cluster of
// several, over ForCluster's deploy/flux (its "../flux" is the cluster's flux/ folder beside
// it): the root's source follows the cluster's rendered/<cluster>/flux/ branch, the sources'
// Kustomization applies rendered/<cluster>/flux/sources/, and the Receiver matches the cluster's
// branches (api.ClusterFolderBranchPrefix).
func ForClusterFolderSources(objs map[string][]byte, cluster string) (map[string][]byte, error) {
	prefix := api.ClusterFolderBranchPrefix(cluster)
	edits := map[string][][2]string{
		"kustomization.yaml": {
			{"      value: gitbroker/folders/flux\n", "      value: " + prefix + "flux\n"},
			{"        !/rendered/\n        /rendered/*\n        !/rendered/flux/\n",
				"        !/rendered/\n        /rendered/*\n        !/rendered/" + cluster + "/\n        /rendered/" + cluster + "/*\n        !/rendered/" + cluster + "/flux/\n"},
			{"b == 'gitbroker/folders/flux') : req.branches.exists(b, b == 'gitbroker/folders/' + res.metadata.name)",
				"b == " + celQuote(prefix+"flux") + ") : req.branches.exists(b, b == " + celQuote(prefix) + " + res.metadata.name)"},
		},
		"sources.yaml": {{"  path: ./rendered/flux/sources\n", "  path: ./rendered/" + cluster + "/flux/sources\n"}},
	}
	out := make(map[string][]byte, len(objs))
	for name, data := range objs {
		text := string(data)
		for _, e := range edits[name] {
			if !strings.Contains(text, e[0]) {
				return nil, fmt.Errorf("deploy/flux-folder-sources/%s: no %q to replace", name, strings.TrimSpace(e[0]))
			}
			text = strings.Replace(text, e[0], e[1], 1)
		}
		out[name] = []byte(text)
	}
	for name := range edits {
		if _, ok := objs[name]; !ok {
			return nil, fmt.Errorf("deploy/flux-folder-sources has no %s", name)
		}
	}
	return out, nil
}

// ClusterLabel labels the Argo CD cluster Secrets of the clusters of gitbroker.yaml's
// spec.clusters (value "true"), each named as its gitbroker cluster: ForClusters' ApplicationSet
// makes an Application for each of them.
const ClusterLabel = "gitbroker.dev/cluster"

// ForClusters is deploy/argocd's ApplicationSet and AppProject for a repository of several
// clusters: Argo CD's cluster generator makes one Application per cluster it knows with the
// label ClusterLabel, named as its gitbroker cluster, applying rendered/<cluster>/ to it; the
// project admits namespace (the example's) in each of clusters.
func ForClusters(objs map[string][]byte, clusters []string, namespace string) (map[string][]byte, error) {
	out := map[string][]byte{}
	set, ok := objs["applicationset.yaml"]
	if !ok {
		return nil, fmt.Errorf("deploy/argocd has no applicationset.yaml")
	}
	text := string(set)
	gen := regexp.MustCompile(`(?s)\n  generators:\n.*?\n  template:\n`)
	if !gen.MatchString(text) {
		return nil, fmt.Errorf("deploy/argocd/applicationset.yaml: no generators to replace")
	}
	text = gen.ReplaceAllLiteralString(text, "\n  generators:\n  # Argo CD's clusters labelled "+ClusterLabel+": \"true\", each named as its cluster in\n  # gitbroker.yaml's spec.clusters.\n  - clusters:\n      selector:\n        matchLabels:\n          "+ClusterLabel+": \"true\"\n  template:\n")
	for old, new := range map[string]string{
		"      name: 'gitbroker-{{index .path.segments 1}}-{{index .path.segments 2}}'\n":                   "      name: 'gitbroker-{{.name}}'\n",
		"        akri.sh/configuration: '{{index .path.segments 2}}'\n":                                     "        " + ClusterLabel + ": '{{.name}}'\n",
		"        path: '{{.path.path}}'\n":                                                                  "        path: 'rendered/{{.name}}'\n",
		"        server: https://kubernetes.default.svc\n        namespace: '{{index .path.segments 1}}'\n": "        name: '{{.name}}'\n        namespace: default\n",
	} {
		if !strings.Contains(text, old) {
			return nil, fmt.Errorf("deploy/argocd/applicationset.yaml: no %q to replace", strings.TrimSpace(old))
		}
		text = strings.Replace(text, old, new, 1)
	}
	out["applicationset.yaml"] = []byte(text)
	project, ok := objs["appproject.yaml"]
	if !ok {
		return nil, fmt.Errorf("deploy/argocd has no appproject.yaml")
	}
	dest := regexp.MustCompile(`(?m)^  destinations:\n  - server: https://kubernetes.default.svc\n    namespace: .*\n`)
	if !dest.Match(project) {
		return nil, fmt.Errorf("deploy/argocd/appproject.yaml: no destinations to replace")
	}
	var b strings.Builder
	b.WriteString("  destinations:\n")
	for _, c := range clusters {
		fmt.Fprintf(&b, "  - name: %s\n    namespace: %s\n", quote(c), quote(namespace))
	}
	out["appproject.yaml"] = dest.ReplaceAllLiteral(project, []byte(b.String()))
	return out, nil
}
