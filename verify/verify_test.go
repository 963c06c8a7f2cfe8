package verify_test

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// One row per attack of the trust review that verify itself refuses (the end-to-end attacks,
// with the real agent, recorder and renderer, are cmd/gitbroker/attack_test.go). Each row starts
// from a repository whose writers all signed and which one render accepted, plays one attack
// against the real git server, and expects exactly one rejection: of that writer, on that
// ref, saying why, with the writer's verified part kept.

const echo = `apiVersion: akri.sh/v0
kind: Configuration
metadata:
  name: echo
spec:
  discoveryHandler:
    name: debugEcho
    discoveryDetails: |+
      descriptions: ["foo0"]
  brokerSpec:
    brokerPodSpec:
      containers:
      - name: broker
        image: nginx:stable-alpine
`

func inventory(node, device string) string {
	return fmt.Sprintf("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: %s\nspec:\n  configurations:\n  - name: echo\n    namespace: default\n    devices:\n    - id: %s\n      properties:\n        DEBUG_ECHO_DESCRIPTION: %s\n", node, device, device)
}

type fixture struct {
	t        *testing.T
	srv      *gitsynctest.Server
	keys     map[string]*trust.Signer
	keyFiles map[string]string
	allowed  string
	// pushed is the render commit pushed last (Sources.LastPushed); accepted is what that
	// render verified.
	pushed   string
	accepted *verify.Inputs
	// known holds the files of the renders pushed, as a render daemon keeps its last one
	// (Sources.Known): rendered/ and history/, and the inputs beside them.
	known map[string][2]render.Tree
	// limits, when set, bound what the renderer's readers fetch.
	limits gitsync.Option
	// allowDeletions renders as --allow-deletions does.
	allowDeletions bool
}

var principals = []string{"node:edge-a", "node:edge-b", "recorder", "renderer", "alice@example.com"}

func newFixture(t *testing.T) *fixture {
	_, err := exec.LookPath("ssh-keygen")
	require.NoError(t, err, "git signs with ssh-keygen: apt-get install openssh-client (.ci/run does)")
	f := &fixture{t: t, keys: map[string]*trust.Signer{}, keyFiles: map[string]string{}}
	dir := t.TempDir()
	for _, p := range principals {
		file := filepath.Join(dir, strings.ReplaceAll(p, ":", "-"))
		k, _, err := trust.LoadOrCreateSigner(file, p)
		require.NoError(t, err)
		f.keys[p], f.keyFiles[p] = k, file
		f.allowed += k.AllowedSignersLine(p) + "\n"
	}
	f.srv = gitsynctest.NewServer(t, "main", map[string]string{"configurations/echo.yaml": echo})
	f.person(map[string]string{verify.AllowedSignersPath: f.allowed}, "enroll the writers")
	f.write("node:edge-a", verify.InventoryBranch("edge-a"), api.InventoryPath("edge-a"), inventory("edge-a", "a0"))
	f.write("node:edge-b", verify.InventoryBranch("edge-b"), api.InventoryPath("edge-b"), inventory("edge-b", "b0"))
	f.write("recorder", verify.StatusBranch, "status/jobs/default/job-1.yaml", "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\n")
	in := f.render()
	require.Empty(t, in.Rejections)
	return f
}

func (f *fixture) person(files map[string]string, msg string) string {
	return f.srv.CommitSigned(f.keyFiles["alice@example.com"], files, nil, msg)
}

// write commits one file on branch, signed as principal, on top of whatever the branch holds.
func (f *fixture) write(principal, branch, path, content string) string {
	f.t.Helper()
	r, err := gitsync.New(f.srv.URL(), branch, gitsync.WithSigner(f.keys[principal]), gitsync.WithCreateBranch())
	require.NoError(f.t, err)
	res, err := r.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Owned: []string{path}, Files: map[string][]byte{path: []byte(content)}, Message: "write " + path,
			Author: gitsync.Signature{Name: principal, Email: "w@example.com", When: time.Now()}}, nil
	})
	require.NoError(f.t, err)
	return res.Commit
}

func (f *fixture) open(branch string) *gitsync.Repository {
	f.t.Helper()
	var opts []gitsync.Option
	if f.limits != nil {
		opts = append(opts, f.limits)
	}
	r, err := gitsync.New(f.srv.URL(), branch, opts...)
	require.NoError(f.t, err)
	return r
}

