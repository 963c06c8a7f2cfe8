package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/notify"
)

// A folder of notification secrets turns on what it holds and nothing else; a target named
// without its secret is an error that says which flag or file is missing; credentials in the
// repository URL are never sent on.
func TestNotifyOptionsFromASecretsFolder(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, notify.SecretFileFluxReceiver), []byte("tok\n"), 0o600))
	o := &notifyOptions{SecretsDir: dir, FluxURL: "http://webhook-receiver.flux-system.svc", FluxReceiver: "flux-system/gitbroker"}
	targets, repo, err := o.targets("https://user:secret@git.example.com/fleet.git", "gitbroker/rendered")
	require.NoError(t, err)
	require.Len(t, targets, 1)
	require.Equal(t, "https://git.example.com/fleet.git", repo)
	f := targets[0].(*notify.FluxReceiver)
	require.Equal(t, []byte("tok"), f.Token)
	require.Empty(t, o.HostSecretFile, "no webhook-secret in the folder: the host's webhook stays off")

	o = &notifyOptions{SecretsDir: dir, ArgoURL: "https://argocd-server.argocd.svc/api/webhook"}
	_, _, err = o.targets("https://git.example.com/fleet.git", "gitbroker/rendered")
	require.ErrorContains(t, err, "--argocd-webhook-url needs --argocd-webhook-secret-file (or argocd-webhook-secret in --notify-secrets-dir)")

	o = &notifyOptions{FluxURL: "http://x", FluxReceiver: "gitbroker", FluxTokenFile: filepath.Join(dir, notify.SecretFileFluxReceiver)}
	_, _, err = o.targets("", "gitbroker/rendered")
	require.ErrorContains(t, err, "want namespace/name")

	require.NoError(t, os.WriteFile(filepath.Join(dir, notify.SecretFileArgoCD), []byte("s"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, notify.SecretFileArgoCDCA), []byte("not a certificate"), 0o600))
	o = &notifyOptions{SecretsDir: dir, ArgoURL: "https://argocd-server.argocd.svc/api/webhook"}
	_, _, err = o.targets("https://git.example.com/fleet.git", "gitbroker/rendered")
	require.ErrorContains(t, err, "holds no PEM certificate")
}
