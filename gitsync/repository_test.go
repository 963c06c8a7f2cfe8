package gitsync_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

var when = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func seed() map[string]string {
	return map[string]string{
		"configurations/echo.yaml":      "kind: Configuration\n",
		"inventory/edge-a.yaml":         "a: 1\n",
		"inventory/edge-b.yaml":         "b: 1\n",
		"rendered/default/x/pod-a.yaml": "pod: a\n",
		"rendered/default/x/pod-b.yaml": "pod: b\n",
		"rendered/kustomization.yaml":   "resources: []\n",
	}
}

func fastBackoff() gitsync.Option {
	return gitsync.WithBackoff(gitsync.Backoff{
		Initial: time.Millisecond, Max: 20 * time.Millisecond, MaxAttempts: 50, MaxElapsed: time.Minute,
	})
}

func open(t *testing.T, srv *gitsynctest.Server, opts ...gitsync.Option) *gitsync.Repository {
	t.Helper()
	r, err := gitsync.New(srv.URL(), "main", append([]gitsync.Option{fastBackoff()}, opts...)...)
	require.NoError(t, err)
	return r
}

// write returns an UpdateFunc with a fixed change.
func write(owned []string, files map[string]string) gitsync.UpdateFunc {
	return func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		return change(owned, files), nil
	}
}

func change(owned []string, files map[string]string) *gitsync.Change {
	c := &gitsync.Change{
		Owned:    owned,
		Files:    map[string][]byte{},
		Message:  "agent: update edge-a",
		Trailers: []gitsync.Trailer{{Key: "Gitbroker-Node", Value: "edge-a"}},
		Author:   gitsync.Signature{Name: "gitbroker agent", Email: "agent@gitbroker.dev", When: when},
	}
	for k, v := range files {
		c.Files[k] = []byte(v)
	}
	return c
}

func TestUpdateChangesOnlyOwnedPaths(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	res, err := r.Update(context.Background(), write([]string{"inventory/edge-a.yaml"}, map[string]string{
		"inventory/edge-a.yaml": "a: 2\n",
	}))
	require.NoError(t, err)
	require.Equal(t, srv.Head(), res.Commit)
	require.Equal(t, 1, res.Attempts)

	log := srv.Log()
	require.Len(t, log, 2)
	require.Equal(t, []string{"inventory/edge-a.yaml"}, log[0].Paths)
	require.Equal(t, "gitbroker agent <agent@gitbroker.dev>", log[0].Author)
	require.Equal(t, "agent: update edge-a", log[0].Subject)
	require.Contains(t, log[0].Body, "Gitbroker-Node: edge-a")
	date := gitsynctest.Git(t, srv.Bare(), "log", "-1", "--format=%aI %cI", "main")
	require.Equal(t, "2026-11-30T09:00:00Z 2026-11-30T09:00:00Z\n", strings.ReplaceAll(date, "+00:00", "Z"))

	got, ok := srv.File("inventory/edge-a.yaml")
	require.True(t, ok)
	require.Equal(t, "a: 2\n", got)
	for name, want := range seed() {
		if name == "inventory/edge-a.yaml" {
			continue
		}
		got, ok := srv.File(name)
		require.True(t, ok, name)
		require.Equal(t, want, got, name)
	}
	gitsynctest.Git(t, srv.Bare(), "fsck", "--strict", "--no-progress")
}

func TestUpdateOwnedFolderReplacesItsFiles(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	_, err := r.Update(context.Background(), write([]string{"rendered/", "history/"}, map[string]string{
		"rendered/default/x/pod-a.yaml":   "pod: a2\n",
		"rendered/default/y/pod-c.yaml":   "pod: c\n",
		"history/jobs/default/x/i/j.yaml": "job: j\n",
	}))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"configurations/echo.yaml", "inventory/edge-a.yaml", "inventory/edge-b.yaml",
		"rendered/default/x/pod-a.yaml", "rendered/default/y/pod-c.yaml", "history/jobs/default/x/i/j.yaml",
	}, srv.Files())
	require.ElementsMatch(t, []string{
		"rendered/default/x/pod-a.yaml", "rendered/default/x/pod-b.yaml", "rendered/default/y/pod-c.yaml",
		"rendered/kustomization.yaml", "history/jobs/default/x/i/j.yaml",
	}, srv.Log()[0].Paths)

	// Owning a file that is not in Files deletes it; an emptied folder goes.
	_, err = r.Update(context.Background(), write([]string{"rendered/", "history/"}, map[string]string{
		"rendered/default/y/pod-c.yaml": "pod: c\n",
	}))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"configurations/echo.yaml", "inventory/edge-a.yaml", "inventory/edge-b.yaml", "rendered/default/y/pod-c.yaml",
	}, srv.Files())
	gitsynctest.Git(t, srv.Bare(), "fsck", "--strict", "--no-progress")
}