// collect verifies the inputs of the next render.
func (f *fixture) collect() *verify.Inputs {
	f.t.Helper()
	head, err := f.open(verify.RenderedBranch).Snapshot(context.Background())
	if err != nil {
		require.ErrorIs(f.t, err, gitsync.ErrNoBranch)
		head = emptySnapshot{}
	}
	in, err := verify.Collect(context.Background(), verify.Sources{Main: f.open("main"), SourceBranch: "main",
		Renderer: f.keys["renderer"], LastPushed: f.pushed, FirstRender: true,
		Known: func(commit string) (rendered, inputs map[string][]byte, ok bool) {
			k, ok := f.known[commit]
			return k[0], k[1], ok
		}}, head)
	require.NoError(f.t, err)
	return in
}

// render collects, renders and pushes the render commit as the renderer does, and returns
// what it verified.
func (f *fixture) render() *verify.Inputs {
	f.t.Helper()
	in := f.collect()
	res := render.New().Render(render.Request{Files: maps.Clone(in.Inputs), Previous: in.Rendered, SourceCommit: in.Source,
		Writers: in.Writers, RenderedJobsOnly: in.Verified, Trust: in.Trust, Untrusted: in.Untrusted, AllowDeletions: f.allowDeletions})
	require.Nil(f.t, res.Refused)
	files := maps.Clone(res.Files)
	maps.Copy(files, in.Inputs)
	r, err := gitsync.New(f.srv.URL(), verify.RenderedBranch, gitsync.WithSigner(f.keys["renderer"]), gitsync.WithCreateBranch())
	require.NoError(f.t, err)
	out, err := r.Update(context.Background(), func(_ context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		all, err := head.Files("")
		if err != nil {
			return nil, err
		}
		owned := []string{"rendered/", "history/", "configurations/", "inventory/", "status/", ".gitbroker/", api.SettingsPath}
		for p := range all {
			owned = append(owned, p)
		}
		return &gitsync.Change{Owned: owned, Files: files, Message: "render",
			Trailers: []gitsync.Trailer{{Key: api.TrailerSourceCommit, Value: in.Source}},
			Author:   gitsync.Signature{Name: "renderer", Email: "r@example.com", When: time.Now()}}, nil
	})
	require.NoError(f.t, err)
	f.pushed, f.accepted = out.Commit, in
	if f.known == nil {
		f.known = map[string][2]render.Tree{}
	}
	f.known[out.Commit] = [2]render.Tree{res.Files, in.Inputs}
	return in
}

type emptySnapshot struct{}

func (emptySnapshot) Commit() string        { return "" }
func (emptySnapshot) CommitTime() time.Time { return time.Time{} }
func (emptySnapshot) ReadFile(string) ([]byte, error) {
	return nil, fmt.Errorf("empty: %w", fs.ErrNotExist)
}
func (emptySnapshot) Files(string) (map[string][]byte, error) { return map[string][]byte{}, nil }

// attack is one row of TestCollectRejectsEachAttack: played on a repository one render
// accepted, it must be refused as the writer's ref, for why.
type attack struct {
	name             string
	attack           func(f *fixture)
	writer, ref, why string
	// decommissioned: the node's inventory is dropped, not kept.
	decommissioned bool
}

