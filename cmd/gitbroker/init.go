package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/cmd/internal/cli"
	"github.com/gitbroker/gitbroker/deploy"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/templates"
	"github.com/gitbroker/gitbroker/verify"
)

const (
	flagFlux          = "flux"
	flagFolderSources = "folder-sources"
	flagArgoCD        = "argocd"
	flagRepoURL       = "repo-url"
	flagRepoBranch    = "repo-branch"
	flagInitBranch    = "branch"
	flagInitCluster   = "cluster"
	flagInitClusters  = "clusters"
)

type initOptions struct {
	Dir                 string
	Flux, ArgoCD        bool
	FolderSources       bool
	RepoURL, RepoBranch string
	// Branch is the people's branch, which the CI files plan pull requests to.
	Branch string
	// Cluster, with --flux, writes that cluster's Flux objects alone into an existing
	// repository of several clusters.
	Cluster string
	// Clusters, with --argocd, writes Argo CD's objects for every cluster of an existing
	// repository of several clusters.
	Clusters bool
}

func newInitCommand() *cobra.Command {
	o := &initOptions{}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a new GitOps repository: its folders, settings, an example Configuration, and Flux or Argo CD objects",
		Example: `  gitbroker init --dir edge --flux --repo-url https://git.example.com/fleet/edge.git
  gitbroker init --dir edge --argocd --repo-url git@git.example.com:fleet/edge.git   # written as ssh://`,
		Long: `Init writes a new gitbroker repository into --dir: a README naming each folder's writer,
gitbroker.yaml with every setting at its documented default, an example Configuration, the
inventory/ and status/jobs/ folders (with a .gitkeep), and the first render (rendered/, empty
until agents report devices), so that check passes at once.

With --flux it adds flux/: a GitRepository named gitbroker (the source the rendered
Kustomizations build from by default) and a Kustomization that applies rendered/flux/. With
--argocd it adds argocd/: the AppProject gitbroker (Deployments, Services, Jobs and Namespaces only,
in the destinations it lists, from commits the renderer's OpenPGP key signed), an ApplicationSet
with one Application per configuration folder, and a single Application for small fleets.
--repo-url (required with either) and --repo-branch go into those objects; git's scp-like
git@host:path is written as ssh://git@host/path, the form Flux accepts, and a file:// URL is
refused, since nothing in the cluster can reach this machine's paths. With --flux --folder-sources, gitbroker.yaml
also sets spec.flux.folderSources to --repo-url, so every rendered folder gets a Flux source of
its own and a device change reconciles one Kustomization, and flux-folder-sources/ (apply it
instead of flux/) points the root at the branch that shows rendered/flux/ alone.

Init never overwrites: it refuses a folder that already holds any file it would write.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.FolderSources && !o.Flux {
				return exitf(exitInvalid, "--%s needs --%s: folder sources are Flux objects", flagFolderSources, flagFlux)
			}
			// The URL is written into objects the cluster fetches with: it must be one they can
			// reach and Flux's CRD accepts, and hold no password (the files are committed).
			if o.Flux || o.ArgoCD {
				u, err := clusterRepoURL(flagRepoURL, o.RepoURL)
				if err != nil {
					return exitf(exitInvalid, "%v", err)
				}
				o.RepoURL = u
			} else if cmd.Flags().Changed(flagRepoURL) {
				return exitf(exitInvalid, "--%s goes into the Flux or Argo CD objects: give --%s or --%s with it", flagRepoURL, flagFlux, flagArgoCD)
			}
			if err := validBranch(flagRepoBranch, o.RepoBranch); err != nil {
				return exitf(exitInvalid, "%v", err)
			}
			if peoplesBranch(o.RepoBranch) {
				return exitf(exitInvalid, "--%s %s: that is where people commit Configurations, not what the renderer writes: Flux or Argo CD would apply the people's branch, unverified and unrendered; give the renderer's branch (render --rendered-branch, default %s)", flagRepoBranch, o.RepoBranch, verify.RenderedBranch)
			}
			if err := validBranch(flagInitBranch, o.Branch); err != nil {
				return exitf(exitInvalid, "%v", err)
			}
			if strings.HasPrefix(o.Branch, "gitbroker/") || o.Branch == o.RepoBranch {
				return exitf(exitInvalid, "--%s %s: that is a branch gitbroker's writers own; give the branch people commit Configurations to (main, say)", flagInitBranch, o.Branch)
			}
			var files render.Tree
			var err error
			switch {
			case o.Cluster != "":
				if !o.Flux || o.ArgoCD || o.Clusters {
					return exitf(exitInvalid, "--%s goes with --%s alone: it writes one cluster's Flux objects (with Argo CD, --%s --%s writes one ApplicationSet for every cluster)", flagInitCluster, flagFlux, flagArgoCD, flagInitClusters)
				}
				files, err = o.clusterFiles()
			case o.Clusters:
				if !o.ArgoCD || o.Flux {
					return exitf(exitInvalid, "--%s goes with --%s alone: one ApplicationSet for every cluster (with Flux, --%s --%s NAME per cluster)", flagInitClusters, flagArgoCD, flagFlux, flagInitCluster)
				}
				files, err = o.argoClusterFiles()
			default:
				files, err = o.files()
			}
			if err != nil {
				return exitf(exitInvalid, "%v", err)
			}
			var exists []string
			for _, p := range files.Paths() {
				if _, err := os.Lstat(filepath.Join(o.Dir, filepath.FromSlash(p))); err == nil {
					exists = append(exists, p)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return exitf(exitInvalid, "%v", err)
				}
			}
			if len(exists) > 0 {
				if o.Cluster != "" || o.Clusters {
					return exitf(exitInvalid, "%s already holds %v; init writes a cluster's Flux objects only where there are none", o.Dir, exists)
				}
				return exitf(exitInvalid, "%s already holds %v; init writes only into a new repository", o.Dir, exists)
			}
			if err := writeAll(o.Dir, files); err != nil {
				return exitf(exitInvalid, "%v", err)
			}
			for _, p := range files.Paths() {
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", p)
			}
			if _, warning := ciVersion(cli.BuildVersion()); warning != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", warning)
			}
			if o.Cluster != "" {
				folder := "flux"
				if o.FolderSources {
					folder = "flux-folder-sources" // over flux/: apply the overlay alone
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "\nNext: commit them, signed, for review; then in cluster %s apply them: kubectl apply -k %s\n", o.Cluster, path.Join("clusters", o.Cluster, folder))
				return nil
			}
			if o.Clusters {
				fmt.Fprintf(cmd.ErrOrStderr(), "\nNext: register each cluster with Argo CD under its name in gitbroker.yaml and label its cluster Secret %s=true; set signatureKeys in argocd/appproject.yaml to the renderer's OpenPGP key id and add the broker namespaces to its destinations; then apply argocd/ where Argo CD runs (docs/MANY-CLUSTERS.md)\n", deploy.ClusterLabel)
				return nil
			}
			// init writes files, not a git repository: say what makes it one.
			next := "\nNext: make it a git repository and push it where the agents, the renderer and Flux or Argo CD can reach it:\n"
			if _, err := os.Stat(filepath.Join(o.Dir, ".git")); err != nil {
				next += fmt.Sprintf("  cd %s && git init -b %s && git add -A && git commit -m \"gitbroker init\"\n", o.Dir, o.Branch)
			} else {
				next += fmt.Sprintf("  cd %s && git add -A && git commit -m \"gitbroker init\"\n", o.Dir)
			}
			next += fmt.Sprintf("  git remote add origin <URL> && git push -u origin %s\n", o.Branch)
			if o.FolderSources {
				next += "Then apply flux-folder-sources/ (not flux/): it follows gitbroker/folders/flux, which the renderer's first render creates.\n"
			}
			if o.ArgoCD {
				// The AppProject fails closed: with the placeholder key id Argo CD syncs nothing.
				next += "Then in argocd/appproject.yaml set signatureKeys to the renderer's OpenPGP key id and destinations to the broker namespaces: until then Argo CD syncs nothing (docs/DEPLOYING.md, Argo CD).\n"
			}
			fmt.Fprint(cmd.ErrOrStderr(), next)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Dir, flagDir, ".", "folder of the new repository (created if missing)")
	cmd.Flags().BoolVar(&o.Flux, flagFlux, false, "add flux/: the Flux GitRepository and Kustomization for this repository")
	cmd.Flags().BoolVar(&o.FolderSources, flagFolderSources, false, "with --flux: a Flux source per rendered folder (spec.flux.folderSources), and flux-folder-sources/")
	cmd.Flags().BoolVar(&o.ArgoCD, flagArgoCD, false, "add argocd/: the Argo CD ApplicationSet and Application for this repository")
	cmd.Flags().StringVar(&o.RepoURL, flagRepoURL, "", "the repository's URL, as Flux or Argo CD will fetch it from the cluster: https://, ssh://, or git's user@host:path (written as ssh://); required with --flux or --argocd")
	cmd.Flags().StringVar(&o.Branch, flagInitBranch, "main", "the people's branch, where Configurations are committed and reviewed: the GitHub workflow plans pull requests to it and checks on pushes to it (GitLab's pipeline follows the project's default branch). init writes files, so the branch is never written here.")
	cmd.Flags().StringVar(&o.Cluster, flagInitCluster, "", "with --flux, in a repository whose gitbroker.yaml declares spec.clusters: write only this cluster's Flux objects, clusters/<cluster>/flux/, which apply rendered/<cluster>/ (with --folder-sources, and clusters/<cluster>/flux-folder-sources/, when gitbroker.yaml sets spec.flux.folderSources)")
	cmd.Flags().BoolVar(&o.Clusters, flagInitClusters, false, "with --argocd, in a repository whose gitbroker.yaml declares spec.clusters: write argocd/ for every cluster: an ApplicationSet making one Application per cluster (Argo CD's cluster generator, by name) and its AppProject")
	cmd.Flags().StringVar(&o.RepoBranch, flagRepoBranch, verify.RenderedBranch, "the branch Flux or Argo CD applies: the renderer's own (render --rendered-branch)")
	return cmd
}

// files is the new repository: the scaffold from templates/, the GitOps
// tools' objects from deploy/, and the first render of it all.
func (o *initOptions) files() (render.Tree, error) {
	s := templates.Scaffold{Flux: o.Flux, ArgoCD: o.ArgoCD}
	if o.FolderSources {
		// JSON's quoting of a string is a YAML string that reads back as the same.
		url, err := json.Marshal(o.RepoURL)
		if err != nil {
			return nil, err
		}
		s.FolderSourcesURL = string(url)
	}
	scaffold, err := templates.Init(s)
	if err != nil {
		return nil, err
	}
	if o.FolderSources {
		// The URL is the user's, not the scaffold's: say which flag to fix.
		if _, errs := api.ParseSettings(api.SettingsPath, scaffold[api.SettingsPath]); len(errs) > 0 {
			return nil, fmt.Errorf("--%s cannot be spec.flux.folderSources.url: %w", flagRepoURL, errs)
		}
	}
	tree := render.Tree{}
	v, c := cli.BuildVersion()
	pin, _ := ciVersion(v, c)
	for p, data := range scaffold {
		if p == ciGitHub || p == ciGitLab {
			data = ciPinLine.ReplaceAll(data, []byte("${1}"+pin))
		}
		if p == ciGitHub && o.Branch != "main" {
			// JSON's quoting of a string is a YAML string that reads back as the same.
			quoted, err := json.Marshal(o.Branch)
			if err != nil {
				return nil, err
			}
			data = ciBranches.ReplaceAllFunc(data, func(line []byte) []byte {
				return bytes.Replace(line, []byte("[main]"), []byte("["+string(quoted)+"]"), 1)
			})
			data = ciCommentMain.ReplaceAllFunc(data, func(line []byte) []byte {
				return wordMain.ReplaceAllLiteral(line, []byte(o.Branch))
			})
		}
		tree[p] = data
	}
	for folder, on := range map[string]bool{"flux": o.Flux, "flux-folder-sources": o.FolderSources, "argocd": o.ArgoCD} {
		if !on {
			continue
		}
		objs, err := deploy.Objects(folder, o.RepoURL, o.RepoBranch)
		if err != nil {
			return nil, err
		}
		for name, data := range objs {
			if folder == "argocd" && name == "appproject.yaml" {
				// The project admits the namespace the example Configuration renders into.
				data = deploy.WithDestination(data, api.DefaultNamespace)
			}
			tree[folder+"/"+name] = data
		}
	}
	res := render.Render(render.Request{Files: tree})
	if len(res.Errors) > 0 {
		return nil, fmt.Errorf("the scaffold does not render: %w", res.Errors)
	}
	for p, data := range res.Files {
		tree[p] = data
	}
	return tree, nil
}

// repoSettings reads the settings of a repository of several clusters, for flag.
func (o *initOptions) repoSettings(flag string) (api.ResolvedSettings, error) {
	data, err := os.ReadFile(filepath.Join(o.Dir, api.SettingsPath))
	if err != nil {
		return api.ResolvedSettings{}, fmt.Errorf("--%s writes into a repository of several clusters: %w", flag, err)
	}
	s, errs := api.ParseSettings(api.SettingsPath, data)
	if len(errs) > 0 {
		return api.ResolvedSettings{}, fmt.Errorf("%s: %w", api.SettingsPath, errs)
	}
	if !s.Clusters.Enabled() {
		return api.ResolvedSettings{}, fmt.Errorf("--%s: %s declares no spec.clusters", flag, api.SettingsPath)
	}
	return s, nil
}

// argoClusterFiles are Argo CD's objects for every cluster of a repository of several: the
// ApplicationSet (one Application per cluster, rendered/<cluster>/) and the AppProject.
func (o *initOptions) argoClusterFiles() (render.Tree, error) {
	s, err := o.repoSettings(flagInitClusters)
	if err != nil {
		return nil, err
	}
	cs := s.Clusters
	var names []string
	for _, c := range cs.List {
		names = append(names, c.Name)
	}
	objs, err := deploy.Objects("argocd", o.RepoURL, o.RepoBranch)
	if err != nil {
		return nil, err
	}
	objs, err = deploy.ForClusters(objs, names, api.DefaultNamespace)
	if err != nil {
		return nil, err
	}
	tree := render.Tree{}
	for name, data := range objs {
		tree["argocd/"+name] = data
	}
	return tree, nil
}

// clusterFiles are the Flux objects of one cluster of a repository of several: deploy/flux's,
// applying rendered/<cluster>/ alone, under clusters/<cluster>/flux/. The cluster must be one
// the repository's gitbroker.yaml declares.
func (o *initOptions) clusterFiles() (render.Tree, error) {
	s, err := o.repoSettings(flagInitCluster)
	if err != nil {
		return nil, err
	}
	cs := s.Clusters
	if _, ok := cs.Named(o.Cluster); !ok {
		var names []string
		for _, c := range cs.List {
			names = append(names, c.Name)
		}
		return nil, fmt.Errorf("--%s %s: %s's spec.clusters does not declare it (it declares %s): add it there first, reviewed", flagInitCluster, o.Cluster, api.SettingsPath, strings.Join(append(names, "none")[:max(len(names), 1)], ", "))
	}
	objs, err := deploy.Objects("flux", o.RepoURL, o.RepoBranch)
	if err != nil {
		return nil, err
	}
	tree := render.Tree{}
	for name, data := range deploy.ForCluster(objs, o.Cluster) {
		tree[path.Join("clusters", o.Cluster, "flux", name)] = data
	}
	if !o.FolderSources {
		return tree, nil
	}
	// The overlay follows the branches the renderer moves only when gitbroker.yaml asks for
	// them: without the setting it would wait for branches that never come.
	if s.Flux.FolderSources == nil {
		return nil, fmt.Errorf("--%s --%s %s: %s sets no spec.flux.folderSources, so the renderer moves no folder branches for this overlay to follow; set it first, reviewed (docs/MANY-CLUSTERS.md)", flagFolderSources, flagInitCluster, o.Cluster, api.SettingsPath)
	}
	objs, err = deploy.Objects("flux-folder-sources", o.RepoURL, o.RepoBranch)
	if err != nil {
		return nil, err
	}
	objs, err = deploy.ForClusterFolderSources(objs, o.Cluster)
	if err != nil {
		return nil, err
	}
	for name, data := range objs {
		tree[path.Join("clusters", o.Cluster, "flux-folder-sources", name)] = data
	}
	return tree, nil
}

// The CI files init writes, and their GITBROKER_VERSION line.
const (
	ciGitHub = ".github/workflows/gitbroker.yaml"
	ciGitLab = ".gitlab-ci.yml"
)

var (
	ciPinLine = regexp.MustCompile(`(?m)^(  GITBROKER_VERSION: )v0\.1\.0$`)
	// The GitHub workflow's branch filters and the comment lines that name the people's branch.
	ciBranches    = regexp.MustCompile(`(?m)^(    branches: )\[main\]$`)
	ciCommentMain = regexp.MustCompile(`(?m)^#.*\bmain\b.*$`)
	wordMain      = regexp.MustCompile(`\bmain\b`)
	release       = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
	fullHash      = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// ciVersion is what the CI that init writes installs with go install: the release of the
// gitbroker running init (a tag, or the pseudo-version of a go install at a commit), else the
// commit it was built from, so the CI plans and checks with the same gitbroker that wrote the
// repository. warning says when neither is known exactly.
func ciVersion(version, commit string) (pin, warning string) {
	dirty := strings.HasSuffix(version, "-dirty") || strings.Contains(commit, "(modified)")
	commit = strings.TrimSuffix(commit, " (modified)")
	switch {
	case release.MatchString(version) && !dirty:
		return version, ""
	case fullHash.MatchString(commit) && dirty:
		return commit, fmt.Sprintf("this gitbroker was built from %s with local changes; the CI installs that commit without them (GITBROKER_VERSION in %s and %s)", commit, ciGitHub, ciGitLab)
	case fullHash.MatchString(commit):
		return commit, ""
	}
	return "latest", fmt.Sprintf("this gitbroker knows neither its release nor its commit (version %s); the CI installs gitbroker@latest until you set GITBROKER_VERSION in %s and %s", version, ciGitHub, ciGitLab)
}

// peoplesBranch reports whether name is one of the names people's branches go by: never the
// branch a GitOps tool should apply from a gitbroker repository.
func peoplesBranch(name string) bool {
	switch name {
	case "main", "master", "trunk", "develop", "development":
		return true
	}
	return false
}
