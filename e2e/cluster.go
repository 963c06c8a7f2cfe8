//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Loopback ranges: no Service or Pod address ever leaves 127.0.0.0/8.
const (
	serviceCIDR = "127.65.0.0/16"
	podCIDR     = "127.66.0.0/16"
	// FluxNamespace is where Flux's controllers and objects live.
	FluxNamespace = "flux-system"
)

// Cluster is a Kubernetes control plane with kwok nodes and Flux, running
// as processes on loopback.
type Cluster struct {
	Dir        string // holds pki/, etcd/, storage/, logs/ and the kubeconfig
	LogDir     string
	Kubeconfig string // the admin kubeconfig
	Config     *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface
	Mapper     *restmapper.DeferredDiscoveryRESTMapper
	// ContainerLog is the CRI log file kwok serves as the log of every container in the
	// cluster (a ClusterLogs rule), through the API server's pods/log: what a test writes there
	// is what kubectl logs, and the recorder, read.
	ContainerLog string
	// ReceiverURL is notification-controller's webhook receiver (what deploy/config.yaml's
	// flux-receiver-url names in a cluster).
	ReceiverURL string

	bin   string
	pki   *pki
	procs []*process
	// stopAdvertising ends advertiseDevices.
	stopAdvertising context.CancelFunc
}

// StartCluster starts etcd, the API server, the controller manager, the
// scheduler, kwok, and Flux's source-controller, kustomize-controller and
// notification-controller from the programs in bin, with their state and logs under dir. On error
// whatever was started is stopped again.
func StartCluster(ctx context.Context, bin, dir string) (*Cluster, error) {
	return startCluster(ctx, bin, dir, true)
}

// StartClusterWithoutFlux starts the same control plane and kwok, and no Flux: a cluster that
// only Argo CD applies to.
func StartClusterWithoutFlux(ctx context.Context, bin, dir string) (*Cluster, error) {
	return startCluster(ctx, bin, dir, false)
}

