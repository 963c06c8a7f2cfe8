package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/publication"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// layout opens each writer's ref of one remote, as the commands do: the people's branch main,
// each node's gitbroker/inventory/<node>, gitbroker/status and gitbroker/rendered.
type layout struct {
	t    testing.TB
	url  string
	opts []gitsync.Option
}

func newLayout(t testing.TB, url string, opts ...gitsync.Option) layout {
	return layout{t: t, url: url, opts: opts}
}

func (l layout) open(branch string, extra ...gitsync.Option) *gitsync.Repository {
	l.t.Helper()
	r, err := gitsync.New(l.url, branch, append(append([]gitsync.Option(nil), l.opts...), extra...)...)
	require.NoError(l.t, err)
	return r
}

// agent returns the store and source of node's agent.
func (l layout) agent(node string, extra ...gitsync.Option) (store, source *gitsync.Repository) {
	return l.open(verify.InventoryBranch(node), append(extra, gitsync.WithCreateBranch())...), l.open("main")
}

// recorder returns the recorder's store.
func (l layout) recorder(extra ...gitsync.Option) *gitsync.Repository {
	return l.open(verify.StatusBranch, append(extra, gitsync.WithCreateBranch())...)
}

// renderer returns a renderer of main onto gitbroker/rendered, signing with signer when given.
// It is told that the repository has never been rendered (verify.Sources.FirstRender), as each
// test's repository is new; one that must not start from nothing turns it off.
func (l layout) renderer(signer *trust.Signer, extra ...gitsync.Option) *renderer.Renderer {
	if signer != nil {
		extra = append(extra, gitsync.WithSigner(signer))
	}
	r := &renderer.Renderer{
		Store:   l.open(verify.RenderedBranch, append(extra, gitsync.WithCreateBranch())...),
		Sources: verify.Sources{Main: l.open("main", extra...), SourceBranch: "main", Signatures: &verify.Signatures{}, FirstRender: true},
		Branch:  "main",
		Engine:  render.New(),
		Author:  gitsync.Signature{Name: "gitbroker-renderer", Email: "renderer@gitbroker.dev"},
		Now:     time.Now,
	}
	if signer != nil {
		r.Sources.Renderer = signer
		r.Published = l.open(verify.ConfigurationsBranch, append(extra, gitsync.WithCreateBranch(), gitsync.WithOwnHistory())...)
	}
	return r
}

// published returns what an agent given --renderer-key reads its Configurations from: the
// renderer's signed gitbroker/configurations, checked against allowedSigners.
func (l layout) published(allowedSigners string) *publication.Configurations {
	l.t.Helper()
	keys, err := publication.ParseRendererKeys("renderer.pub", []byte(allowedSigners))
	require.NoError(l.t, err)
	return &publication.Configurations{Repo: l.open(verify.ConfigurationsBranch), Keys: keys}
}

// acceptedTip is what a restarted writer given --renderer-key reads to name the tip of ref it
// replaces (cli.OwnRefOptions), checked against allowedSigners, read again at every Update.
// read are the options it reads with (the writer's limits).
func (l layout) acceptedTip(allowedSigners, ref string, read ...gitsync.Option) []gitsync.Option {
	l.t.Helper()
	keys, err := publication.ParseRendererKeys("renderer.pub", []byte(allowedSigners))
	require.NoError(l.t, err)
	return []gitsync.Option{gitsync.WithRecoverFrom(publication.AcceptedTip(l.open(api.AcceptedBranch(ref), read...), keys, ref)), gitsync.WithAcceptedRecheck(0)}
}

func allowingDeletions(r *renderer.Renderer) *renderer.Renderer {
	r.AllowDeletions = true
	return r
}
