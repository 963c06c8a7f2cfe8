//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/deploy"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// The two sites of TestManyClusters: plant-a is the canary ring, store-7 the rest; each is a
// cluster of its own, with its own API server and Flux.
const (
	canarySite   = "plant-a"
	laterSite    = "store-7"
	sitesBrokers = "sites"
)

// sitesSettings is the repository's gitbroker.yaml; with folderSources (the repository's URL),
// spec.flux.folderSources.
func sitesSettings(folderSources string) string {
	flux := "  flux:\n    retryInterval: 5s\n"
	if folderSources != "" {
		flux += "    folderSources:\n      url: " + folderSources + "\n      interval: 2s\n"
	}
	return `apiVersion: gitbroker.dev/v1alpha1
kind: Settings
spec:
  defaultNamespace: ` + sitesBrokers + `
` + flux + `  clusters:
  - name: ` + canarySite + `
    labels: {ring: canary, region: eu}
    nodes: ["` + canarySite + `-*"]
  - name: ` + laterSite + `
    labels: {region: us}
    nodes: ["` + laterSite + `-*"]
  clusterRollout:
    label: ring
    rings: [canary]
`
}

// siteCamera is a Pod broker for every cluster; release names what it runs, and extra is added
// to its container (a change that leaves it Pending, say).
func siteCamera(release, extra string) string {
	return `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: cam
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["cam-1"]
  brokerProperties:
    RELEASE: "` + release + `"
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: "nginx:stable-alpine"
` + extra
}

// euScale is a Pod broker for the clusters labelled region=eu alone.
const euScale = `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: scale
  annotations:
    gitbroker.dev/clusters: region=eu
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["scale-1"]
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: "busybox:1.36"
`

// TestManyClusters runs one repository for two clusters, each with its own API server and its
// own Flux, set up as docs/MANY-CLUSTERS.md's "Adding a site" says: each site's Flux objects
// from `init --flux --cluster`, each site's recorder with `record --cluster` and its own key,
// one renderer, an agent on each site's node. Each Flux applies its own folder alone (its
// admission policy's folder); a Configuration selecting one site's label reaches that site
// alone; and a change rolls out canary first: a canary whose broker is not Available stops it
// there, and once the canary is recorded Available with the fix, the fix reaches the other
// site. It runs with Flux applying the rendered branch, and with a source per folder.
func TestManyClusters(t *testing.T) {
	t.Run("rendered branch", func(t *testing.T) { manyClusters(t, false) })
	t.Run("folder sources", func(t *testing.T) { manyClusters(t, true) })
}

