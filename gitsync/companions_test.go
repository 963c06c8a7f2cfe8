package gitsync_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// rev is what the server's branch points at, or "" when it does not exist.
func rev(t *testing.T, srv *gitsynctest.Server, branch string) string {
	t.Helper()
	out := gitsynctest.Git(t, srv.Bare(), "for-each-ref", "--format=%(objectname)", "refs/heads/"+branch)
	return strings.TrimSpace(out)
}

// folders writes rendered/ with the given folders' files and names one companion per folder.
func folders(files map[string]string, companions map[string]string, keep func(*gitsync.Commit) bool) gitsync.UpdateFunc {
	return func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		c := change([]string{"rendered/"}, files)
		c.Message = "render"
		c.CompanionPrefixes = []string{"folders/"}
		c.Companions = companions
		c.KeepCompanion = keep
		return c, nil
	}
}

// shows returns the files of a branch's tip, and checks that it is one commit with no parent.
func shows(t *testing.T, srv *gitsynctest.Server, branch string) []string {
	t.Helper()
	parents := strings.Fields(gitsynctest.Git(t, srv.Bare(), "rev-list", "--parents", "-n", "1", "refs/heads/"+branch))
	require.Len(t, parents, 1, "%s is one commit of its own", branch)
	return strings.Fields(gitsynctest.Git(t, srv.Bare(), "ls-tree", "-r", "--name-only", "refs/heads/"+branch))
}

func TestCompanionsMoveOnlyWithTheirFolder(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	ctx := context.Background()
	companions := map[string]string{"folders/x": "rendered/default/x", "folders/y": "rendered/default/y"}
	files := map[string]string{
		"rendered/default/x/pod-a.yaml": "pod: a\n",
		"rendered/default/y/pod-c.yaml": "pod: c\n",
		"rendered/kustomization.yaml":   "resources: [default/x, default/y]\n",
	}
	res, err := r.Update(ctx, folders(files, companions, nil))
	require.NoError(t, err)
	require.Equal(t, 2, res.CompanionsMoved)
	require.Equal(t, []string{"rendered/default/x/pod-a.yaml"}, shows(t, srv, "folders/x"), "the folder alone")
	require.Equal(t, []string{"rendered/default/y/pod-c.yaml"}, shows(t, srv, "folders/y"))
	x, y := rev(t, srv, "folders/x"), rev(t, srv, "folders/y")
	got, ok := srv.FileAt("folders/y", "rendered/default/y/pod-c.yaml")
	require.True(t, ok)
	require.Equal(t, "pod: c\n", got)

	// A change to y's folder moves y; x stays.
	files["rendered/default/y/pod-c.yaml"] = "pod: c2\n"
	res, err = r.Update(ctx, folders(files, companions, nil))
	require.NoError(t, err)
	require.Equal(t, 1, res.CompanionsMoved)
	require.Equal(t, x, rev(t, srv, "folders/x"))
	require.NotEqual(t, y, rev(t, srv, "folders/y"))
	y = rev(t, srv, "folders/y")
	got, _ = srv.FileAt("folders/y", "rendered/default/y/pod-c.yaml")
	require.Equal(t, "pod: c2\n", got)

	// A change outside every folder moves none; nor does a new writer with an empty store,
	// which reads the companions' tips from the server.
	files["rendered/kustomization.yaml"] = "resources: [default/y, default/x]\n"
	res, err = open(t, srv).Update(ctx, folders(files, companions, nil))
	require.NoError(t, err)
	require.Equal(t, 0, res.CompanionsMoved)
	require.Equal(t, x, rev(t, srv, "folders/x"))
	require.Equal(t, y, rev(t, srv, "folders/y"))

	// A folder that goes deletes its companion, in the same push as the commit.
	delete(files, "rendered/default/y/pod-c.yaml")
	delete(companions, "folders/y")
	pushes := srv.Pushes()
	res, err = r.Update(ctx, folders(files, companions, nil))
	require.NoError(t, err)
	require.Equal(t, 1, res.CompanionsMoved)
	require.Equal(t, pushes+1, srv.Pushes())
	require.Equal(t, "", rev(t, srv, "folders/y"))
	require.Equal(t, x, rev(t, srv, "folders/x"))
	require.Equal(t, res.Commit, srv.Head())
}

