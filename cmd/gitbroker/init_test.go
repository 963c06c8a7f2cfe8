package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
)

func TestInitWithFluxAndArgoCD(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, out, stderr := gitbroker(t, "init", "--dir", dir, "--flux", "--argocd", "--repo-url", "https://git.example.org/plant/edge.git", "--repo-branch", "production")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "cd "+dir+" && git init -b main && git add -A", "init says how the folder becomes a repository")
	for _, p := range []string{"README.md", "gitbroker.yaml", "configurations/akri-debug-echo.yaml", "rendered/kustomization.yaml",
		"inventory/.gitkeep", "status/jobs/.gitkeep", ".gitbroker/allowed_signers",
		"flux/kustomization.yaml", "flux/gitrepository.yaml", "flux/rendered.yaml", "argocd/applicationset.yaml", "argocd/application.yaml"} {
		require.FileExists(t, filepath.Join(dir, p))
		require.Contains(t, out, "wrote "+p)
	}
	// The new repository is consistent from its first commit.
	code, _, stderr = gitbroker(t, "check", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)

	// The keys and tokens DEPLOYING.md makes are ignored by git if they land here; what a
	// person commits (the public halves, the trust files) is not.
	require.Contains(t, out, "wrote .gitignore")
	gitsynctest.Git(t, dir, "init", "--quiet")
	for _, p := range []string{"renderer-signing-key", "fleet-ca", "agent-token", "agent-deploy-key", "nudge-secret", "flux-receiver-token", ".gitbroker-bin/gitbroker"} {
		gitsynctest.Git(t, dir, "check-ignore", "--quiet", p)
	}
	for _, p := range []string{"renderer-signing-key.pub", "fleet-ca.pub", ".gitbroker/allowed_signers", "configurations/akri-debug-echo.yaml"} {
		cmd := exec.Command("git", "check-ignore", "--quiet", p)
		cmd.Dir = dir
		require.Error(t, cmd.Run(), "%s is ignored", p)
	}

	settings, err := os.ReadFile(filepath.Join(dir, "gitbroker.yaml"))
	require.NoError(t, err)
	s, errs := api.ParseSettings("gitbroker.yaml", settings)
	require.Empty(t, errs)
	require.Equal(t, api.DefaultFluxSource, s.Flux.SourceRef.Name, "the rendered Kustomizations build from flux/'s GitRepository")

	// The Flux objects build with kustomize and point at the repository.
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "flux"))
	require.NoError(t, err)
	flux, err := m.AsYaml()
	require.NoError(t, err)
	require.Contains(t, string(flux), "url: https://git.example.org/plant/edge.git")
	require.Contains(t, string(flux), "branch: production")
	require.Contains(t, string(flux), "name: "+api.DefaultFluxSource)
	for _, f := range []string{"applicationset.yaml", "application.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, "argocd", f))
		require.NoError(t, err)
		require.NotContains(t, string(data), "git.example.com", f)
		require.Contains(t, string(data), `targetRevision: "production"`, f)
	}

	// It never overwrites.
	code, _, stderr = gitbroker(t, "init", "--dir", dir)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "already holds")
}