// attacks are the rows, one per attack the trust review found (docs/TRUST.md).
func attacks() []attack {
	edgeB := verify.InventoryBranch("edge-b")
	return []attack{
		{name: "a node writes another node's inventory", writer: "node:edge-b", ref: edgeB, why: "not by node:edge-b",
			attack: func(f *fixture) {
				f.write("node:edge-a", edgeB, api.InventoryPath("edge-b"), inventory("edge-b", "forged"))
			}},
		{name: "a node's old commit replayed", writer: "node:edge-b", ref: edgeB, why: "does not descend from",
			attack: func(f *fixture) {
				old := f.srv.On(edgeB).Head()
				f.write("node:edge-b", edgeB, api.InventoryPath("edge-b"), inventory("edge-b", "b1"))
				f.render()
				f.srv.SetRef(edgeB, old)
			}},
		{name: "a commit planted below the node's signed tip", writer: "node:edge-b", ref: edgeB, why: "is not the writer's",
			attack: func(f *fixture) {
				f.srv.On(edgeB).Commit(map[string]string{api.InventoryPath("edge-b"): inventory("edge-b", "planted")}, nil, "planted")
				f.write("node:edge-b", edgeB, api.InventoryPath("edge-b"), inventory("edge-b", "planted2"))
			}},
		{name: "a file beside a node's inventory", writer: "node:edge-b", ref: edgeB, why: "a node's ref may hold only",
			attack: func(f *fixture) {
				f.write("node:edge-b", edgeB, "inventory/edge-c.yaml", inventory("edge-c", "c0"))
			}},
		{name: "a gitlink beside a node's inventory", writer: "node:edge-b", ref: edgeB, why: "not a file",
			attack: func(f *fixture) {
				f.srv.On(edgeB).AddGitlink(f.keyFiles["node:edge-b"], "inventory/edge-c.yaml", f.srv.Head(), "a submodule")
			}},
		{name: "a node ref too large to read", writer: "node:edge-b", ref: edgeB, why: "larger than the configured limit",
			attack: func(f *fixture) {
				f.write("node:edge-b", edgeB, api.InventoryPath("edge-b"), inventory("edge-b", strings.Repeat("x", 64<<10)))
				f.limits = gitsync.WithLimits(0, 32<<10)
			}},
		{name: "a revoked node key", writer: "node:edge-b", ref: edgeB, why: "revokes: the node is decommissioned", decommissioned: true,
			attack: func(f *fixture) {
				f.person(map[string]string{verify.RevokedKeysPath: f.keys["node:edge-b"].AllowedSignersLine("x")[2:] + "\n"}, "retire edge-b's key")
				f.write("node:edge-b", edgeB, api.InventoryPath("edge-b"), inventory("edge-b", "b1"))
			}},
		{name: "a node's ref deleted while it is enrolled", writer: "node:edge-b", ref: edgeB, why: "the ref is gone",
			attack: func(f *fixture) { f.srv.SetRef(edgeB, "") }},
		{name: "a ref that names no node", writer: "node:Edge_X", ref: verify.InventoryBranch("Edge_X"), why: "is not a node name",
			attack: func(f *fixture) {
				f.write("node:edge-a", verify.InventoryBranch("Edge_X"), "inventory/Edge_X.yaml", "x")
			}},
		{name: "an unsigned commit on the source branch", writer: verify.WriterPeople, ref: "main", why: "is not signed by a person",
			attack: func(f *fixture) {
				f.srv.Commit(map[string]string{"configurations/echo.yaml": strings.Replace(echo, "stable-alpine", "evil", 1)}, nil, "unsigned")
			}},
		{name: "a commit signed by a node on the source branch", writer: verify.WriterPeople, ref: "main", why: "which is not a person",
			attack: func(f *fixture) { f.write("node:edge-a", "main", "configurations/x.yaml", echo) }},
		{name: "signed work in progress pushed onto a bound branch", writer: verify.WriterPeople, ref: "main", why: "bound to no branch",
			attack: func(f *fixture) {
				f.person(map[string]string{verify.TrustPath: "apiVersion: gitbroker.dev/v1alpha1\nkind: Trust\nspec:\n  sourceBranch: bound\n"}, "bind\n\n"+verify.TrailerBranch+": main")
				f.render()
				f.person(map[string]string{"configurations/echo.yaml": strings.Replace(echo, "stable-alpine", "wip", 1)}, "WIP")
			}},
		{name: "a record written with a node's key", writer: verify.WriterRecorder, ref: verify.StatusBranch, why: "not by recorder",
			attack: func(f *fixture) {
				f.write("node:edge-a", verify.StatusBranch, "status/jobs/default/job-2.yaml", "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\n")
			}},
		{name: "a file outside status/jobs/ on the recorder's ref", writer: verify.WriterRecorder, ref: verify.StatusBranch, why: "may hold only status/jobs/",
			attack: func(f *fixture) {
				f.write("recorder", verify.StatusBranch, "inventory/edge-a.yaml", inventory("edge-a", "x"))
			}},
		{name: "a rollout record written with a node's key, to start the next wave early", writer: verify.WriterRecorder, ref: verify.StatusBranch, why: "not by recorder",
			attack: func(f *fixture) {
				f.write("node:edge-a", verify.StatusBranch, api.RolloutPath("default", "cam-1"), "apiVersion: gitbroker.dev/v1alpha1\nkind: RolloutRecord\n")
			}},
		{name: "a folder under status/rollouts/<namespace>/ on the recorder's ref", writer: verify.WriterRecorder, ref: verify.StatusBranch, why: "may hold only status/jobs/<namespace>/<job>.yaml, status/nodes/<node>.yaml and status/rollouts/<namespace>/<deployment>.yaml",
			attack: func(f *fixture) {
				f.write("recorder", verify.StatusBranch, "status/rollouts/default/cam/x.yaml", "apiVersion: gitbroker.dev/v1alpha1\nkind: RolloutRecord\n")
			}},
		{name: "a folder under status/nodes/ on the recorder's ref", writer: verify.WriterRecorder, ref: verify.StatusBranch, why: "may hold only status/jobs/<namespace>/<job>.yaml, status/nodes/<node>.yaml",
			attack: func(f *fixture) {
				f.write("recorder", verify.StatusBranch, "status/nodes/edge-a/x.yaml", "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeLoss\n")
			}},
		{name: "an older render pushed back", writer: verify.WriterRenderer, ref: verify.RenderedBranch, why: "this renderer pushed",
			attack: func(f *fixture) {
				old := f.srv.On(verify.RenderedBranch).Head()
				f.write("node:edge-b", edgeB, api.InventoryPath("edge-b"), inventory("edge-b", "b1"))
				f.render()
				f.srv.SetRef(verify.RenderedBranch, old)
			}},
		{name: "a commit of the renderer's key that is not a render", writer: verify.WriterRenderer, ref: verify.RenderedBranch, why: "is not a render signed by this renderer",
			attack: func(f *fixture) {
				f.write("renderer", verify.RenderedBranch, "rendered/kustomization.yaml", "resources: []\n")
				f.pushed = ""
			}},
	}
}