func TestCompanionsAreRepairedWithoutACommit(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	ctx := context.Background()
	files := map[string]string{"rendered/default/x/pod-a.yaml": "pod: a\n", "rendered/default/x/pod-b.yaml": "pod: b\n", "rendered/kustomization.yaml": "resources: []\n"}
	companions := map[string]string{"folders/x": "rendered/default/x"}
	head := srv.Head()

	// The seed already holds these files: nothing to commit, but the companion is created.
	res, err := r.Update(ctx, folders(files, companions, nil))
	require.ErrorIs(t, err, gitsync.ErrNoChanges)
	require.Equal(t, 1, res.CompanionsMoved)
	require.Equal(t, []string{"rendered/default/x/pod-a.yaml", "rendered/default/x/pod-b.yaml"}, shows(t, srv, "folders/x"))
	require.Equal(t, head, srv.Head())
	own := rev(t, srv, "folders/x")

	// Someone else moves the companion to a commit of theirs, with the same tree, and plants
	// a branch under the prefix; a writer that keeps only its own commits puts both right.
	theirs := strings.TrimSpace(gitsynctest.Git(t, srv.Bare(), "-c", "user.name=m", "-c", "user.email=m@example.com", "commit-tree", "-m", "theirs", own+"^{tree}"))
	srv.SetRef("folders/x", theirs)
	srv.SetRef("folders/planted", theirs)
	mine := func(c *gitsync.Commit) bool { return c.Hash != theirs }
	res, err = r.Update(ctx, folders(files, companions, mine))
	require.ErrorIs(t, err, gitsync.ErrNoChanges)
	require.Equal(t, 2, res.CompanionsMoved)
	require.NotEqual(t, theirs, rev(t, srv, "folders/x"))
	require.Equal(t, []string{"rendered/default/x/pod-a.yaml", "rendered/default/x/pod-b.yaml"}, shows(t, srv, "folders/x"))
	require.Equal(t, "", rev(t, srv, "folders/planted"))

	// A tip that shows more than the folder is replaced too.
	srv.SetRef("folders/x", head)
	res, err = r.Update(ctx, folders(files, companions, mine))
	require.ErrorIs(t, err, gitsync.ErrNoChanges)
	require.Equal(t, 1, res.CompanionsMoved)
	require.Len(t, shows(t, srv, "folders/x"), 2)

	// In order now: no push at all, not even a push session to look at the refs.
	pushes, sessions := srv.Pushes(), srv.PushSessions()
	res, err = r.Update(ctx, folders(files, companions, mine))
	require.ErrorIs(t, err, gitsync.ErrNoChanges)
	require.Equal(t, 0, res.CompanionsMoved)
	require.Equal(t, pushes, srv.Pushes())
	require.Equal(t, sessions, srv.PushSessions())
}

func TestCompanionPushIsAtomic(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv, gitsync.WithFailFast())
	ctx := context.Background()
	// A hook refuses any update of folders/x: the branch and the other companion must not move.
	srv.Hook("update", `case "$1" in refs/heads/folders/x) echo "no x" >&2; exit 1;; esac`)
	head := srv.Head()
	companions := map[string]string{"folders/x": "rendered/default/x", "folders/z": "rendered/default/z"}
	files := map[string]string{"rendered/default/x/pod-a.yaml": "pod: a2\n", "rendered/default/z/pod.yaml": "z\n"}
	_, err := r.Update(ctx, folders(files, companions, nil))
	require.Error(t, err)
	require.Contains(t, err.Error(), "folders/x")
	require.Equal(t, head, srv.Head())
	require.Equal(t, "", rev(t, srv, "folders/z"))
	require.Equal(t, "", rev(t, srv, "folders/x"))
}

func TestCompanionsAreValidated(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	for name, folder := range map[string]string{"other/x": "rendered/x", "folders/x..y": "rendered/x", "folders/ok": "../x"} {
		_, err := r.Update(context.Background(), folders(map[string]string{"rendered/x/a.yaml": "a\n"}, map[string]string{name: folder}, nil))
		require.Error(t, err, name)
		require.False(t, errors.Is(err, gitsync.ErrNoChanges))
	}
	require.ElementsMatch(t, []string{"main"}, srv.Branches())
}

