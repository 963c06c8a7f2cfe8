package publication_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/publication"
	"github.com/gitbroker/gitbroker/trust"
)

// What the renderer publishes is read from a real git server, with commits signed as git signs
// them, by an agent that pins the renderer's key: the renderer's key and its marks are the only
// things taken; whatever else is pushed on the branches stands in for nothing.

// fixture is a git server and the keys of the renderer and of one node, the attacker here.
type fixture struct {
	t      *testing.T
	srv    *gitsynctest.Server
	keys   map[string]*trust.Signer
	pinned *publication.RendererKeys
	// when is the last commit's time: commits a second apart, as renders are; at is each
	// commit's.
	when time.Time
	at   map[string]time.Time
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, srv: gitsynctest.NewServer(t, "main", map[string]string{"README.md": "the people's branch\n"}),
		keys: map[string]*trust.Signer{}, at: map[string]time.Time{}, when: time.Now().Add(-time.Hour).Truncate(time.Second)}
	dir := t.TempDir()
	for _, p := range []string{trust.PrincipalRenderer, trust.NodePrincipal("edge-a")} {
		k, _, err := trust.LoadOrCreateSigner(filepath.Join(dir, p), p)
		require.NoError(t, err)
		f.keys[p] = k
	}
	keys, err := publication.ParseRendererKeys("renderer.pub", []byte(f.keys[trust.PrincipalRenderer].AllowedSignersLine(trust.PrincipalRenderer)+"\n"))
	require.NoError(t, err)
	f.pinned = keys
	return f
}

func (f *fixture) repo(branch string, opts ...gitsync.Option) *gitsync.Repository {
	r, err := gitsync.New(f.srv.URL(), branch, opts...)
	require.NoError(f.t, err)
	return r
}

// commit pushes files on branch, signed as principal, with trailers.
func (f *fixture) commit(principal, branch string, files map[string]string, trailers ...gitsync.Trailer) string {
	f.t.Helper()
	f.when = f.when.Add(time.Second)
	w := f.repo(branch, gitsync.WithSigner(f.keys[principal]), gitsync.WithCreateBranch())
	tree, owned := map[string][]byte{}, []string{}
	for p, s := range files {
		tree[p], owned = []byte(s), append(owned, p)
	}
	res, err := w.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Owned: owned, Files: tree, Message: "by " + principal, Trailers: trailers, Overwrite: true,
			Author: gitsync.Signature{Name: principal, Email: "x@example.com", When: f.when}}, nil
	})
	require.NoError(f.t, err)
	f.at[res.Commit] = f.when
	return res.Commit
}

func configuration(version string) string {
	return "apiVersion: akri.sh/v0\nkind: Configuration\nmetadata:\n  name: cam\nspec:\n  discoveryHandler:\n    name: debugEcho\n    discoveryDetails: \"descriptions: [" + version + "]\"\n"
}

// publish is a publication as the renderer makes it: signed, marked, with a file it never
// publishes beside.
func (f *fixture) publish(version string) string {
	return f.commit(trust.PrincipalRenderer, api.ConfigurationsBranch, map[string]string{
		"configurations/cam.yaml": configuration(version), api.SettingsPath: "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec: {}\n",
		"inventory/edge-a.yaml": "never published\n",
	}, gitsync.Trailer{Key: api.TrailerConfigurations, Value: "source-" + version})
}

func read(t *testing.T, snap gitsync.Snapshot, name string) string {
	t.Helper()
	b, err := snap.ReadFile(name)
	require.NoError(t, err, name)
	return string(b)
}

func TestRendererKeysNameTheRenderer(t *testing.T) {
	f := newFixture(t)
	_, err := publication.ParseRendererKeys("node.pub", []byte(f.keys[trust.NodePrincipal("edge-a")].AllowedSignersLine(trust.NodePrincipal("edge-a"))+"\n"))
	require.ErrorContains(t, err, "node.pub: names no key for principal renderer", "a file that names no renderer key would trust nothing")
	_, err = publication.ParseRendererKeys("empty.pub", nil)
	require.Error(t, err)
}