func manyClusters(t *testing.T, folderSources bool) {
	ctx := context.Background()
	// Each run's clusters and processes have folders and logs of their own (startGitbroker reads
	// a process's addresses from its log), also under go test -count.
	runDir, err := os.MkdirTemp(cluster.Dir, strings.ReplaceAll(t.Name(), "/", "-")+"-")
	require.NoError(t, err)
	logName := filepath.Base(runDir)
	sites := map[string]*Cluster{}
	for _, site := range []string{canarySite, laterSite} {
		start, cancel := context.WithTimeout(ctx, 5*time.Minute)
		c, err := StartCluster(start, cluster.bin, filepath.Join(runDir, site))
		cancel()
		require.NoError(t, err)
		t.Cleanup(c.Stop)
		sites[site] = c
	}
	nodeOf := map[string]string{canarySite: canarySite + "-1", laterSite: laterSite + "-1"}

	srv := gitsynctest.NewServer(t, "main", map[string]string{
		"configurations/cam.yaml":   siteCamera("r1", ""),
		"configurations/scale.yaml": euScale,
	})
	settings := sitesSettings("")
	if folderSources {
		settings = sitesSettings(srv.URL())
	}
	// Every writer and a person get a key; a person's signed commit enrolls them: each site's
	// recorder as recorder:<site>.
	principals := []string{"renderer", "alice@example.com"}
	for site, node := range nodeOf {
		principals = append(principals, trust.RecorderPrincipal(site), trust.NodePrincipal(node))
	}
	keys, allowed := writerKeys(t, principals)
	person := keys["alice@example.com"]
	srv.CommitSigned(person, map[string]string{".gitbroker/allowed_signers": allowed, "gitbroker.yaml": settings}, nil, "two sites, and their writers enrolled")
	rendererKey := filepath.Join(t.TempDir(), "renderer.allowed_signers")
	require.NoError(t, os.WriteFile(rendererKey, []byte(allowed), 0o644))

	// Each site's Flux objects, as the guide writes them, reviewed onto main.
	work := t.TempDir()
	out, err := exec.Command("git", "clone", "-q", "--branch", "main", srv.URL(), work).CombinedOutput()
	require.NoError(t, err, "%s", out)
	fluxFiles := map[string]string{}
	for site := range sites {
		args := []string{"init", "--dir", work, "--flux", "--cluster", site, "--repo-url", srv.URL()}
		if folderSources {
			args = append(args, "--folder-sources")
		}
		out, err := exec.Command(gitbroker, args...).CombinedOutput()
		require.NoError(t, err, "init --flux --cluster %s: %s", site, out)
		files, err := filepath.Glob(filepath.Join(work, "clusters", site, "*", "*"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, f := range files {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			fluxFiles[filepath.ToSlash(strings.TrimPrefix(f, work+"/"))] = string(data)
		}
	}
	srv.CommitSigned(person, fluxFiles, nil, "Flux for "+canarySite+" and "+laterSite)

	// Each site's recorder, with a kubeconfig of that cluster alone.
	kubeconfigs, recorders := map[string]string{}, map[string]*gbProcess{}
	startRecorder := func(site, run string) {
		recorders[site] = startGitbroker(t, logName+"-recorder-"+site+run, "recorder started", "record", "--cluster", site,
			"--git", srv.URL(), "--branch", "main", "--kubeconfig", kubeconfigs[site], "--batch", "500ms",
			"--signing-key", keys[trust.RecorderPrincipal(site)], "--renderer-key", rendererKey,
			"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	}
	// In each cluster: its node, deploy/'s ServiceAccounts and RBAC, the broker namespace, and
	// its recorder.
	for site, c := range sites {
		require.NoError(t, c.AddNode(ctx, nodeOf[site]))
		for _, ns := range []string{sitesBrokers, fleetSystem} {
			require.NoError(t, c.CreateNamespace(ctx, ns))
		}
		applyWritersRBAC(t, c)
		kubeconfig, err := c.ServiceAccountKubeconfig(ctx, fleetSystem, "gitbroker-recorder")
		require.NoError(t, err)
		kubeconfigs[site] = kubeconfig
		startRecorder(site, "")
		node := nodeOf[site]
		avail := filepath.Join(t.TempDir(), "availability")
		require.NoError(t, os.WriteFile(avail, nil, 0o644)) // Akri's debugEcho: devices online
		startGitbroker(t, logName+"-agent-"+node, "agent started", "agent", "--allow-debug-echo",
			"--git", srv.URL(), "--branch", "main", "--node", node, "--signing-key", keys[trust.NodePrincipal(node)], "--renderer-key", rendererKey,
			"--interval", agentInterval.String(), "--debug-echo-shared=false", "--debug-echo-availability-file", avail,
			"--discovery-handlers-dir", "", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	}
	renderer := startGitbroker(t, logName+"-renderer", "renderer started", "render",
		"--git", srv.URL(), "--branch", "main", "--watch", "--interval", rendererInterval.String(), "--signing-key", keys["renderer"], "--first-render",
		"--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")

	rendered := srv.On(verify.RenderedBranch)
	eventually(t, 2*time.Minute, "each site's folder rendered with its brokers", func() (bool, string) {
		for site := range sites {
			if !hasFileUnder(rendered, "rendered/"+site+"/"+sitesBrokers+"/cam/") {
				return false, "no cam brokers under rendered/" + site
			}
		}
		return true, ""
	})
	overlay := "flux"
	if folderSources {
		overlay = "flux-folder-sources"
	}
	for site, c := range sites {
		applyFluxTo(t, c, filepath.Join(work, "clusters", site, overlay), FluxNamespace, srv.URL(), keys["renderer"]+".pub", nil, sitesBrokers)
	}

	// Each Flux applies its own site's brokers, and nothing of the other's; the Configuration
	// selecting region=eu reaches plant-a alone.
	for site, c := range sites {
		waitSourcesAppliedOn(t, c, srv, FluxNamespace, 4*time.Minute)
		eventually(t, 2*time.Minute, site+"'s brokers running on its node", func() (bool, string) {
			got := siteBrokers(t, c)
			want := map[string]string{"cam": nodeOf[site]}
			if site == canarySite {
				want["scale"] = nodeOf[site]
			}
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("%v, want %v", got, want)
		})
	}
	require.False(t, hasFileUnder(rendered, "rendered/"+laterSite+"/"+sitesBrokers+"/scale/"), "scale selects region=eu: nothing of it is rendered for %s", laterSite)
	for site, c := range sites {
		ks, err := c.Dynamic.Resource(kustomizationGVR).Namespace(FluxNamespace).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, k := range ks.Items {
			p, _, _ := unstructured.NestedString(k.Object, "spec", "path")
			require.True(t, strings.HasPrefix(p, "./rendered/"+site+"/"), "%s's Kustomization %s applies %s", site, k.GetName(), p)
			source, _, _ := unstructured.NestedString(k.Object, "spec", "sourceRef", "name")
			repo, err := c.Dynamic.Resource(gitRepositoryGVR).Namespace(FluxNamespace).Get(ctx, source, metav1.GetOptions{})
			require.NoError(t, err)
			branch, _, _ := unstructured.NestedString(repo.Object, "spec", "ref", "branch")
			if folderSources {
				// Each folder from a source of its own, on the site's branches.
				require.True(t, strings.HasPrefix(branch, api.ClusterFolderBranchPrefix(site)), "%s's Kustomization %s builds from %s", site, k.GetName(), branch)
				require.Equal(t, k.GetName() == "gitbroker" || k.GetName() == "gitbroker-sources", source == "gitbroker", k.GetName())
			} else {
				require.Equal(t, verify.RenderedBranch, branch)
			}
		}
	}
	waitRecordedAvailable(t, srv, sites, "r1")

	// The canary's ref is deleted while its recorder is down (a careless force-push, or an
	// attacker's), once the renderer has taken its last commit. The renderer keeps the records
	// it verified; the recorder, restarted with nothing in memory, recovers by itself: its new
	// line names the commit the renderer accepted, and what follows needs its records.
	recorders[canarySite].Stop(30 * time.Second)
	statusRef := api.ClusterStatusBranch(canarySite)
	var accepted string
	eventually(t, time.Minute, "the renderer to accept the canary recorder's last commit", func() (bool, string) {
		meta, _ := rendered.File(render.MetadataPath)
		accepted = render.ParseMetadata([]byte(meta)).Writers[statusRef]
		tip := srv.On(statusRef).Head()
		return accepted == tip, fmt.Sprintf("accepted %.12s, tip %.12s", accepted, tip)
	})
	srv.SetRef(api.ClusterStatusBranch(canarySite), "")
	startRecorder(canarySite, "-restarted")
	eventually(t, time.Minute, "the restarted recorder's new line", func() (bool, string) {
		head := srv.On(api.ClusterStatusBranch(canarySite)).Head()
		return head != "", "no ref yet"
	})

	// A bad change: the canary's new broker cannot be scheduled, so it is never Available. The
	// canary takes it; store-7 keeps r1 while the renderer renders on.
	srv.CommitSigned(person, map[string]string{"configurations/cam.yaml": siteCamera("r2", `        resources:
          requests:
            memory: 100Ti
`)}, nil, "cam: release r2")
	eventually(t, 2*time.Minute, "the canary to run r2", func() (bool, string) {
		d := camDeployment(t, sites[canarySite])
		return d != nil && releaseOf(*d) == "r2", "not yet"
	})
	renders := renderer.metric(t, "gitbroker_renderer_renders_total")
	eventually(t, 2*time.Minute, "ten renders more while the canary is not Available", func() (bool, string) {
		n := renderer.metric(t, "gitbroker_renderer_renders_total")
		return n >= renders+10, fmt.Sprint(n-renders, " renders")
	})
	for _, site := range []string{canarySite, laterSite} {
		waitSourcesAppliedOn(t, sites[site], srv, FluxNamespace, 4*time.Minute)
	}
	d := camDeployment(t, sites[canarySite])
	require.Zero(t, d.Status.AvailableReplicas, "the canary's r2 broker cannot be scheduled")
	d = camDeployment(t, sites[laterSite])
	require.Equal(t, "r1", releaseOf(*d), "%s must keep r1 while the canary is not Available", laterSite)
	require.EqualValues(t, 1, d.Status.AvailableReplicas)
	// The plan says why: the rings, and the canary's broker the rest waits for.
	plan, _ := exec.Command(gitbroker, "plan", "--git", srv.URL(), "--branch", "main").CombinedOutput()
	require.Contains(t, string(plan), "Cluster rollout rings: canary ("+canarySite+"), then rest ("+laterSite+")")
	require.Contains(t, string(plan), "in cluster "+canarySite+" (an earlier ring) is ", "%s", plan)

	// The fix goes canary first too: store-7 takes r3 only after plant-a's recorder has recorded
	// its r3 broker Available.
	srv.CommitSigned(person, map[string]string{"configurations/cam.yaml": siteCamera("r3", "")}, nil, "cam: release r3, which fits")
	waitRecordedAvailable(t, srv, sites, "r3")
	out, err = exec.Command("git", "-C", srv.Bare(), "log", "--max-parents=0", "--format=%(trailers:key="+gitsync.TrailerReplaces+",valueonly)", api.ClusterStatusBranch(canarySite)).Output()
	require.NoError(t, err)
	require.Equal(t, accepted, strings.TrimSpace(string(out)), "the restarted recorder's new line names the tip the renderer accepted")
	// The renders, oldest first: the first that gives each site r3.
	first := map[string]int{}
	log := rendered.Log()
	for i := len(log) - 1; i >= 0; i-- {
		for site := range sites {
			if _, seen := first[site]; seen {
				continue
			}
			out, _ := exec.Command("git", "-C", srv.Bare(), "grep", "-l", "-F", `value: r3`, log[i].Hash, "--", "rendered/"+site+"/"+sitesBrokers+"/cam/").Output()
			if len(out) > 0 {
				first[site] = len(log) - i
			}
		}
	}
	t.Logf("r3 first rendered for %s at render %d, for %s at render %d (from the oldest kept)", canarySite, first[canarySite], laterSite, first[laterSite])
	require.Less(t, first[canarySite], first[laterSite], "the canary takes the fix before the rest")
}

// hasFileUnder reports whether branch srv has a file under dir.
func hasFileUnder(srv *gitsynctest.Server, dir string) bool {
	for _, f := range srv.Files() {
		if strings.HasPrefix(f, dir) {
			return true
		}
	}
	return false
}

// siteBrokers maps the Configuration of each broker Deployment in cluster c's broker namespace
// to the node it is pinned to.
func siteBrokers(t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	list, err := c.Client.AppsV1().Deployments(sitesBrokers).List(context.Background(), metav1.ListOptions{LabelSelector: managed})
	require.NoError(t, err)
	got := map[string]string{}
	for _, d := range list.Items {
		got[d.Labels[api.LabelConfiguration]] = strings.Join(pinnedNodes(&corev1.Pod{Spec: d.Spec.Template.Spec}), ",")
	}
	return got
}

// camDeployment is cluster c's cam broker, or nil.
func camDeployment(t *testing.T, c *Cluster) *appsv1.Deployment {
	t.Helper()
	list, err := c.Client.AppsV1().Deployments(sitesBrokers).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelConfiguration + "=cam"})
	require.NoError(t, err)
	if len(list.Items) != 1 {
		return nil
	}
	return &list.Items[0]
}

// waitRecordedAvailable waits for each site's cam broker to run release and be recorded
// Available by that site's recorder, on its own ref.
func waitRecordedAvailable(t *testing.T, srv *gitsynctest.Server, sites map[string]*Cluster, release string) {
	t.Helper()
	for site, c := range sites {
		eventually(t, 3*time.Minute, site+"'s cam broker recorded Available at "+release, func() (bool, string) {
			d := camDeployment(t, c)
			if d == nil {
				return false, "no cam Deployment"
			}
			if releaseOf(*d) != release {
				return false, "runs " + releaseOf(*d)
			}
			rec, ok := srv.On(api.ClusterStatusBranch(site)).File(api.ClusterStatusPath(site, api.RolloutPath(sitesBrokers, d.Name)))
			hash := d.Annotations[api.AnnotationInputsHash]
			return ok && hash != "" && strings.Contains(rec, "available: true") && strings.Contains(rec, "inputsHash: "+hash), rec
		})
	}
}

// TestManyClustersWithArgoCD runs one repository for two clusters from one Argo CD, set up as
// docs/MANY-CLUSTERS.md says: `init --argocd --clusters` writes the ApplicationSet (Argo CD's
// cluster generator, one Application per cluster, by name) and the AppProject; Argo CD knows
// each site under its name in gitbroker.yaml, labelled gitbroker.dev/cluster=true: plant-a is
// the cluster Argo CD runs in, store-7 a cluster of its own that Argo CD reaches with a
// ServiceAccount's token. Each site gets its own brokers, and the Configuration selecting
// region=eu reaches plant-a alone.
func TestManyClustersWithArgoCD(t *testing.T) {
	ctx := context.Background()
	runDir, err := os.MkdirTemp(cluster.Dir, "argocd-sites-") // its own, also under go test -count
	require.NoError(t, err)
	hub, argo, keys, rendererKey, keyID := startArgoCluster(t, filepath.Join(filepath.Base(runDir), canarySite))
	start, cancel := context.WithTimeout(ctx, 5*time.Minute)
	store, err := StartClusterWithoutFlux(start, cluster.bin, filepath.Join(runDir, laterSite))
	cancel()
	require.NoError(t, err)
	t.Cleanup(store.Stop)
	sites := map[string]*Cluster{canarySite: hub, laterSite: store}
	nodeOf := map[string]string{canarySite: canarySite + "-1", laterSite: laterSite + "-1"}

	settings := strings.Replace(sitesSettings(""), "  flux:\n", "  flux:\n    namespaces: false\n", 1)
	srv := gitsynctest.NewServer(t, "main", map[string]string{
		"gitbroker.yaml":            settings,
		"configurations/cam.yaml":   siteCamera("r1", ""),
		"configurations/scale.yaml": euScale,
	})
	work := t.TempDir()
	out, err := exec.Command("git", "clone", "-q", "--branch", "main", srv.URL(), work).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(gitbroker, "init", "--dir", work, "--argocd", "--clusters", "--repo-url", srv.URL()).CombinedOutput()
	require.NoError(t, err, "init --argocd --clusters: %s", out)

	// In each site: its node, and the broker namespace (spec.flux.namespaces: false).
	for site, c := range sites {
		require.NoError(t, c.AddNode(ctx, nodeOf[site]))
		require.NoError(t, c.CreateNamespace(ctx, sitesBrokers))
	}
	// Argo CD's clusters, as `argocd cluster add <context> --name <site> --label
	// gitbroker.dev/cluster=true` registers them: a Secret each, store-7's with the token of a
	// ServiceAccount bound to cluster-admin there (argocd-manager, as the CLI makes it).
	_, err = store.Client.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "argocd-manager"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, store.Apply(ctx, []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: argocd-manager
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {kind: ServiceAccount, name: argocd-manager, namespace: kube-system}
`)))
	expiry := int64(3600)
	token, err := store.Client.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "argocd-manager", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ca, err := os.ReadFile(store.pki.CACert)
	require.NoError(t, err)
	remote, err := json.Marshal(map[string]any{"bearerToken": token.Status.Token, "tlsClientConfig": map[string]any{"caData": base64.StdEncoding.EncodeToString(ca)}})
	require.NoError(t, err)
	for site, secret := range map[string]map[string]string{
		canarySite: {"server": "https://kubernetes.default.svc", "config": `{"tlsClientConfig":{"insecure":false}}`},
		laterSite:  {"server": store.Config.Host, "config": string(remote)},
	} {
		secret["name"] = site
		_, err := hub.Client.CoreV1().Secrets(ArgoNamespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-" + site, Labels: map[string]string{
				"argocd.argoproj.io/secret-type": "cluster", deploy.ClusterLabel: "true"}},
			StringData: secret,
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// The agents report, the renderer renders (signing with its OpenPGP key, which the
	// AppProject requires).
	for site, node := range nodeOf {
		avail := filepath.Join(keys, "availability-"+site)
		require.NoError(t, os.WriteFile(avail, nil, 0o644))
		out, err := exec.Command(gitbroker, "agent", "--allow-debug-echo", "--git", srv.URL(), "--node", node, "--once", "--debug-echo-shared=false",
			"--grace-period", "0s", "--local-grace-period", "0s", "--discovery-handlers-dir", "", "--debug-echo-availability-file", avail).CombinedOutput()
		require.NoError(t, err, "agent %s: %s", node, out)
	}
	out, err = exec.Command(gitbroker, "render", "--git", srv.URL(), "--signing-key", rendererKey, "--first-render").CombinedOutput()
	require.NoError(t, err, "render: %s", out)

	// argocd/ as init wrote it, with what the guide says to fill in: the broker namespace in
	// each site's destinations, and the renderer's key id.
	for _, f := range []string{"appproject.yaml", "applicationset.yaml"} {
		data, err := os.ReadFile(filepath.Join(work, "argocd", f))
		require.NoError(t, err)
		objs, err := Objects(data)
		require.NoError(t, err)
		for _, obj := range objs {
			if obj.GetKind() == "AppProject" {
				dests, _, _ := unstructured.NestedSlice(obj.Object, "spec", "destinations")
				for site := range sites {
					dests = append(dests, map[string]any{"name": site, "namespace": sitesBrokers})
				}
				require.NoError(t, unstructured.SetNestedSlice(obj.Object, dests, "spec", "destinations"))
				require.NoError(t, unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"keyID": keyID}}, "spec", "signatureKeys"))
			}
			require.NoError(t, hub.ApplyObject(ctx, obj))
		}
	}

	head := srv.On(verify.RenderedBranch).Head()
	for site, c := range sites {
		waitApplicationSynced(t, hub, argo, "gitbroker-"+site, head, "Healthy")
		want := map[string]string{"cam": nodeOf[site]}
		if site == canarySite {
			want["scale"] = nodeOf[site]
		}
		require.Equal(t, want, siteBrokers(t, c), "%s's brokers", site)
	}
	list, err := hub.Dynamic.Resource(applicationGVR).Namespace(ArgoNamespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 2, "one Application per cluster")
}