func TestUpdateWithoutChangesMakesNoCommit(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	head := srv.Head()
	r := open(t, srv)
	res, err := r.Update(context.Background(), write([]string{"inventory/edge-a.yaml"}, map[string]string{
		"inventory/edge-a.yaml": "a: 1\n",
	}))
	require.ErrorIs(t, err, gitsync.ErrNoChanges)
	require.Equal(t, head, res.Base)
	require.Empty(t, res.Commit)
	require.Equal(t, head, srv.Head())
	require.Zero(t, srv.Pushes())

	// Deleting a file that is not there is no change either.
	_, err = r.Update(context.Background(), write([]string{"inventory/edge-c.yaml"}, nil))
	require.ErrorIs(t, err, gitsync.ErrNoChanges)
}

// A missing branch is an error, for reading and for writing, and nothing is pushed: a typo in
// --branch never creates a branch. A writer whose branch is its own may create it.
func TestMissingBranch(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r, err := gitsync.New(srv.URL(), "mian", fastBackoff())
	require.NoError(t, err)
	_, err = r.Snapshot(context.Background())
	require.ErrorIs(t, err, gitsync.ErrNoBranch)
	require.ErrorContains(t, err, "mian")
	pushes := srv.Pushes()
	_, err = r.Update(context.Background(), write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "a: 1\n"}))
	require.ErrorIs(t, err, gitsync.ErrNoBranch)
	require.Equal(t, pushes, srv.Pushes())
	require.Equal(t, []string{"main"}, srv.Branches())
}

// An unreachable remote fails a fail-fast write at once instead of retrying for minutes.
func TestFailFast(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	srv.SetDown(true)
	r := open(t, srv, gitsync.WithFailFast(), gitsync.WithBackoff(gitsync.Backoff{Initial: time.Second, Max: time.Second, MaxAttempts: 30, MaxElapsed: time.Minute}))
	res, err := r.Update(context.Background(), write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "a: 1\n"}))
	require.Error(t, err)
	require.Zero(t, res.Retries, "no retry after an error that is not a conflict")
}

func TestUpdateCreatesTheBranch(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", nil)
	r := open(t, srv, gitsync.WithCreateBranch())
	snap, err := r.Snapshot(context.Background())
	require.NoError(t, err)
	require.Empty(t, snap.Commit())
	_, err = snap.ReadFile("inventory/edge-a.yaml")
	require.ErrorIs(t, err, fs.ErrNotExist)

	res, err := r.Update(context.Background(), write([]string{"inventory/edge-a.yaml"}, map[string]string{
		"inventory/edge-a.yaml": "a: 1\n",
	}))
	require.NoError(t, err)
	require.Equal(t, res.Commit, srv.Head())
	require.Equal(t, []string{"inventory/edge-a.yaml"}, srv.Files())
}

func TestSnapshotReadsFiles(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	snap, err := r.Snapshot(context.Background())
	require.NoError(t, err)
	require.Equal(t, srv.Head(), snap.Commit())
	b, err := snap.ReadFile("configurations/echo.yaml")
	require.NoError(t, err)
	require.Equal(t, "kind: Configuration\n", string(b))
	files, err := snap.Files("inventory")
	require.NoError(t, err)
	require.Equal(t, map[string][]byte{"inventory/edge-a.yaml": []byte("a: 1\n"), "inventory/edge-b.yaml": []byte("b: 1\n")}, files)
	files, err = snap.Files("nothing-here")
	require.NoError(t, err)
	require.Empty(t, files)
	_, err = snap.ReadFile("inventory/edge-z.yaml")
	require.ErrorIs(t, err, fs.ErrNotExist)
}

// A person commits to configurations/ between the agent's fetch and its
// push: the push is refused, the agent recomputes on the new head, and both
// changes are on the branch.
func TestConflictRecomputesOnTheNewHead(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	var calls atomic.Int32
	var heads []string
	res, err := r.Update(context.Background(), func(_ context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		heads = append(heads, head.Commit())
		if calls.Add(1) == 1 {
			srv.Commit(map[string]string{"configurations/new.yaml": "kind: Configuration # by a person\n"}, nil, "add a configuration")
		}
		return change([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "a: 3\n"}), nil
	})
	require.NoError(t, err)
	require.Equal(t, int32(2), calls.Load())
	require.Equal(t, 1, res.Conflicts)
	require.Equal(t, 2, res.Attempts)
	require.NotEqual(t, heads[0], heads[1])

	log := srv.Log()
	require.Len(t, log, 3)
	require.Equal(t, []string{"inventory/edge-a.yaml"}, log[0].Paths)
	require.Equal(t, []string{"configurations/new.yaml"}, log[1].Paths)
	got, _ := srv.File("configurations/new.yaml")
	require.Equal(t, "kind: Configuration # by a person\n", got)
	got, _ = srv.File("inventory/edge-a.yaml")
	require.Equal(t, "a: 3\n", got)
}