// gitbroker.yaml as init writes it (without --flux) states the documented
// defaults: a repository renders byte for byte the same with it as without.
func TestInitSettingsAreTheDefaults(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := gitbroker(t, "init", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	settings, err := os.ReadFile(filepath.Join(dir, "gitbroker.yaml"))
	require.NoError(t, err)
	require.NotContains(t, string(settings), "{{")

	demo, err := readFS(fixtures.Demo())
	require.NoError(t, err)
	require.NotContains(t, demo, "gitbroker.yaml")
	without := render.Render(render.Request{Files: demo})
	require.Empty(t, without.Errors)
	with := render.Tree{"gitbroker.yaml": settings}
	for p, data := range demo {
		with[p] = data
	}
	got := render.Render(render.Request{Files: with})
	require.Empty(t, got.Errors)
	// Only the metadata file differs: its inputs digest covers gitbroker.yaml.
	a, b := without.Files.Owned(), got.Files.Owned()
	delete(a, "rendered/.gitbroker-render.yaml")
	delete(b, "rendered/.gitbroker-render.yaml")
	require.NotEmpty(t, a)
	require.Equal(t, a, b)
	require.True(t, strings.Contains(string(settings), "maxDeletionPercent: 50"))
}

// The CI workflows init writes run gitbroker with flags its commands have: each invocation's
// flags are looked up in the real command.
func TestInitCIWorkflows(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, _, stderr := gitbroker(t, "init", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	root := newRootCommand(io.Discard, io.Discard)
	seen := map[string]bool{}
	var walk func(f string, v any)
	walk = func(f string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, x := range v {
				walk(f, x)
			}
		case []any:
			for _, x := range v {
				walk(f, x)
			}
		case string:
			for _, line := range strings.Split(strings.ReplaceAll(v, "\\\n", " "), "\n") {
				i := strings.Index(line, "gitbroker ")
				if i < 0 || (!strings.HasPrefix(line[i:], "gitbroker plan") && !strings.HasPrefix(line[i:], "gitbroker check")) {
					continue
				}
				fields := strings.Fields(line[i:])
				sub, _, err := root.Find(fields[1:2])
				require.NoError(t, err, "%s: %s", f, line)
				seen[f+" "+fields[1]] = true
				for _, w := range fields[2:] {
					if name, ok := strings.CutPrefix(w, "--"); ok {
						require.NotNil(t, sub.Flags().Lookup(name), "%s: gitbroker %s has no --%s", f, fields[1], name)
					}
				}
			}
		}
	}
	for _, f := range []string{".github/workflows/gitbroker.yaml", ".gitlab-ci.yml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, yaml.Unmarshal(data, &doc), f)
		walk(f, doc)
	}
	require.Len(t, seen, 4, "each workflow plans pull requests and checks the rendered branch: %v", seen)

	// A merge request's pipeline runs the merge request's own .gitlab-ci.yml: it must need no
	// secret beyond the job token, or the author could take it (the trust review's finding 10).
	gitlab, err := os.ReadFile(filepath.Join(dir, ".gitlab-ci.yml"))
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(gitlab, &doc))
	plan := fmt.Sprint(doc["gitbroker-plan"]) + fmt.Sprint(doc[".gitbroker"])
	require.NotContains(t, plan, "TOKEN}")
	require.NotContains(t, plan, "PRIVATE-TOKEN")
	require.Regexp(t, `^\$CI_JOB_TOKEN$|CI_JOB_TOKEN`, plan)
	require.Contains(t, plan, "expose_as:gitbroker plan")
}

// init --flux --folder-sources writes a repository whose renders give every folder a source of
// its own, and the root's objects that follow the branch of rendered/flux/ alone.
func TestInitWithFolderSources(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, _, stderr := gitbroker(t, "init", "--dir", dir, "--flux", "--folder-sources", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "apply flux-folder-sources/")
	settings, err := os.ReadFile(filepath.Join(dir, "gitbroker.yaml"))
	require.NoError(t, err)
	s, errs := api.ParseSettings("gitbroker.yaml", settings)
	require.Empty(t, errs)
	require.NotNil(t, s.Flux.FolderSources)
	require.Equal(t, "https://git.example.org/plant/edge.git", s.Flux.FolderSources.URL)

	// A device reported: its folder gets a source of its own, on its folder's branch.
	inv := "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: edge-1\nspec:\n  configurations:\n  - name: akri-debug-echo\n    devices:\n    - id: dev-1\n      properties:\n        DEBUG_ECHO_DESCRIPTION: foo\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inventory", "edge-1.yaml"), []byte(inv), 0o644))
	code, _, stderr = gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	source, err := os.ReadFile(filepath.Join(dir, "rendered", "flux", "sources", "default-akri-debug-echo.yaml"))
	require.NoError(t, err, "the folder's GitRepository")
	require.Contains(t, string(source), "branch: gitbroker/folders/gitbroker-default-akri-debug-echo")
	require.Contains(t, string(source), "url: https://git.example.org/plant/edge.git")

	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "flux-folder-sources"))
	require.NoError(t, err)
	root, err := m.AsYaml()
	require.NoError(t, err)
	require.Contains(t, string(root), "branch: gitbroker/folders/flux")
	require.Contains(t, string(root), "url: https://git.example.org/plant/edge.git")

	// A URL Flux cannot fetch, or one that carries a password, names the flag and is not echoed.
	code, _, stderr = gitbroker(t, "init", "--dir", filepath.Join(t.TempDir(), "x"), "--flux", "--folder-sources", "--repo-url", "file:///srv/edge.git")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "a file:// URL names a path on this machine, which Flux and Argo CD, fetching in the cluster, cannot reach")
	code, _, stderr = gitbroker(t, "init", "--dir", filepath.Join(t.TempDir(), "x"), "--flux", "--folder-sources", "--repo-url", "https://git:s3cret@git.example.org/plant/edge.git")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--repo-url holds a password")
	require.NotContains(t, stderr, "s3cret")

	// Without folder sources the URL still goes into committed files: refused before anything is
	// written, for Flux and for Argo CD.
	for _, tool := range []string{"--flux", "--argocd"} {
		dir := filepath.Join(t.TempDir(), "x")
		code, _, stderr = gitbroker(t, "init", "--dir", dir, tool, "--repo-url", "https://git:s3cret@git.example.org/plant/edge.git")
		require.Equal(t, exitInvalid, code, tool)
		require.Contains(t, stderr, "--repo-url holds a password", tool)
		require.NotContains(t, stderr, "s3cret", tool)
		require.NoDirExists(t, dir, tool)
	}

	// Folder sources are Flux objects.
	code, _, stderr = gitbroker(t, "init", "--dir", filepath.Join(t.TempDir(), "x"), "--folder-sources")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--folder-sources needs --flux")
}