// The agent takes the renderer's marked publications only: its Configurations and settings,
// never another file; a commit pushed on top with another key, one the renderer signed without
// the mark, and an older publication put back are each refused, and the one taken last stands.
func TestConfigurationsTakesOnlyTheRenderersPublications(t *testing.T) {
	f := newFixture(t)
	p := &publication.Configurations{Repo: f.repo(api.ConfigurationsBranch), Keys: f.pinned}
	_, err := p.Snapshot(t.Context())
	require.ErrorIs(t, err, gitsync.ErrNoBranch, "nothing published yet")

	first := f.publish("v1")
	snap, err := p.Snapshot(t.Context())
	require.NoError(t, err)
	require.Contains(t, read(t, snap, "configurations/cam.yaml"), "v1")
	require.Contains(t, read(t, snap, api.SettingsPath), "Settings")
	_, err = snap.ReadFile("inventory/edge-a.yaml")
	require.Error(t, err, "only what the renderer publishes is read")
	used, _ := p.Used()
	require.Equal(t, first, used)

	second := f.publish("v2")
	for _, attack := range []struct {
		name, why string
		push      func() string
	}{
		{"pushed with a node's key", "does not list as renderer", func() string {
			return f.commit(trust.NodePrincipal("edge-a"), api.ConfigurationsBranch, map[string]string{"configurations/cam.yaml": configuration("evil")},
				gitsync.Trailer{Key: api.TrailerConfigurations, Value: "x"})
		}},
		{"signed by the renderer, not a publication", "not as published Configurations", func() string {
			return f.commit(trust.PrincipalRenderer, api.ConfigurationsBranch, map[string]string{"configurations/cam.yaml": configuration("render")})
		}},
		{"an older publication put back", "a rollback", func() string { f.srv.SetRef(api.ConfigurationsBranch, first); return first }},
	} {
		t.Run(attack.name, func(t *testing.T) {
			f.srv.SetRef(api.ConfigurationsBranch, second)
			snap, err := p.Snapshot(t.Context())
			require.NoError(t, err)
			require.Contains(t, read(t, snap, "configurations/cam.yaml"), "v2")

			head := attack.push()
			snap, err = p.Snapshot(t.Context())
			var refused *publication.RefusedError
			require.ErrorAs(t, err, &refused)
			require.Equal(t, head, refused.Commit)
			require.ErrorContains(t, err, attack.why)
			require.Contains(t, p.Refused(), attack.why)
			require.Contains(t, read(t, snap, "configurations/cam.yaml"), "v2", "the publication taken last stands in")
		})
	}

	// A restarted agent has taken nothing yet: its floor, the publication its own last commit
	// used, refuses an older one all the same.
	restarted := &publication.Configurations{Repo: f.repo(api.ConfigurationsBranch), Keys: f.pinned}
	restarted.SetFloor(second, f.at[second])
	f.srv.SetRef(api.ConfigurationsBranch, first)
	snap, err = restarted.Snapshot(t.Context())
	require.ErrorContains(t, err, "the publication this node's own last commit used")
	require.Nil(t, snap, "nothing taken yet, nothing to stand in")
	f.srv.SetRef(api.ConfigurationsBranch, second)
	snap, err = restarted.Snapshot(t.Context())
	require.NoError(t, err)
	require.Contains(t, read(t, snap, "configurations/cam.yaml"), "v2")
	require.Empty(t, restarted.Refused())
}

// shard pushes an accepted-tips shard as the renderer's next render does: the shard's folder,
// shown by a commit the companion trailer marks, signed as principal.
func (f *fixture) shard(principal, ref string, tip string, shares string) string {
	name := api.AcceptedShard(ref)
	files := map[string]string{api.AcceptedFile(name): fmt.Sprintf("apiVersion: gitbroker.dev/v1alpha1\nkind: AcceptedTips\nwriters:\n  %s: %s\n", ref, tip)}
	if shares != "" {
		files[api.SharesFile(name)] = shares
	}
	return f.commit(principal, api.AcceptedBranch(ref), files, gitsync.Trailer{Key: gitsync.TrailerCompanion, Value: api.AcceptedFolder(name)})
}

// A writer starting a new line names the tip its shard says the renderer accepted, read only
// from a head the renderer signed that shows that shard.
func TestAcceptedTipIsReadOnlyFromTheRenderersShard(t *testing.T) {
	f := newFixture(t)
	ref := api.InventoryBranch("edge-a")
	tip := publication.AcceptedTip(f.repo(api.AcceptedBranch(ref)), f.pinned, ref)
	got, err := tip(t.Context())
	require.NoError(t, err)
	require.Empty(t, got, "no shard yet: nothing of the ref was accepted")

	accepted := "0123456789abcdef0123456789abcdef01234567"
	f.shard(trust.PrincipalRenderer, ref, accepted, "")
	got, err = tip(t.Context())
	require.NoError(t, err)
	require.Equal(t, accepted, got)

	f.shard(trust.NodePrincipal("edge-a"), ref, "89abcdef0123456789abcdef0123456789abcdef", "")
	_, err = tip(t.Context())
	require.ErrorContains(t, err, "is not the renderer's")

	f.commit(trust.PrincipalRenderer, api.AcceptedBranch(ref), map[string]string{api.AcceptedFile(api.AcceptedShard(ref)): "writers:\n  " + ref + ": " + accepted + "\n"},
		gitsync.Trailer{Key: gitsync.TrailerCompanion, Value: "rendered/another-folder"})
	_, err = tip(t.Context())
	require.ErrorContains(t, err, "does not show", "a renderer's commit of another folder is not the shard")

	_, err = publication.AcceptedTip(f.repo(api.AcceptedBranch(ref)), nil, ref)(t.Context())
	require.ErrorContains(t, err, "no renderer key")
}

// A node's shares are read from its shard as the accepted tip is, and an older shard put back
// is refused: its shares were the renderer's once, not now.
func TestSharesRefuseAnOlderShard(t *testing.T) {
	f := newFixture(t)
	ref := api.InventoryBranch("edge-a")
	shares := func(slots int) string {
		return fmt.Sprintf("apiVersion: gitbroker.dev/v1alpha1\nkind: DeviceShares\nnodes:\n  edge-a:\n    cam-0: %d\n", slots)
	}
	read := publication.Shares(f.repo(api.AcceptedBranch(ref)), f.pinned, "edge-a")
	got, err := read(t.Context())
	require.NoError(t, err)
	require.Empty(t, got)

	old := f.shard(trust.PrincipalRenderer, ref, "0123456789abcdef0123456789abcdef01234567", shares(1))
	got, err = read(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"cam-0": 1}, got)
	f.shard(trust.PrincipalRenderer, ref, "0123456789abcdef0123456789abcdef01234567", shares(3))
	got, err = read(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"cam-0": 3}, got)

	f.srv.SetRef(api.AcceptedBranch(ref), old)
	_, err = read(t.Context())
	require.ErrorContains(t, err, "an older shard put back")
	f.srv.SetRef(api.AcceptedBranch(ref), "")
	_, err = read(t.Context())
	require.ErrorContains(t, err, "is gone since")
}