// The server applies a push and drops the connection, then is gone for a
// while. The writer retries; on the new head its change is already there,
// so it lands exactly once.
func TestOutageMidPushLandsOnce(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	srv.DropNextPushes(1)
	calls := 0
	res, err := r.Update(context.Background(), func(_ context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		calls++
		if calls == 1 {
			// Once the dropped push is in, the server goes away for a bit.
			go func() {
				for srv.Pushes() == 0 {
					time.Sleep(time.Millisecond)
				}
				srv.SetDown(true)
				time.Sleep(200 * time.Millisecond)
				srv.SetDown(false)
			}()
		}
		return change([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "a: 4\n"}), nil
	})
	require.ErrorIs(t, err, gitsync.ErrNoChanges, "the first push landed; the retry finds nothing to do")
	require.GreaterOrEqual(t, res.Retries, 1)
	require.Equal(t, 2, calls)
	log := srv.Log()
	require.Len(t, log, 2, "exactly one commit landed")
	require.Equal(t, []string{"inventory/edge-a.yaml"}, log[0].Paths)
	got, _ := srv.File("inventory/edge-a.yaml")
	require.Equal(t, "a: 4\n", got)
}

func TestServerDownGivesUpWithinBounds(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	srv.SetDown(true)
	r, err := gitsync.New(srv.URL(), "main", gitsync.WithBackoff(gitsync.Backoff{
		Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 4, MaxElapsed: time.Minute,
	}))
	require.NoError(t, err)
	res, err := r.Update(context.Background(), write([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "x\n"}))
	require.Error(t, err)
	require.Contains(t, err.Error(), "after 4 attempts")
	require.Equal(t, 3, res.Retries)
	require.Zero(t, res.Attempts, "nothing was pushed while the fetch failed")
}

func TestChangeIsValidated(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	cases := map[string]*gitsync.Change{
		"outside owned": change([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-b.yaml": "x"}),
		"escaping path": change([]string{"inventory/"}, map[string]string{"inventory/../x": "x"}),
		"dot git":       change([]string{".git/"}, map[string]string{".git/config": "x"}),
		"nothing owned": change(nil, nil),
		"file over dir": change([]string{"rendered"}, map[string]string{"rendered": "x"}),
	}
	noAuthor := change([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "x"})
	noAuthor.Author = gitsync.Signature{}
	cases["no author"] = noAuthor
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := r.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) { return c, nil })
			require.Error(t, err)
			require.NotErrorIs(t, err, gitsync.ErrNoChanges)
		})
	}
	require.Len(t, srv.Log(), 1)
}

func TestWriterErrorIsNotRetried(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	boom := errors.New("boom")
	calls := 0
	_, err := r.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		calls++
		return nil, boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, calls)
}

// The branch moves after the client read the server's refs but before its
// update is applied: the server's compare-and-swap refuses it, and the
// writer recomputes.
func TestServerSideCompareAndSwap(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	srv.BeforeNextPush(func() {
		srv.Commit(map[string]string{"configurations/late.yaml": "late\n"}, nil, "a late commit")
	})
	calls := 0
	res, err := r.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
		calls++
		return change([]string{"inventory/edge-a.yaml"}, map[string]string{"inventory/edge-a.yaml": "a: 5\n"}), nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, calls)
	require.Equal(t, 1, res.Conflicts)
	log := srv.Log()
	require.Len(t, log, 3)
	require.Equal(t, []string{"inventory/edge-a.yaml"}, log[0].Paths)
	require.Equal(t, []string{"configurations/late.yaml"}, log[1].Paths)
}