func TestCollectRejectsEachAttack(t *testing.T) {
	tests := attacks()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.attack(f)
			before := f.accepted
			in := f.collect()
			require.Len(t, in.Rejections, 1, "%v", in.Untrusted)
			r := in.Rejections[0]
			require.Equal(t, tt.writer, r.Writer)
			require.Equal(t, tt.ref, r.Ref)
			require.Contains(t, r.Reason, tt.why)
			require.Equal(t, []string{r.String()}, in.Untrusted)
			if tt.decommissioned {
				require.NotContains(t, in.Inputs, api.InventoryPath(strings.TrimPrefix(tt.writer, "node:")), "a revoked node's inventory is dropped")
				require.NotContains(t, in.Writers, tt.ref)
			} else if strings.HasPrefix(tt.writer, "node:edge-") {
				p := api.InventoryPath(strings.TrimPrefix(tt.writer, "node:"))
				require.Equal(t, string(before.Inputs[p]), string(in.Inputs[p]), "the node's verified inventory is kept")
				require.Equal(t, before.Writers[tt.ref], in.Writers[tt.ref], "and its accepted tip")
			}
		})
	}
}

// The accept path: each writer moves its own ref (and the people their branch), signed with its
// own key, and the next render takes every one of them, names each new tip, and rejects nothing;
// the render after it, with nothing new, is the same verified inputs again.
func TestCollectAcceptsEachWritersOwnCommits(t *testing.T) {
	f := newFixture(t)
	before := f.accepted
	a := f.write("node:edge-a", verify.InventoryBranch("edge-a"), api.InventoryPath("edge-a"), inventory("edge-a", "a1"))
	b := f.write("node:edge-b", verify.InventoryBranch("edge-b"), api.InventoryPath("edge-b"), inventory("edge-b", "b1"))
	rec := f.write("recorder", verify.StatusBranch, "status/jobs/default/job-2.yaml", "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\n")
	source := f.person(map[string]string{"configurations/echo.yaml": echo + "# reviewed\n"}, "a reviewed change")

	in := f.render()
	require.Empty(t, in.Rejections)
	require.Empty(t, in.Untrusted)
	require.True(t, in.Verified)
	require.Equal(t, source, in.Source, "the people's signed head is the source")
	require.Equal(t, source, in.SourceTip)
	require.Equal(t, map[string]string{verify.InventoryBranch("edge-a"): a, verify.InventoryBranch("edge-b"): b, verify.StatusBranch: rec}, in.Writers)
	require.Contains(t, string(in.Inputs[api.InventoryPath("edge-a")]), "id: a1")
	require.Contains(t, string(in.Inputs[api.InventoryPath("edge-b")]), "id: b1")
	require.Contains(t, in.Inputs, "status/jobs/default/job-1.yaml", "the recorder's earlier record stays")
	require.Contains(t, in.Inputs, "status/jobs/default/job-2.yaml")
	require.Contains(t, string(in.Inputs["configurations/echo.yaml"]), "# reviewed")
	require.NotEqual(t, before.Writers, in.Writers)
	require.False(t, in.Overwrite, "the rendered branch's head is the renderer's own render")
	require.NotNil(t, in.Own)

	again := f.collect()
	require.Empty(t, again.Rejections)
	require.Equal(t, in.Writers, again.Writers)
	require.Equal(t, in.Source, again.Source)
	require.Equal(t, f.pushed, again.Previous, "the next render starts from the render pushed last")
	for p, b := range in.Inputs {
		require.Equal(t, string(b), string(again.Inputs[p]), p)
	}
}
