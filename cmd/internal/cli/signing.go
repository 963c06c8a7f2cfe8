package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/publication"
	"github.com/gitbroker/gitbroker/trust"
)

// FlagSigningKey names every writer's signing key.
const FlagSigningKey = "signing-key"

// SigningOptions is how a writer signs its commits.
type SigningOptions struct {
	Key string
}

// BindFlags registers --signing-key; what names the key differs by writer, so each says.
func (o *SigningOptions) BindFlags(fs *pflag.FlagSet, usage string) {
	fs.StringVar(&o.Key, FlagSigningKey, "", usage)
}

// Options returns the gitsync options that sign every commit with the key, loaded (or, with
// create, made on first start) once at start. principal is the allowed_signers principal the
// writer signs as; the line that enrolls a new key is logged for a person to commit.
func (o *SigningOptions) Options(log logr.Logger, principal string, create bool) ([]gitsync.Option, error) {
	s, err := o.Load(log, principal, create)
	if err != nil || s == nil {
		return nil, err
	}
	return []gitsync.Option{gitsync.WithSigner(s)}, nil
}

// Load returns the signer, or nil without --signing-key.
func (o *SigningOptions) Load(log logr.Logger, principal string, create bool) (*trust.Signer, error) {
	if o.Key == "" {
		return nil, nil
	}
	if data, err := os.ReadFile(o.Key); err == nil && trust.IsOpenPGPPrivateKey(data) {
		return nil, fmt.Errorf("--%s: %s is an OpenPGP key; only the renderer may sign with OpenPGP (for Argo CD), the %s signs with an OpenSSH key, which .gitbroker/allowed_signers enrolls", FlagSigningKey, o.Key, principal)
	}
	var s *trust.Signer
	var created bool
	var err error
	if create {
		s, created, err = trust.LoadOrCreateSigner(o.Key, principal)
	} else {
		s, err = trust.LoadSigner(o.Key)
	}
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", FlagSigningKey, err)
	}
	if created {
		log.Info("made a new signing key; enroll it by adding this line to .gitbroker/allowed_signers on the source branch",
			"key", o.Key, "allowedSigners", s.AllowedSignersLine(principal))
	}
	return s, nil
}

// LoadRenderer loads the renderer's key, of either kind: an OpenSSH key (what Flux verifies,
// and allowed_signers lists as renderer) or an armored OpenPGP key (what Argo CD verifies, and
// .gitbroker/renderer-keys/ lists). It is nil without --signing-key.
func (o *SigningOptions) LoadRenderer() (trust.Identity, error) {
	if o.Key == "" {
		return nil, nil
	}
	if data, err := os.ReadFile(o.Key); err == nil && trust.IsOpenPGPPrivateKey(data) {
		k, err := trust.LoadOpenPGPSigner(o.Key)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", FlagSigningKey, err)
		}
		return k, nil
	}
	k, err := o.Load(logr.Discard(), trust.PrincipalRenderer, false)
	if err != nil {
		return nil, err
	}
	return k, nil
}

// OwnRefOptions are the gitsync options of a writer that signs its own ref (the agent, the
// recorder): it reads and builds only on what it signed itself (gitsync.WithOwnHistory), so a
// commit someone else pushed there is dropped, never signed; and should its ref be gone or
// moved back when it starts, its new line names the tip of ref the renderer accepted, read
// from ref's accepted-tips shard (api.AcceptedBranch), only at a commit of that shard the
// pinned renderer key signed (publication.AcceptedTip), and read again until it sees its line
// accepted. That branch is opened only then, and let go after.
// read are the options to read main with (credentials, limits, logger).
func OwnRefOptions(main gitsync.RemoteFlags, ref string, renderer *publication.RendererKeys, read ...gitsync.Option) []gitsync.Option {
	main.Branch = api.AcceptedBranch(ref)
	accepted := func(ctx context.Context) (string, error) {
		shard, err := main.Open(read...)
		if err != nil {
			return "", err
		}
		return publication.AcceptedTip(shard, renderer, ref)(ctx)
	}
	return []gitsync.Option{gitsync.WithOwnHistory(), gitsync.WithRecoverFrom(accepted)}
}

// LoadRendererKeys reads the renderer's pinned public key (--renderer-key).
func LoadRendererKeys(file string) (*publication.RendererKeys, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", FlagRendererKey, err)
	}
	keys, err := publication.ParseRendererKeys(file, data)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", FlagRendererKey, err)
	}
	return keys, nil
}
