package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const flagKubeconfig = "kubeconfig"

// KubeOptions say how to reach the API server.
type KubeOptions struct {
	Kubeconfig string
}

func (o *KubeOptions) BindFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Kubeconfig, flagKubeconfig, "", "Path to a kubeconfig; default $KUBECONFIG, ~/.kube/config, or the in-cluster service account.")
}

// Client is a client of the API server.
func (o *KubeOptions) Client() (kubernetes.Interface, error) {
	c, _, err := o.ClientAndConfig()
	return c, err
}

// ClientAndConfig is a client of the API server and the configuration it was made from.
func (o *KubeOptions) ClientAndConfig() (kubernetes.Interface, *rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "gitbroker"
	c, err := kubernetes.NewForConfig(cfg)
	return c, cfg, err
}