// Anyone who can push under the prefix can plant a tip too large to fetch: the write still
// lands, and the companion is replaced with the writer's own.
func TestCompanionTooLargeToFetchIsReplaced(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv, gitsync.WithLimits(256<<10, 0))
	ctx := context.Background()
	companions := map[string]string{"folders/x": "rendered/default/x"}
	files := map[string]string{"rendered/default/x/pod-a.yaml": "pod: a2\n"}
	_, err := r.Update(ctx, folders(files, companions, nil))
	require.NoError(t, err)

	huge := srv.On("folders/x").Commit(map[string]string{"rendered/default/x/big.yaml": randomText(1 << 20)}, nil, "too large")
	require.Equal(t, huge, rev(t, srv, "folders/x"))
	files["rendered/default/x/pod-a.yaml"] = "pod: a3\n"
	res, err := r.Update(ctx, folders(files, companions, nil))
	require.NoError(t, err)
	require.Equal(t, 1, res.CompanionsMoved)
	require.Equal(t, []string{"rendered/default/x/pod-a.yaml"}, shows(t, srv, "folders/x"))
}

// A write that grows the object store past its limit keeps what it built until it has pushed:
// reading the companions' tips between the commit and the push must not start the store over.
func TestCompanionsSurviveTheStoreLimit(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv, gitsync.WithResetAfterGrowth(1))
	files := map[string]string{"rendered/kustomization.yaml": "resources: [default/x]\n"}
	for i := range 1500 {
		files[fmt.Sprintf("rendered/default/x/pod-%04d.yaml", i)] = fmt.Sprintf("pod: %d\n", i)
	}
	res, err := r.Update(context.Background(), folders(files, map[string]string{"folders/x": "rendered/default/x"}, nil))
	require.NoError(t, err)
	require.Equal(t, 1, res.CompanionsMoved)
	require.Equal(t, res.Commit, srv.Head())
	require.Len(t, shows(t, srv, "folders/x"), 1500)
}

// A ref named as a folder of a branch the writer creates (gitbroker/folders beside
// gitbroker/folders/x), or under it as a folder (gitbroker/inventory/edge-b/x under edge-b's ref), keeps git from creating that
// branch, in the same atomic transaction too: anyone who can push there could stop every render
// for good, or keep a node whose ref was deleted from writing again. The writer deletes such a
// ref first, and its push lands.
func TestRefsThatBlockABranchAreDeleted(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	main := rev(t, srv, "main")
	gitsynctest.Git(t, srv.Bare(), "update-ref", "refs/heads/gitbroker/folders", main)
	companions := map[string]string{"gitbroker/folders/x": "rendered/default/x"}
	files := map[string]string{"rendered/default/x/pod-a.yaml": "pod: a\n"}
	update := func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		c := change([]string{"rendered/"}, files)
		c.Message, c.CompanionPrefixes, c.Companions = "render", []string{"gitbroker/folders/"}, companions
		return c, nil
	}
	res, err := open(t, srv).Update(context.Background(), update)
	require.NoError(t, err)
	require.Equal(t, 1, res.CompanionsMoved)
	require.False(t, exists(t, srv, "refs/heads/gitbroker/folders"))
	require.Equal(t, []string{"rendered/default/x/pod-a.yaml"}, shows(t, srv, "gitbroker/folders/x"))

	gitsynctest.Git(t, srv.Bare(), "update-ref", "refs/heads/gitbroker/inventory/edge-b/x", main)
	node, err := gitsync.New(srv.URL(), "gitbroker/inventory/edge-b", fastBackoff(), gitsync.WithCreateBranch())
	require.NoError(t, err)
	_, err = node.Update(context.Background(), write([]string{"inventory/edge-b.yaml"}, map[string]string{"inventory/edge-b.yaml": "b: 2\n"}))
	require.NoError(t, err)
	require.NotEmpty(t, rev(t, srv, "gitbroker/inventory/edge-b"))
	require.False(t, exists(t, srv, "refs/heads/gitbroker/inventory/edge-b/x"))

	// A branch of the people's is never deleted: a rendered branch named into its way fails.
	gitsynctest.Git(t, srv.Bare(), "update-ref", "refs/heads/release/1.0", main)
	release, err := gitsync.New(srv.URL(), "release", gitsync.WithBackoff(gitsync.Backoff{Initial: time.Millisecond, Max: time.Millisecond, MaxAttempts: 3, MaxElapsed: time.Second}), gitsync.WithCreateBranch())
	require.NoError(t, err)
	_, err = release.Update(context.Background(), write([]string{"rendered/"}, files))
	require.Error(t, err)
	require.True(t, exists(t, srv, "refs/heads/release/1.0"))
}

// exists reports whether the server has ref itself (rev matches the refs under it as well).
func exists(t *testing.T, srv *gitsynctest.Server, ref string) bool {
	t.Helper()
	for _, line := range strings.Split(gitsynctest.Git(t, srv.Bare(), "for-each-ref", "--format=%(refname)"), "\n") {
		if line == ref {
			return true
		}
	}
	return false
}
