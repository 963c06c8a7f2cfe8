package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// enrollOptions are enroll's flags.
type enrollOptions struct {
	Node      string
	Principal string
	Key       string
	Dir       string
}

func newEnrollCommand() *cobra.Command {
	o := &enrollOptions{}
	cmd := &cobra.Command{
		Use:   "enroll",
		Short: "Print, or add to a work tree, the allowed_signers line that enrolls a writer's key",
		Long: `Enroll turns a writer's public key into its line of .gitbroker/allowed_signers: node:<node> for
an agent (--node), renderer or recorder (--principal). The key is the .pub file next to the
writer's signing key (an agent makes /var/lib/gitbroker/signing-key.pub on its node at first start,
and logs the same line), or its certificate (<key>-cert.pub), whose line names the CA
(cert-authority) and so enrolls every key that CA certifies for the principal.

With --dir it appends the line to that work tree's .gitbroker/allowed_signers, unless the file
already holds it, and checks the file still parses. It never commits: the enrolment is a
signed, reviewed commit on the people's branch, like any other change to who may write.`,
		Example: `  gitbroker enroll --node edge-a --key edge-a-signing-key.pub
  gitbroker enroll --node edge-a --key /var/lib/gitbroker/signing-key.pub --dir edge   # then commit it, signed
  gitbroker enroll --principal renderer --key renderer-signing-key.pub --dir edge`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Node, "node", "", "the agent's node: enroll the key as node:<node>")
	fs.StringVar(&o.Principal, "principal", "", "renderer, recorder, or recorder:<cluster> for the recorder of one cluster of gitbroker.yaml's spec.clusters (instead of --node)")
	fs.StringVar(&o.Key, "key", "", "the writer's public key (<signing-key>.pub) or certificate (<signing-key>-cert.pub)")
	fs.StringVar(&o.Dir, "dir", "", "append the line to this work tree's "+verify.AllowedSignersPath+" instead of only printing it")
	return cmd
}

func (o *enrollOptions) run(cmd *cobra.Command) error {
	principal, err := o.principal()
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	if o.Key == "" {
		return exitf(exitInvalid, "--key is required: the writer's public key or certificate")
	}
	line, err := allowedSignersLine(o.Key, principal)
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	if o.Dir == "" {
		fmt.Fprintln(cmd.OutOrStdout(), line)
		return nil
	}
	added, err := appendAllowedSigner(o.Dir, line)
	if err != nil {
		return exitf(exitInvalid, "%v", err)
	}
	path := filepath.Join(o.Dir, filepath.FromSlash(verify.AllowedSignersPath))
	if !added {
		fmt.Fprintf(cmd.OutOrStdout(), "%s already enrolls %s with this key: %s\n", path, principal, line)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "added to %s: %s\ncommit it, signed, for review: git -C %s commit -S -m \"enroll %s\" %s\n",
		path, line, o.Dir, principal, verify.AllowedSignersPath)
	return nil
}

func (o *enrollOptions) principal() (string, error) {
	switch {
	case o.Node != "" && o.Principal != "":
		return "", errors.New("give --node or --principal, not both")
	case o.Node != "":
		if err := agent.ValidateNodeName(o.Node); err != nil {
			return "", fmt.Errorf("--node: %w", err)
		}
		return trust.NodePrincipal(o.Node), nil
	case o.Principal == trust.PrincipalRenderer || o.Principal == trust.PrincipalRecorder:
		return o.Principal, nil
	case strings.HasPrefix(o.Principal, trust.PrincipalRecorderPrefix):
		if err := api.CheckClusterName(strings.TrimPrefix(o.Principal, trust.PrincipalRecorderPrefix)); err != nil {
			return "", fmt.Errorf("--principal %q: %v", o.Principal, err)
		}
		return o.Principal, nil
	case o.Principal != "":
		return "", fmt.Errorf("--principal %q: gitbroker's writers are renderer, recorder (recorder:<cluster> with spec.clusters) and node:<node> (--node); people enroll their own keys by e-mail", o.Principal)
	}
	return "", errors.New("--node or --principal is required: who the key signs as")
}

// allowedSignersLine reads a public key or certificate file and returns its line for principal.
func allowedSignersLine(file, principal string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--key: %w", err)
	}
	if bytes.Contains(data, []byte("PRIVATE KEY")) {
		return "", fmt.Errorf("--key %s is a private key: give its public key (%s.pub), which is all enrolment needs", file, file)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(data)
	if err != nil {
		return "", fmt.Errorf("--key %s is not an OpenSSH public key or certificate: %v", file, err)
	}
	cert, ok := pub.(*ssh.Certificate)
	if !ok {
		return principal + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))), nil
	}
	if cert.CertType != ssh.UserCert {
		return "", fmt.Errorf("--key %s is a host certificate; git verifies user certificates only", file)
	}
	if !slices.Contains(cert.ValidPrincipals, principal) {
		return "", fmt.Errorf("--key %s certifies %q, not %s: ssh-keygen -s <ca> -n %s", file, cert.ValidPrincipals, principal, principal)
	}
	return principal + " cert-authority " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert.SignatureKey))), nil
}

// appendAllowedSigner adds line to dir's allowed_signers unless it is there; the file must be a
// regular file (never written through a symlink) and must parse afterwards.
func appendAllowedSigner(dir, line string) (bool, error) {
	path := filepath.Join(dir, filepath.FromSlash(verify.AllowedSignersPath))
	if err := isRepository(dir); err != nil {
		return false, err
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return false, err
		}
	case err != nil:
		return false, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Join(strings.Fields(l), " ") == line {
			return false, nil
		}
	}
	if fi, err := os.Lstat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return false, fmt.Errorf("%s is not a folder; not writing through it", filepath.Dir(path))
	}
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return false, fmt.Errorf("%s is not a regular file; not writing through it", path)
	}
	next := data
	if len(next) > 0 && !bytes.HasSuffix(next, []byte("\n")) {
		next = append(next, '\n')
	}
	next = append(next, line+"\n"...)
	if _, err := trust.ParseAllowedSigners(verify.AllowedSignersPath, next); err != nil {
		return false, err
	}
	if err := os.WriteFile(path, next, 0o644); err != nil {
		return false, err
	}
	return true, nil
}
