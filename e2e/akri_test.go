//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// akriChart is Akri's Helm chart as Akri v0.13.8 released it (project-akri/akri,
// deployment/helm, Apache-2.0), unchanged.
const akriChart = "testdata/akri-chart"

// TestMigratingFromAkri runs the shell blocks of docs/DEPLOYING.md's "Replacing Akri, step by
// step" as written, against the API server of a cluster where Akri was installed as its users
// install it: Akri's own chart, from a chart repository named akri-helm-charts (served on
// loopback), with the udev discovery handler, and Akri's example Configurations in two
// namespaces. The Configurations come back from `kubectl get akric -A -o yaml` as a List with
// the API server's fields and gitbroker plans them; helm upgrade, with the guide's values,
// removes Akri's agent, controller and webhook and keeps the udev handler; the last block deletes
// the Configurations. What the test cannot have is Akri's programs: their images are on
// ghcr.io, which this machine cannot reach, so Akri's Pods never start. Two things follow: the
// chart is given a CA bundle for its webhook, so that helm does not wait on the certificate Jobs
// (Akri's documented alternative), and the Configurations are created before the chart, while
// no ValidatingWebhookConfiguration asks a webhook that does not answer. The steps between the
// blocks (gitbroker's agents taking over a node from Akri's) are TestDeployingWithFlux's and the
// agent's tests.
func TestMigratingFromAkri(t *testing.T) {
	ctx := context.Background()
	srv := gitsynctest.NewServer(t, "main", nil)
	home := userHome(t)
	g := newGuide(t, home, guideValue{"https://git.example.org/plant/edge.git", srv.URL()})
	g.run(`mkdir -p -m 700 "$KEYS"`)
	g.run("gitbroker init --dir")

	// Akri as its chart installed it, with the Configurations a user had made.
	charts := t.TempDir()
	repo := httptest.NewServer(http.FileServer(http.Dir(charts)))
	t.Cleanup(repo.Close)
	helm(t, home, "package", akriChart, "--destination", charts)
	helm(t, home, "repo", "index", charts, "--url", repo.URL)
	helm(t, home, "repo", "add", "akri-helm-charts", repo.URL)
	require.NoError(t, kubectl(".", "apply", "-f", filepath.Join(akriChart, "crds")))
	t.Cleanup(func() {
		_ = kubectl(".", "delete", "-f", filepath.Join(akriChart, "crds"), "--ignore-not-found", "--timeout=2m")
	})
	require.NoError(t, kubectl(".", "wait", "--for=condition=Established", "--timeout=1m", "crd/configurations.akri.sh", "crd/instances.akri.sh"))
	require.NoError(t, kubectl(".", "create", "namespace", "factory"))
	t.Cleanup(func() { _ = kubectl(".", "delete", "namespace", "factory", "--ignore-not-found", "--timeout=2m") })
	require.NoError(t, kubectl(".", "apply", "-f", "../fixtures/akri-examples/repo/configurations/"))
	helm(t, home, "install", "akri", "akri-helm-charts/akri", "--namespace", "default", "--version", "0.13.8",
		"--set", "udev.discovery.enabled=true", "--set", "webhookConfiguration.caBundle="+base64.StdEncoding.EncodeToString(cluster.Config.CAData))
	t.Cleanup(func() {
		_, _ = exec.Command(helmProgram(), "uninstall", "akri", "--namespace", "default", "--no-hooks", "--kubeconfig", cluster.Kubeconfig).CombinedOutput()
	})
	apps := cluster.Client.AppsV1()
	_, err := apps.DaemonSets("default").Get(ctx, "akri-agent-daemonset", metav1.GetOptions{})
	require.NoError(t, err, "Akri's chart installed its agent")
	_, err = apps.Deployments("default").Get(ctx, "akri-controller-deployment", metav1.GetOptions{})
	require.NoError(t, err, "Akri's chart installed its controller")
	_, err = cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "akri-webhook-configuration", metav1.GetOptions{})
	require.NoError(t, err, "Akri's chart installed its webhook")

	// 1. The Configurations, as the cluster holds them, planned.
	plan := g.run("kubectl get akric -A -o yaml")
	list, err := os.ReadFile(filepath.Join(home, "src", "edge", "configurations", "from-akri.yaml"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(list), "apiVersion: v1\nitems:\n"), "kubectl printed a List:\n%s", list)
	require.Contains(t, string(list), "resourceVersion:", "with the API server's fields")
	for _, c := range []string{"default/akri-onvif", "default/akri-udev-video", "factory/akri-opcua-monitoring"} {
		require.Contains(t, plan, "Configuration "+c+" ", "the plan names each of Akri's Configurations")
	}

	// 3. Akri's agent, controller and webhook stop; its udev handler stays.
	g.run("helm upgrade akri")
	eventually(t, time.Minute, "Akri's agent, controller and webhook to go", func() (bool, string) {
		_, agent := apps.DaemonSets("default").Get(ctx, "akri-agent-daemonset", metav1.GetOptions{})
		_, controller := apps.Deployments("default").Get(ctx, "akri-controller-deployment", metav1.GetOptions{})
		_, webhook := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "akri-webhook-configuration", metav1.GetOptions{})
		return apierrors.IsNotFound(agent) && apierrors.IsNotFound(controller) && apierrors.IsNotFound(webhook), ""
	})
	_, err = apps.DaemonSets("default").Get(ctx, "akri-udev-discovery-daemonset", metav1.GetOptions{})
	require.NoError(t, err, "Akri's udev discovery handler stays, for gitbroker's agents")

	// 5. The devices handed over: Akri's Configurations deleted.
	g.run("kubectl delete akric --all -A")
	left, err := cluster.Dynamic.Resource(schema.GroupVersionResource{Group: "akri.sh", Version: "v0", Resource: "configurations"}).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, left.Items)
}

// helmProgram is the helm the e2e programs hold.
func helmProgram() string { return filepath.Join(os.Getenv("GITBROKER_E2E_BIN"), "helm") }

// helm runs helm as the guide's user (home) against the cluster.
func helm(t *testing.T, home string, args ...string) {
	t.Helper()
	cmd := exec.Command(helmProgram(), args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+cluster.Kubeconfig)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "helm %s: %s", strings.Join(args, " "), out)
}