func startCluster(ctx context.Context, bin, dir string, flux bool) (_ *Cluster, err error) {
	c := &Cluster{Dir: dir, LogDir: filepath.Join(dir, "logs"), bin: bin}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for _, d := range []string{c.LogDir, filepath.Join(dir, "pki"), filepath.Join(dir, "etcd"), filepath.Join(dir, "storage")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if c.pki, err = newPKI(filepath.Join(dir, "pki")); err != nil {
		return nil, fmt.Errorf("generating certificates: %w", err)
	}
	if err := c.startEtcdAndAPIServer(ctx); err != nil {
		return nil, err
	}
	if err := c.startControllers(ctx); err != nil {
		return nil, err
	}
	if !flux {
		return c, nil
	}
	if err := c.startFlux(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(name string, args []string, env ...string) (*process, error) {
	p, err := startProcess(c.LogDir, name, filepath.Join(c.bin, name), args, env)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

func (c *Cluster) startEtcdAndAPIServer(ctx context.Context) error {
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	etcdURL := "http://" + addr(clientPort)
	peerURL := "http://" + addr(peerPort)
	etcd, err := c.start("etcd", []string{
		"--name=e2e",
		"--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=e2e=" + peerURL,
		"--listen-metrics-urls=",
		// A test cluster's data is thrown away; fsync only slows it down.
		"--unsafe-no-fsync",
		"--log-level=warn",
	})
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, etcd, etcdURL+"/health", nil, time.Minute); err != nil {
		return err
	}

	apiPort, err := freePort()
	if err != nil {
		return err
	}
	// make bench-cluster can look inside the API server (GITBROKER_E2E_KUBE_APISERVER_ARGS=--profiling);
	// the flags given last win.
	apiserver, err := c.start("kube-apiserver", append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file=" + c.pki.ServerCert, "--tls-private-key-file=" + c.pki.ServerKey,
		"--token-auth-file=" + c.pki.TokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + c.pki.SAPub,
		"--service-account-signing-key-file=" + c.pki.SAKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		// kwok serves the nodes' kubelet API (logs) on loopback, at the nodes' InternalIP.
		"--kubelet-preferred-address-types=InternalIP",
		// The kubernetes Service's endpoints would point at the advertise
		// address through kube-proxy, which does not run here.
		"--endpoint-reconciler-type=none",
		// API priority and fairness stays on, as in real clusters: without it the
		// API server refuses requests over its in-flight limit (200 mutating) with
		// 429 unless they come from system:masters. The suite's own clients are
		// system:masters and Flux impersonates gitbroker-applier, so only Flux's
		// applies would be refused (and retried a second later), which would bias
		// make bench-cluster against Flux.
		"--profiling=false",
	}, strings.Fields(os.Getenv("GITBROKER_E2E_KUBE_APISERVER_ARGS"))...))
	if err != nil {
		return err
	}
	server := "https://" + addr(apiPort)
	ca, err := os.ReadFile(c.pki.CACert)
	if err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, server, ca, c.pki.AdminToken); err != nil {
		return err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if err := waitHTTP(ctx, apiserver, server+"/readyz", c.Config, 2*time.Minute); err != nil {
		return err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return err
	}
	c.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	return nil
}

func (c *Cluster) startControllers(ctx context.Context) error {
	// make bench-cluster lifts its client-side limits (GITBROKER_E2E_KUBE_CONTROLLER_MANAGER_ARGS):
	// at the defaults (20 requests a second) the ReplicaSets and Pods of fleet-10k's 6,644
	// Deployments take over half an hour.
	if _, err := c.start("kube-controller-manager", append([]string{
		"--kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file=" + c.pki.SAKey,
		"--root-ca-file=" + c.pki.CACert,
		"--service-cluster-ip-range=" + serviceCIDR,
		// kwok's Pods have loopback IPs, which an EndpointSlice and an Endpoints both refuse:
		// their controllers would retry every Service's slice or Endpoints, again at each of
		// its Pods' changes, a load no real cluster carries (nothing here reads them; the
		// Endpoints of a 200-device benchmark held none of their Pods' addresses).
		"--controllers=*,-node-ipam-controller,-endpointslice-controller,-endpointslice-mirroring-controller,-endpoints-controller",
	}, strings.Fields(os.Getenv("GITBROKER_E2E_KUBE_CONTROLLER_MANAGER_ARGS"))...)); err != nil {
		return err
	}
	if _, err := c.start("kube-scheduler", []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}); err != nil {
		return err
	}
	// kwok also plays the nodes' kubelet API: every node's InternalIP is 127.0.0.1 and its
	// kubelet port kwok's server (a self-signed TLS listener, which the API server does not
	// verify without --kubelet-certificate-authority), and container logs come from one file.
	kubeletPort, err := freePort()
	if err != nil {
		return err
	}
	c.ContainerLog = filepath.Join(c.Dir, "container.log")
	if err := os.WriteFile(c.ContainerLog, nil, 0o644); err != nil {
		return err
	}
	logsConfig := filepath.Join(c.Dir, "kwok-extra.yaml")
	if err := os.WriteFile(logsConfig, []byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterLogs\nmetadata:\n  name: every-container\nspec:\n  logs:\n  - logsFile: "+c.ContainerLog+"\n---\n"+podFailStage), 0o644); err != nil {
		return err
	}
	if _, err := c.start("kwok", []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--config=" + filepath.Join(c.bin, "kwok.yaml"),
		"--config=" + logsConfig,
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=" + podCIDR,
		"--node-ip=127.0.0.1",
		"--node-lease-duration-seconds=40",
		fmt.Sprintf("--node-port=%d", kubeletPort),
		"--server-address=" + addr(kubeletPort),
	}); err != nil {
		return err
	}
	adv, cancel := context.WithCancel(context.Background())
	c.stopAdvertising = cancel
	go c.advertiseDevices(adv)
	// The default ServiceAccount is made by the controller manager; Pods
	// cannot be created in a namespace before it exists.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.checkAlive(); err != nil {
			return false, err
		}
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func (c *Cluster) startFlux(ctx context.Context) error {
	crds, err := filepath.Glob(filepath.Join(c.bin, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no Flux CRDs in %s/crds: %v", c.bin, err)
	}
	for _, f := range crds {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := c.Apply(ctx, data); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	if err := c.WaitForKinds(ctx, "GitRepository.source.toolkit.fluxcd.io", "Kustomization.kustomize.toolkit.fluxcd.io", "Receiver.notification.toolkit.fluxcd.io"); err != nil {
		return err
	}
	if err := c.CreateNamespace(ctx, FluxNamespace); err != nil {
		return err
	}
	storagePort, err := freePort()
	if err != nil {
		return err
	}
	receiverPort, err := freePort()
	if err != nil {
		return err
	}
	c.ReceiverURL = "http://" + addr(receiverPort)
	env := []string{"KUBECONFIG=" + c.Kubeconfig, "RUNTIME_NAMESPACE=" + FluxNamespace}
	for _, name := range []string{"source-controller", "kustomize-controller", "notification-controller"} {
		metrics, err := freePort()
		if err != nil {
			return err
		}
		health, err := freePort()
		if err != nil {
			return err
		}
		args := []string{
			"--metrics-addr=" + addr(metrics),
			"--health-addr=" + addr(health),
			"--enable-leader-election=false",
			"--log-level=info",
		}
		// make bench-cluster tries the controllers' own knobs (--concurrent, ...):
		// GITBROKER_E2E_KUSTOMIZE_CONTROLLER_ARGS, GITBROKER_E2E_SOURCE_CONTROLLER_ARGS.
		knobs := "GITBROKER_E2E_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_ARGS"
		args = append(args, strings.Fields(os.Getenv(knobs))...)
		switch name {
		case "source-controller":
			args = append(args,
				"--storage-path="+filepath.Join(c.Dir, "storage"),
				"--storage-addr="+addr(storagePort),
				"--storage-adv-addr="+addr(storagePort),
			)
		case "notification-controller":
			// The Receivers' webhooks (what a cluster's webhook-receiver Service exposes), and its
			// events endpoint, which nothing here sends to.
			events, err := freePort()
			if err != nil {
				return err
			}
			args = append(args, "--receiverAddr="+addr(receiverPort), "--events-addr="+addr(events))
		}
		p, err := c.start(name, args, env...)
		if err != nil {
			return err
		}
		p.Metrics = addr(metrics)
		if err := waitHTTP(ctx, p, "http://"+addr(health)+"/readyz", nil, 2*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// Process is the cluster process of that name (kustomize-controller, ...), or nil.
func (c *Cluster) Process(name string) *process {
	for _, p := range c.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Stop stops every process, the last started first.
func (c *Cluster) Stop() {
	if c.stopAdvertising != nil {
		c.stopAdvertising()
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Stop(10 * time.Second)
	}
	c.procs = nil
}

// checkAlive fails when a cluster process has exited.
func (c *Cluster) checkAlive() error {
	for _, p := range c.procs {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.Log)
		}
	}
	return nil
}

// CreateNamespace creates a namespace unless it exists.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as a
// ServiceAccount with a token from the TokenRequest API, so a process runs
// with exactly the permissions RBAC gives that account.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	expiry := int64(24 * 3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	ca, err := os.ReadFile(c.pki.CACert)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "kubeconfig-"+namespace+"-"+name)
	return path, writeKubeconfig(path, c.Config.Host, ca, tr.Status.Token)
}

func writeKubeconfig(path, server string, ca []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e", Namespace: "default"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}

// waitHTTP polls url until it answers 200, failing early when p exits.
// With cfg set, the request is authenticated as cfg says.
func waitHTTP(ctx context.Context, p *process, url string, cfg *rest.Config, timeout time.Duration) error {
	client := &http.Client{}
	if cfg != nil {
		var err error
		if client, err = rest.HTTPClientFor(cfg); err != nil {
			return err
		}
	}
	client.Timeout = 5 * time.Second
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.Log)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s at %s (last answer: %s): %w; see %s", p.Name, url, last, err, p.Log)
	}
	return nil
}