// The URL init writes is one Flux's GitRepository accepts (^(http|https|ssh)://): git's scp-like
// form becomes the ssh:// URL it means; no URL, a path only this machine has, or a branch git
// refuses is an error naming the flag, and nothing is written.
func TestInitRepositoryURLs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, _, stderr := gitbroker(t, "init", "--dir", dir, "--flux", "--argocd", "--repo-url", "git@github.com:acme/edge.git")
	require.Equal(t, exitOK, code, stderr)
	for _, f := range []string{"flux/gitrepository.yaml", "argocd/applicationset.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Contains(t, string(data), "ssh://git@github.com/acme/edge.git", f)
		require.NotContains(t, string(data), "git@github.com:acme", f)
	}
	// Without a user, none is made up: ssh's own default applies.
	dir = filepath.Join(t.TempDir(), "fleet")
	code, _, stderr = gitbroker(t, "init", "--dir", dir, "--flux", "--repo-url", "git.example.org:plant/edge.git")
	require.Equal(t, exitOK, code, stderr)
	data, err := os.ReadFile(filepath.Join(dir, "flux/gitrepository.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(data), "ssh://git.example.org/plant/edge.git")

	// The recorder's grace is a duration of at least 0.
	code, _, stderr = gitbroker(t, "record", "--git", "https://git.example.org/plant/edge.git", "--node-loss-grace", "-1m")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--node-loss-grace must not be negative")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--flux"}, "--repo-url is required"},
		{[]string{"--argocd"}, "--repo-url is required"},
		{[]string{"--flux", "--repo-url", "file:///srv/edge.git"}, "a file:// URL names a path on this machine"},
		{[]string{"--argocd", "--repo-url", "ftp://git.example.org/edge.git"}, `scheme "ftp"`},
		{[]string{"--flux", "--repo-url", "edge.git"}, "not a URL"},
		{[]string{"--flux", "--repo-url", "git.example.org:plant/edge.git", "--repo-branch", "a..b"}, "not a valid branch name"},
		{[]string{"--flux", "--repo-url", "https://git.example.org/edge.git", "--repo-branch", "gitbroker/../main"}, "--repo-branch \"gitbroker/../main\": not a valid branch name"},
		{[]string{"--flux", "--repo-url", "https://git.example.org/edge.git", "--repo-branch", "-x"}, "not beginning with -"},
		{[]string{"--repo-url", "https://git.example.org/edge.git"}, "give --flux or --argocd with it"},
		// Flux would apply the people's branch.
		{[]string{"--flux", "--repo-url", "https://git.example.org/edge.git", "--repo-branch", "main"}, "Flux or Argo CD would apply the people's branch"},
		{[]string{"--argocd", "--repo-url", "https://git.example.org/edge.git", "--repo-branch", "master"}, "give the renderer's branch (render --rendered-branch, default gitbroker/rendered)"},
	} {
		dir := filepath.Join(t.TempDir(), "x")
		code, _, stderr := gitbroker(t, append([]string{"init", "--dir", dir}, tc.args...)...)
		require.Equal(t, exitInvalid, code, "%v", tc.args)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
		require.NoDirExists(t, dir, "%v", tc.args)
	}
}