func TestSnapshotAtAnOlderCommit(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	first := srv.Head()
	second := srv.Commit(map[string]string{"inventory/edge-a.yaml": "a: 2\n"}, nil, "second")
	srv.Commit(map[string]string{"inventory/edge-a.yaml": "a: 3\n"}, nil, "third")
	r := open(t, srv)
	ctx := context.Background()
	head, err := r.Snapshot(ctx)
	require.NoError(t, err)
	b, err := head.ReadFile("inventory/edge-a.yaml")
	require.NoError(t, err)
	require.Equal(t, "a: 3\n", string(b))

	for commit, want := range map[string]string{first: "a: 1\n", second: "a: 2\n"} {
		snap, err := r.SnapshotAt(ctx, commit)
		require.NoError(t, err)
		require.Equal(t, commit, snap.Commit())
		b, err := snap.ReadFile("inventory/edge-a.yaml")
		require.NoError(t, err)
		require.Equal(t, want, string(b))
	}
	_, err = r.SnapshotAt(ctx, strings.Repeat("ab", 20))
	require.ErrorContains(t, err, "reading commit")
	_, err = r.SnapshotAt(ctx, "HEAD")
	require.ErrorContains(t, err, "not a full commit hash")

	// Writing still works after the history was deepened.
	_, err = r.Update(ctx, write([]string{"inventory/edge-b.yaml"}, map[string]string{"inventory/edge-b.yaml": "b: 2\n"}))
	require.NoError(t, err)
}

func TestUpdateNewBranchWithPushOptions(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	head := srv.Head()
	r := open(t, srv, gitsync.WithPushOptions(map[string]string{
		"merge_request.create": "", "merge_request.target": "main",
	}))
	name := func(h gitsync.Snapshot) string { return "gitbroker/render-" + h.Commit()[:12] }
	up := write([]string{"rendered/"}, map[string]string{"rendered/x.yaml": "x\n"})
	res, err := r.UpdateNewBranch(context.Background(), name, up)
	require.NoError(t, err)
	require.Equal(t, head, srv.Head(), "the source branch is untouched")
	branch := "gitbroker/render-" + head[:12]
	require.ElementsMatch(t, []string{"main", branch}, srv.Branches())
	got, ok := srv.FileAt(branch, "rendered/x.yaml")
	require.True(t, ok)
	require.Equal(t, "x\n", got)
	parent := strings.TrimSpace(gitsynctest.Git(t, srv.Bare(), "rev-parse", branch+"^"))
	require.Equal(t, head, parent, "the review branch sits on the source commit")
	require.Equal(t, res.Commit, strings.TrimSpace(gitsynctest.Git(t, srv.Bare(), "rev-parse", branch)))
	require.Equal(t, []string{"merge_request.create=", "merge_request.target=main"}, srv.PushOptions(), "go-git sends every option as key=value")

	// The same source commit again: the branch is there, nothing is pushed.
	_, err = r.UpdateNewBranch(context.Background(), name, up)
	require.ErrorIs(t, err, gitsync.ErrBranchExists)
	require.Len(t, srv.PushOptions(), 2)
}

// A writer that knows the head (it wrote it) commits only its edits: the result is the tree the
// same change gives as complete Files, and edits computed on another commit are refused rather
// than applied to the wrong base.
func TestUpdateFromEdits(t *testing.T) {
	owned := []string{"rendered/", "history/"}
	files := map[string]string{
		"rendered/default/x/pod-a.yaml":   "pod: a2\n",
		"rendered/default/x/pod-b.yaml":   "pod: b\n",
		"rendered/default/y/pod-c.yaml":   "pod: c\n",
		"rendered/kustomization.yaml":     "",
		"history/jobs/default/x/i/j.yaml": "job: j\n",
	}
	full := gitsynctest.NewServer(t, "main", seed())
	res, err := open(t, full).Update(context.Background(), write(owned, files))
	require.NoError(t, err)
	want := gitsynctest.Git(t, full.Bare(), "rev-parse", res.Commit+"^{tree}")

	srv := gitsynctest.NewServer(t, "main", seed())
	r := open(t, srv)
	edits := map[string][]byte{
		"rendered/default/x/pod-a.yaml":    []byte("pod: a2\n"),
		"rendered/default/y/pod-c.yaml":    []byte("pod: c\n"),
		"rendered/kustomization.yaml":      {},
		"history/jobs/default/x/i/j.yaml":  []byte("job: j\n"),
		"rendered/default/x/pod-gone.yaml": nil, // deleting what is not there is no edit
	}
	var bases []string
	res, err = r.Update(context.Background(), func(_ context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		bases = append(bases, head.Commit())
		c := change(owned, nil)
		c.Files, c.Edits, c.EditsBase = nil, edits, head.Commit()
		return c, nil
	})
	require.NoError(t, err)
	require.Equal(t, want, gitsynctest.Git(t, srv.Bare(), "rev-parse", res.Commit+"^{tree}"))
	require.Equal(t, bases[0], gitsynctest.Git(t, srv.Bare(), "rev-parse", res.Commit+"^")[:len(bases[0])])
	gitsynctest.Git(t, srv.Bare(), "fsck", "--strict", "--no-progress")

	// Deleting a file through an edit.
	_, err = r.Update(context.Background(), func(_ context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		c := change(owned, nil)
		c.Files, c.Edits, c.EditsBase = nil, map[string][]byte{"rendered/default/y/pod-c.yaml": nil}, head.Commit()
		return c, nil
	})
	require.NoError(t, err)
	_, ok := srv.File("rendered/default/y/pod-c.yaml")
	require.False(t, ok)
	_, ok = srv.File("rendered/default/x/pod-b.yaml")
	require.True(t, ok)

	// No edits: nothing to commit.
	head := srv.Head()
	_, err = r.Update(context.Background(), func(_ context.Context, s gitsync.Snapshot) (*gitsync.Change, error) {
		c := change(owned, nil)
		c.Files, c.Edits, c.EditsBase = nil, map[string][]byte{}, s.Commit()
		return c, nil
	})
	require.ErrorIs(t, err, gitsync.ErrNoChanges)
	require.Equal(t, head, srv.Head())

	// Edits on a stale base, outside the owned paths, or with Files too.
	for name, c := range map[string]*gitsync.Change{
		"stale base": {EditsBase: bases[0], Edits: map[string][]byte{"rendered/a.yaml": []byte("a\n")}},
		"not owned":  {EditsBase: head, Edits: map[string][]byte{"inventory/edge-a.yaml": []byte("a\n")}},
		"and Files":  {EditsBase: head, Edits: map[string][]byte{"rendered/a.yaml": []byte("a\n")}, Files: map[string][]byte{}},
	} {
		c.Owned, c.Message, c.Author = owned, "edit", gitsync.Signature{Name: "a", Email: "a@b", When: when}
		_, err := r.Update(context.Background(), func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) { return c, nil })
		require.Error(t, err, name)
		require.Equal(t, head, srv.Head(), name)
	}
}

