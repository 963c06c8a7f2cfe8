//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// PodNetwork stands in, for gitbroker's own Pods (gitbroker-system, part-of gitbroker), for what
// this machine's real node lacks and a cluster has: a Pod network that reaches the git server
// and the API server (both on the host's loopback), cluster DNS and kube-proxy for the
// renderer's webhook Service, and udev. It is a mutating admission webhook the API server calls
// for each such Pod as it is created, so that deploy/ applies as written
// (`kubectl apply -k deploy/`) and the objects in the API server stay as deploy/ made them; only
// their Pods change:
//   - on the real node, on the host's network, each daemon's ports (metrics, health, the
//     renderer's webhook) moved to free loopback ports (two renderer replicas share the node),
//     kubelet probing them there;
//   - the API server at its loopback address (KUBERNETES_SERVICE_HOST), for the renderer's and
//     the recorder's in-cluster configuration;
//   - the agent's --renderer-url (the Service gitbroker-renderer-webhook) at Proxy, which
//     forwards to the port in the Service's EndpointSlice, as kube-proxy does to the address
//     the leading renderer published;
//   - the agent's /sys and /run/udev the test's fixture sysfs.
type PodNetwork struct {
	// Proxy is the renderer's webhook Service as this machine reaches it.
	Proxy string

	cluster      *Cluster
	node, sys    string
	hook, router *httptest.Server
}

// StartPodNetwork starts the webhook and the Service's proxy and registers the webhook with the
// API server; Stop removes it.
func (c *Cluster) StartPodNetwork(ctx context.Context, node, sysRoot string) (*PodNetwork, error) {
	p := &PodNetwork{cluster: c, node: node, sys: sysRoot}
	p.hook = httptest.NewTLSServer(http.HandlerFunc(p.admit))
	p.router = httptest.NewServer(http.HandlerFunc(p.route))
	p.Proxy = p.router.URL
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-pod-network"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "pod-network.e2e.gitbroker.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr.To(p.hook.URL + "/mutate"),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.hook.Certificate().Raw}),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: systemNamespace}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "gitbroker"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		p.hook.Close()
		p.router.Close()
		return nil, err
	}
	return p, nil
}

// Stop unregisters the webhook and stops its servers.
func (p *PodNetwork) Stop() {
	err := p.cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "e2e-pod-network", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Println("e2e: removing the pod network webhook:", err)
	}
	p.hook.Close()
	p.router.Close()
}

func (p *PodNetwork) admit(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprint("not an AdmissionReview: ", err), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	var pod corev1.Pod
	err := json.Unmarshal(review.Request.Object.Raw, &pod)
	if err == nil {
		err = p.onHost(&pod.Spec)
	}
	if err == nil {
		var patch []byte
		patch, err = json.Marshal([]map[string]any{{"op": "replace", "path": "/spec", "value": pod.Spec}})
		resp.Patch, resp.PatchType = patch, ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	if err != nil {
		resp.Allowed, resp.Result = false, &metav1.Status{Message: "e2e pod network: " + err.Error()}
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// onHost changes a gitbroker Pod as PodNetwork says.
func (p *PodNetwork) onHost(ps *corev1.PodSpec) error {
	if err := onHostNetwork(ps, p.node, p.cluster.Config.Host); err != nil {
		return err
	}
	for i := range ps.Containers {
		c := &ps.Containers[i]
		for j, a := range c.Args {
			if a == "--renderer-url=http://gitbroker-renderer-webhook:9292/hook" {
				c.Args[j] = "--renderer-url=" + p.Proxy + "/hook"
			}
		}
	}
	for i, v := range ps.Volumes {
		if v.HostPath == nil {
			continue
		}
		switch v.HostPath.Path {
		case "/sys":
			ps.Volumes[i].HostPath.Path = filepath.Join(p.sys, "sys")
		case "/run/udev":
			ps.Volumes[i].HostPath.Path = filepath.Join(p.sys, "run", "udev")
		}
	}
	return nil
}

// onHostNetwork puts a Pod of deploy/ on node, on the host's network: each daemon's ports
// (metrics, health, the renderer's webhook) on free loopback ports, kubelet probing them there,
// and the API server at apiHost's loopback address (no kube-proxy serves the kubernetes
// Service here).
func onHostNetwork(ps *corev1.PodSpec, node, apiHost string) error {
	api, err := url.Parse(apiHost)
	if err != nil {
		return err
	}
	ps.HostNetwork, ps.DNSPolicy = true, corev1.DNSClusterFirstWithHostNet
	if ps.NodeSelector == nil {
		ps.NodeSelector = map[string]string{}
	}
	ps.NodeSelector[corev1.LabelHostname] = node
	for i := range ps.Containers {
		c := &ps.Containers[i]
		ports := map[string]int{}
		for _, name := range []string{"metrics", "health", "webhook"} {
			if ports[name], err = freePort(); err != nil {
				return err
			}
		}
		for j, a := range c.Args {
			switch a {
			case "--metrics-addr=:8080":
				c.Args[j] = "--metrics-addr=" + addr(ports["metrics"])
			case "--health-addr=:9440":
				c.Args[j] = "--health-addr=" + addr(ports["health"])
			case "--webhook-addr=:9292":
				c.Args[j] = "--webhook-addr=" + addr(ports["webhook"])
			}
		}
		for j := range c.Ports {
			if port, ok := ports[c.Ports[j].Name]; ok {
				c.Ports[j].ContainerPort, c.Ports[j].HostPort = int32(port), int32(port)
			}
		}
		for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if pr != nil && pr.HTTPGet != nil {
				pr.HTTPGet.Host = "127.0.0.1"
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: api.Hostname()},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: api.Port()})
	}
	return nil
}

// route forwards a request to the renderer replica the webhook Service's EndpointSlice names
// (its port, on loopback: the replicas listen there, on this machine).
func (p *PodNetwork) route(w http.ResponseWriter, r *http.Request) {
	slice, err := p.cluster.Client.DiscoveryV1().EndpointSlices(systemNamespace).Get(r.Context(), "gitbroker-renderer-webhook", metav1.GetOptions{})
	if err != nil || len(slice.Endpoints) == 0 || len(slice.Ports) == 0 || slice.Ports[0].Port == nil {
		http.Error(w, fmt.Sprint("no endpoint for the Service gitbroker-renderer-webhook: ", err), http.StatusServiceUnavailable)
		return
	}
	target := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(int(*slice.Ports[0].Port))}
	httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
}
