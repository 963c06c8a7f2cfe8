//go:build e2e

package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// TestAdmissionPolicies applies deploy/flux's ValidatingAdmissionPolicies and accounts as a user
// does and plays the accounts Flux applies as, on the API server: gitbroker-flux may create a
// Kustomization only when it applies as gitbroker-applier, and a GitRepository only on the
// fleet's URL with gitbroker's own Secret; gitbroker-namespaces may not touch kube-system, change
// a namespace's Pod Security labels, or bind anything but gitbroker's accounts (the trust
// review's finding 12); gitbroker-applier may write only gitbroker.dev's ResourceSlices and
// DeviceClasses (DRA mode).
func TestAdmissionPolicies(t *testing.T) {
	ctx := context.Background()
	require.NoError(t, cluster.CreateNamespace(ctx, "flux-system"))
	data, err := os.ReadFile("../deploy/flux/admission.yaml")
	require.NoError(t, err)
	require.NoError(t, cluster.Apply(ctx, data))
	data, err = os.ReadFile("../deploy/flux/applier.yaml")
	require.NoError(t, err)
	require.NoError(t, cluster.Apply(ctx, data))

	as := func(sa string) dynamic.Interface {
		cfg := rest.CopyConfig(cluster.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:flux-system:" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:flux-system", "system:authenticated"}}
		return dynamic.NewForConfigOrDie(cfg)
	}
	flux, namespaces := as("gitbroker-flux"), as("gitbroker-namespaces")
	kustomizations := schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	repositories := schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	nsResource := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	bindings := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	create := func(c dynamic.Interface, gvr schema.GroupVersionResource, ns, yaml string) error {
		objs, err := Objects([]byte(yaml))
		require.NoError(t, err)
		var ri dynamic.ResourceInterface = c.Resource(gvr)
		if ns != "" {
			ri = c.Resource(gvr).Namespace(ns)
		}
		_, err = ri.Create(ctx, objs[0], dry)
		return err
	}
	kustomization := func(sa string) string {
		k := "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: gitbroker-default-cam\n  namespace: flux-system\nspec:\n  interval: 10m\n  path: ./rendered/default/cam\n  prune: true\n  sourceRef:\n    kind: GitRepository\n    name: gitbroker\n"
		if sa != "" {
			k += "  serviceAccountName: " + sa + "\n"
		}
		return k
	}
	repository := func(url, secret string) string {
		return "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: gitbroker-default-cam\n  namespace: flux-system\nspec:\n  interval: 1m\n  url: " + url + "\n  ref:\n    branch: gitbroker/folders/gitbroker-default-cam\n  secretRef:\n    name: " + secret + "\n  verify:\n    mode: HEAD\n    secretRef:\n      name: gitbroker-renderer-verify\n"
	}

	// The API server loads new policies within moments.
	require.Eventually(t, func() bool {
		err := create(flux, kustomizations, "flux-system", kustomization(""))
		return err != nil && containsAll(err.Error(), "ValidatingAdmissionPolicy", "gitbroker-flux", "must apply as gitbroker-applier")
	}, time.Minute, 200*time.Millisecond, "a Kustomization without serviceAccountName is refused")
	require.ErrorContains(t, create(flux, kustomizations, "flux-system", kustomization("kustomize-controller")), "must apply as gitbroker-applier")
	require.NoError(t, create(flux, kustomizations, "flux-system", kustomization("gitbroker-applier")))
	// Only folders of this cluster's part of the rendered branch (the ConfigMap's folder).
	for _, path := range []string{"./configurations", "./rendered/../status", "./renderedX/default/cam"} {
		k := strings.Replace(kustomization("gitbroker-applier"), "path: ./rendered/default/cam", "path: "+path, 1)
		require.ErrorContains(t, create(flux, kustomizations, "flux-system", k), "applies a folder under ./rendered, this cluster's part of the rendered branch", path)
	}
	k := kustomization("gitbroker-applier") + "  postBuild:\n    substituteFrom:\n    - kind: Secret\n      name: flux-system\n"
	require.ErrorContains(t, create(flux, kustomizations, "flux-system", k), "may not set kubeConfig, decryption or postBuild.substituteFrom")

	require.ErrorContains(t, create(flux, repositories, "flux-system", repository("https://git.example.com/fleet/edge.git", "flux-system")), "name no Secret but gitbroker-git")
	require.ErrorContains(t, create(flux, repositories, "flux-system", repository("https://attacker.example/x.git", "gitbroker-git")), "must fetch https://git.example.com/fleet/edge.git")
	require.NoError(t, create(flux, repositories, "flux-system", repository("https://git.example.com/fleet/edge.git", "gitbroker-git")))

	// gitbroker-namespaces: RBAC lets it patch any namespace; the policy keeps it to its own.
	patch := func(name, body string) error {
		_, err := namespaces.Resource(nsResource).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	require.ErrorContains(t, patch("kube-system", `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"gitbroker"}}}`), "may not touch the cluster namespace kube-system")
	require.NoError(t, cluster.CreateNamespace(ctx, "brokers-admission"))
	require.NoError(t, patch("brokers-admission", `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"gitbroker"}}}`))
	require.ErrorContains(t, patch("brokers-admission", `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`), "never change its Pod Security labels")
	require.NoError(t, create(namespaces, nsResource, "", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: brokers-new\n  labels:\n    app.kubernetes.io/managed-by: gitbroker\n"))

	binding := func(ns, sa, saNS string) string {
		return "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: gitbroker-applier\n  namespace: " + ns + "\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: gitbroker-applier\nsubjects:\n- kind: ServiceAccount\n  name: " + sa + "\n  namespace: " + saNS + "\n"
	}
	require.ErrorContains(t, create(namespaces, bindings, "kube-system", binding("kube-system", "gitbroker-applier", "flux-system")), "may not touch the cluster namespace kube-system")
	require.ErrorContains(t, create(namespaces, bindings, "brokers-admission", binding("brokers-admission", "default", "brokers-admission")), "may bind only gitbroker-applier and the recorder")
	require.NoError(t, create(namespaces, bindings, "brokers-admission", binding("brokers-admission", "gitbroker-applier", "flux-system")))

	// gitbroker-applier (DRA mode): ResourceSlices and DeviceClasses of gitbroker.dev only, as the
	// renderer writes them; another driver's devices, or a class that could select them, hand
	// them out, or stand for an extended resource, are refused.
	applier := as("gitbroker-applier")
	slices := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}
	classes := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}
	slice := func(driver, nodes string) string {
		return "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: cam-a1b2c3.plant\nspec:\n  driver: " + driver +
			"\n  pool: {name: plant/cam-a1b2c3, generation: 1, resourceSliceCount: 1}\n" + nodes + "  devices:\n  - name: slot-0\n"
	}
	class := func(name, selectors, extra string) string {
		return "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: " + name + "\nspec:\n  selectors:\n" + selectors + extra
	}
	ours := "  - cel: {expression: 'device.driver == \"gitbroker.dev\"'}\n  - cel: {expression: 'device.attributes[\"gitbroker.dev\"].configuration == \"cam\"'}\n"
	require.Eventually(t, func() bool {
		err := create(applier, slices, "", slice("gpu.example.com", "  nodeName: edge-a\n"))
		return err != nil && strings.Contains(err.Error(), "is of driver gitbroker.dev")
	}, time.Minute, 200*time.Millisecond, "another driver's ResourceSlice is refused")
	require.ErrorContains(t, create(applier, slices, "", slice("gitbroker.dev", "  allNodes: true\n")), "on a node or selected nodes")
	require.NoError(t, create(applier, slices, "", slice("gitbroker.dev", "  nodeName: edge-a\n")))
	require.NoError(t, create(applier, slices, "", slice("gitbroker.dev", "  nodeSelector:\n    nodeSelectorTerms:\n    - matchExpressions:\n      - {key: kubernetes.io/hostname, operator: In, values: [edge-a, edge-b]}\n")))
	require.ErrorContains(t, create(applier, classes, "", class("gpus.example.com", ours, "")), "is named *.gitbroker.dev")
	require.ErrorContains(t, create(applier, classes, "", class("cam.plant.gitbroker.dev", "  - cel: {expression: 'device.driver == \"gitbroker.dev\" || true'}\n", "")), `selects device.driver == "gitbroker.dev"`)
	require.ErrorContains(t, create(applier, classes, "", class("cam.plant.gitbroker.dev", ours, "  extendedResourceName: example.com/gpu\n")), "no config or extendedResourceName")
	require.NoError(t, create(applier, classes, "", class("cam.plant.gitbroker.dev", ours, "")))

	// With spec.clusters, one cluster's Flux applies its own folder only: another cluster's
	// brokers are refused, whatever the rendered branch holds.
	cm, err := cluster.Client.CoreV1().ConfigMaps("flux-system").Get(ctx, "gitbroker-flux-policy", metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data["folder"] = "./rendered/site-a"
	_, err = cluster.Client.CoreV1().ConfigMaps("flux-system").Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	siteB := strings.Replace(kustomization("gitbroker-applier"), "path: ./rendered/default/cam", "path: ./rendered/site-b/default/cam", 1)
	require.Eventually(t, func() bool {
		err := create(flux, kustomizations, "flux-system", siteB)
		return err != nil && strings.Contains(err.Error(), "applies a folder under ./rendered/site-a")
	}, time.Minute, 200*time.Millisecond, "another cluster's folder is refused")
	require.NoError(t, create(flux, kustomizations, "flux-system", strings.Replace(siteB, "site-b", "site-a", 1)))
	ns := "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: gitbroker--namespaces\n  namespace: flux-system\nspec:\n  interval: 10m\n  path: ./rendered/site-a/_namespaces\n  prune: false\n  serviceAccountName: gitbroker-namespaces\n  sourceRef:\n    kind: GitRepository\n    name: gitbroker\n"
	require.NoError(t, create(flux, kustomizations, "flux-system", ns))
	require.ErrorContains(t, create(flux, kustomizations, "flux-system", strings.Replace(ns, "site-a/_namespaces", "site-b/_namespaces", 1)), "must apply as gitbroker-applier")

	// An administrator is not held by them.
	require.NoError(t, create(dynamic.NewForConfigOrDie(cluster.Config), kustomizations, "flux-system", kustomization("")))
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