// What git can hold besides files, planted where a writer owns: a symbolic link at one of its
// paths, whose target is the writer's content, and submodules in its folder and at the top. The
// writer's next change leaves a regular file with its content and no submodule (before, the link
// and the submodules stayed).
func TestUpdateReplacesLinksAndSubmodules(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", seed())
	work := t.TempDir()
	gitsynctest.Git(t, "", "clone", "--quiet", srv.Bare(), work)
	target := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(target, []byte("pod: a\n"), 0o644))
	blob := strings.TrimSpace(gitsynctest.Git(t, work, "hash-object", "-w", target))
	gitsynctest.Git(t, work, "update-index", "--cacheinfo", "120000,"+blob+",rendered/default/x/pod-a.yaml")
	gitsynctest.Git(t, work, "update-index", "--add", "--cacheinfo", "160000,"+srv.Head()+",rendered/default/x/sub")
	gitsynctest.Git(t, work, "update-index", "--add", "--cacheinfo", "160000,"+srv.Head()+",planted")
	gitsynctest.Git(t, work, "-c", "user.name=m", "-c", "user.email=m@example.com", "commit", "--quiet", "-m", "planted")
	gitsynctest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")
	require.Contains(t, gitsynctest.Git(t, srv.Bare(), "ls-tree", "-r", "main", "rendered/default/x/"), "160000 commit")

	// The writer owns its folder and every top-level entry, as the renderer does.
	r := open(t, srv)
	_, err := r.Update(context.Background(), func(_ context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		require.Contains(t, gitsync.TopLevel(head), "planted", "a submodule is owned as an entry, not as a folder")
		return change(append([]string{"rendered/"}, gitsync.TopLevel(head)...), map[string]string{
			"rendered/default/x/pod-a.yaml": "pod: a\n",
			"rendered/default/x/pod-b.yaml": "pod: b\n",
			"rendered/kustomization.yaml":   "resources: []\n",
			"configurations/echo.yaml":      "kind: Configuration\n",
			"inventory/edge-a.yaml":         "a: 1\n",
			"inventory/edge-b.yaml":         "b: 1\n",
		}), nil
	})
	require.NoError(t, err)
	tree := gitsynctest.Git(t, srv.Bare(), "ls-tree", "-r", "main", "rendered/default/x/")
	require.Contains(t, tree, "100644 blob "+blob+"\trendered/default/x/pod-a.yaml\n")
	require.NotContains(t, tree, "120000")
	require.NotContains(t, tree, "160000")
	require.NotContains(t, gitsynctest.Git(t, srv.Bare(), "ls-tree", "main"), "planted")
	gitsynctest.Git(t, srv.Bare(), "fsck", "--strict", "--no-progress")
}