// init --argocd writes a repository Argo CD can sync as written: its example Configuration
// renders into a namespace the AppProject admits, and nothing rendered is a kind the project
// refuses (no rendered/_namespaces/ RoleBindings: Argo CD creates the namespaces itself).
func TestInitArgoCDIsConsistent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, _, stderr := gitbroker(t, "init", "--dir", dir, "--argocd", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitOK, code, stderr)
	var project struct {
		Spec struct {
			Destinations []struct {
				Namespace string `json:"namespace"`
			} `json:"destinations"`
			ClusterResourceWhitelist   []struct{ Group, Kind string } `json:"clusterResourceWhitelist"`
			NamespaceResourceWhitelist []struct{ Group, Kind string } `json:"namespaceResourceWhitelist"`
		} `json:"spec"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "argocd", "appproject.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &project))
	admitted := map[string]bool{}
	for _, d := range project.Spec.Destinations {
		admitted[d.Namespace] = true
	}
	kinds := map[string]bool{}
	for _, k := range append(project.Spec.ClusterResourceWhitelist, project.Spec.NamespaceResourceWhitelist...) {
		kinds[k.Kind] = true
	}

	// A device for the example Configuration, and a render.
	inv := "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: edge-a\nspec:\n  configurations:\n  - name: akri-debug-echo\n    namespace: default\n    devices:\n    - id: foo0\n      properties:\n        DEBUG_ECHO_DESCRIPTION: foo0\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inventory", "edge-a.yaml"), []byte(inv), 0o644))
	code, _, stderr = gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	require.NoDirExists(t, filepath.Join(dir, "rendered", "_namespaces"), "Argo CD's project refuses the RoleBindings there")
	rendered := 0
	require.NoError(t, filepath.WalkDir(filepath.Join(dir, "rendered"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") || d.Name() == "kustomization.yaml" || strings.Contains(p, "/rendered/flux/") {
			return err
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal(b, &obj), p)
		require.True(t, kinds[obj.Kind], "%s: the AppProject refuses kind %s", p, obj.Kind)
		require.True(t, admitted[obj.Metadata.Namespace], "%s: the AppProject admits %v, not namespace %q", p, admitted, obj.Metadata.Namespace)
		rendered++
		return nil
	}))
	require.NotZero(t, rendered)
}

// init --flux --cluster writes one cluster's Flux objects into a repository of several: they
// apply rendered/<cluster>/ and admit nothing outside it, and render builds that folder.
func TestInitFluxForOneCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	code, _, stderr := gitbroker(t, "init", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	settings := "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  clusters:\n  - name: site-a\n    labels: {ring: canary}\n    nodes: [\"edge-a*\"]\n  - name: site-b\n    nodes: [\"edge-b*\"]\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gitbroker.yaml"), []byte(settings), 0o644))
	inv := "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: edge-a1\nspec:\n  configurations:\n  - name: akri-debug-echo\n    devices:\n    - id: dev-1\n      properties:\n        DEBUG_ECHO_DESCRIPTION: foo\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inventory", "edge-a1.yaml"), []byte(inv), 0o644))
	code, _, stderr = gitbroker(t, "render", "--dir", dir)
	require.Equal(t, exitOK, code, stderr)

	code, stdout, stderr := gitbroker(t, "init", "--dir", dir, "--flux", "--cluster", "site-a", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "wrote clusters/site-a/flux/rendered.yaml")
	require.Contains(t, stderr, "kubectl apply -k clusters/site-a/flux")
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "clusters", "site-a", "flux"))
	require.NoError(t, err)
	objs, err := m.AsYaml()
	require.NoError(t, err)
	require.Contains(t, string(objs), "path: ./rendered/site-a/flux\n")
	require.Contains(t, string(objs), "folder: ./rendered/site-a\n")
	require.Contains(t, string(objs), "  ignore: |\n    /*\n    !/rendered/\n    /rendered/*\n    !/rendered/site-a/\n")
	require.NotContains(t, string(objs), "path: ./rendered/flux\n")
	// The folder it applies exists, with the cluster's Kustomizations pointing inside it.
	fk, err := os.ReadFile(filepath.Join(dir, "rendered", "site-a", "flux", "default-akri-debug-echo.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(fk), "path: ./rendered/site-a/default/akri-debug-echo\n")

	// Folder sources: refused until gitbroker.yaml asks for them, then an overlay over the
	// cluster's flux/ that follows the cluster's branches.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "clusters")))
	code, _, stderr = gitbroker(t, "init", "--dir", dir, "--flux", "--folder-sources", "--cluster", "site-a", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "gitbroker.yaml sets no spec.flux.folderSources")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gitbroker.yaml"), []byte(strings.Replace(settings, "spec:\n", "spec:\n  flux:\n    folderSources: {url: \"https://git.example.org/plant/edge.git\"}\n", 1)), 0o644))
	code, _, stderr = gitbroker(t, "init", "--dir", dir, "--flux", "--folder-sources", "--cluster", "site-a", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "kubectl apply -k clusters/site-a/flux-folder-sources")
	m, err = krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "clusters", "site-a", "flux-folder-sources"))
	require.NoError(t, err)
	objs, err = m.AsYaml()
	require.NoError(t, err)
	for _, want := range []string{
		"    branch: gitbroker/folders/clusters/site-a/flux\n",
		"  ignore: |-\n    /*\n    !/rendered/\n    /rendered/*\n    !/rendered/site-a/\n    /rendered/site-a/*\n    !/rendered/site-a/flux/\n",
		"  path: ./rendered/site-a/flux/sources\n",
		"  path: ./rendered/site-a/flux\n",
		"folder: ./rendered/site-a\n",
	} {
		require.Contains(t, string(objs), want)
	}
	overlay, err := os.ReadFile(filepath.Join(dir, "clusters", "site-a", "flux-folder-sources", "kustomization.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(overlay), `b == 'gitbroker/folders/clusters/site-a/flux') : req.branches.exists(b, b == 'gitbroker/folders/clusters/site-a/' + res.metadata.name)`)
	require.NotContains(t, string(objs), "gitbroker/folders/flux")

	code, _, stderr = gitbroker(t, "init", "--dir", dir, "--flux", "--cluster", "site-x", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--cluster site-x: gitbroker.yaml's spec.clusters does not declare it (it declares site-a, site-b)")
	code, _, stderr = gitbroker(t, "init", "--dir", dir, "--flux", "--cluster", "site-a", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "init writes a cluster's Flux objects only where there are none")
	code, _, stderr = gitbroker(t, "init", "--dir", dir, "--argocd", "--cluster", "site-b", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--cluster goes with --flux alone")

	// Argo CD: one ApplicationSet makes an Application per cluster, by name, applying its folder.
	code, _, stderr = gitbroker(t, "init", "--dir", dir, "--argocd", "--clusters", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "label its cluster Secret gitbroker.dev/cluster=true")
	set, err := os.ReadFile(filepath.Join(dir, "argocd", "applicationset.yaml"))
	require.NoError(t, err)
	var appSet struct {
		Spec struct {
			Generators []struct {
				Clusters struct {
					Selector struct{ MatchLabels map[string]string } `json:"selector"`
				} `json:"clusters"`
			} `json:"generators"`
			Template struct {
				Metadata struct{ Name string } `json:"metadata"`
				Spec     struct {
					Source      struct{ RepoURL, TargetRevision, Path string } `json:"source"`
					Destination struct{ Name, Namespace, Server string }       `json:"destination"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(set, &appSet))
	require.Len(t, appSet.Spec.Generators, 1)
	require.Equal(t, map[string]string{"gitbroker.dev/cluster": "true"}, appSet.Spec.Generators[0].Clusters.Selector.MatchLabels)
	tmpl := appSet.Spec.Template
	require.Equal(t, "gitbroker-{{.name}}", tmpl.Metadata.Name)
	require.Equal(t, "rendered/{{.name}}", tmpl.Spec.Source.Path)
	require.Equal(t, "https://git.example.org/plant/edge.git", tmpl.Spec.Source.RepoURL)
	require.Equal(t, "gitbroker/rendered", tmpl.Spec.Source.TargetRevision)
	require.Equal(t, "{{.name}}", tmpl.Spec.Destination.Name)
	require.Empty(t, tmpl.Spec.Destination.Server)
	project, err := os.ReadFile(filepath.Join(dir, "argocd", "appproject.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(project), "  destinations:\n  - name: \"site-a\"\n    namespace: \"default\"\n  - name: \"site-b\"\n    namespace: \"default\"\n")
	code, _, stderr = gitbroker(t, "init", "--dir", dir, "--flux", "--clusters", "--repo-url", "https://git.example.org/plant/edge.git")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, stderr, "--clusters goes with --argocd alone")
}
