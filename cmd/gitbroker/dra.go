package main

import (
	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/agent/dra"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/cmd/internal/cli"
)

// Flags of the agent's DRA kubelet plugin (--device-allocation=dra).
const (
	flagDRAPluginsDir  = "dra-plugins-dir"
	flagDRARegistryDir = "dra-registry-dir"
	flagCDIDir         = "cdi-dir"
)

// draPlugin is the agent's DRA kubelet plugin, which gitbroker agent serves and gitbroker-agent,
// without a Kubernetes client, does not.
func draPlugin() *cli.DRAPlugin {
	var kube kubeOptions
	var pluginsDir, registryDir, cdiDir string
	return &cli.DRAPlugin{
		BindFlags: func(cmd *cobra.Command) {
			fs := cmd.Flags()
			kube.BindFlags(cmd)
			fs.StringVar(&pluginsDir, flagDRAPluginsDir, dra.DefaultPluginsDir, "kubelet's plugins folder (--device-allocation=dra): the plugin's socket goes in <dir>/"+api.DRADriver+". The path must be the same in the agent's container and on the node.")
			fs.StringVar(&registryDir, flagDRARegistryDir, dra.DefaultRegistryDir, "kubelet's plugin registration folder (--device-allocation=dra). The path must be the same in the agent's container and on the node.")
			fs.StringVar(&cdiDir, flagCDIDir, dra.DefaultCDIDir, "The container runtime's CDI spec folder (--device-allocation=dra): one file per prepared claim. The host's device nodes' owners and groups are read under --udev-root/dev.")
		},
		New: func(node, devRoot string, log logr.Logger) (agent.NodePlugin, error) {
			client, err := kube.client()
			if err != nil {
				return nil, err
			}
			return dra.New(dra.Options{Node: node, Client: client, PluginsDir: pluginsDir, RegistryDir: registryDir, CDIDir: cdiDir, DevRoot: devRoot, Log: log}), nil
		},
	}
}
