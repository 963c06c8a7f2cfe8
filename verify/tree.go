package verify

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
)

// treeSnap is a Snapshot of files held in memory: the source inputs the renderer mirrored.
type treeSnap struct {
	commit string
	files  map[string][]byte
}

func treeSnapshot(commit string, prev map[string][]byte) *treeSnap {
	files := map[string][]byte{}
	for p, b := range prev {
		if IsPeoplePath(p) {
			files[p] = b
		}
	}
	return &treeSnap{commit: commit, files: files}
}

func modeOfTree(prev map[string][]byte) mode { return modeAt(treeSnapshot("", prev)) }

func (t *treeSnap) Commit() string { return t.commit }

func (t *treeSnap) CommitTime() time.Time { return time.Time{} }

func (t *treeSnap) ReadFile(name string) ([]byte, error) {
	b, ok := t.files[name]
	if !ok {
		return nil, fmt.Errorf("reading %s: %w", name, fs.ErrNotExist)
	}
	return b, nil
}

func (t *treeSnap) Files(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for p, b := range t.files {
		if dir == "" || strings.HasPrefix(p, dir+"/") {
			out[p] = b
		}
	}
	return out, nil
}

// AcceptedTip returns what a writer that must start a new line on ref (gitsync.WithRecoverFrom)
// reads to name the tip it replaces: the tip of ref the renderer accepted last, from the
// accepted-tips shard of ref (shard, opened on api.AcceptedBranch(ref)), read only when its
// head is a commit the pinned renderer key signed that shows that shard's folder. The shard is
// a few kilobytes at any fleet size; the rendered tree it is copied from is hundreds of
// megabytes at 100,000 nodes, far above what an agent may fetch. Anyone who can push there
// could otherwise name any tip: a writer that named one the renderer never accepted would be
// refused for good. A head that is not the renderer's (a commit pushed on top) is an error
// until the renderer puts the branch back, with its next render; the writer reads it again
// until it sees its line accepted (gitsync.WithAcceptedRecheck), which also undoes an older
// shard put back as the head. A shard branch that does not exist names nothing: nothing of
// ref's was accepted yet, or the renderer re-creates the branch with its next render.
func AcceptedTip(shard interface {
	Snapshot(ctx context.Context) (gitsync.Snapshot, error)
}, keys *RendererKeys, ref string) func(ctx context.Context) (string, error) {
	name := api.AcceptedShard(ref)
	branch, folder, file := api.AcceptedBranchPrefix+name, api.AcceptedFolder(name), api.AcceptedFile(name)
	return func(ctx context.Context) (string, error) {
		if keys == nil {
			return "", fmt.Errorf("%s: no renderer key to check it with: the accepted tip is not read", branch)
		}
		snap, err := shard.Snapshot(ctx)
		if errors.Is(err, gitsync.ErrNoBranch) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		c := gitsync.HeadCommit(snap)
		if c == nil {
			return "", fmt.Errorf("%s: no commit to read", branch)
		}
		if err := keys.signed(c, time.Now()); err != nil {
			return "", fmt.Errorf("%s: head %s is not the renderer's (%w): the accepted tip is not read", branch, short(c.Hash), err)
		}
		if shows, ok := gitsync.TrailerValue(c.Raw, gitsync.TrailerCompanion); !ok || shows != folder {
			return "", fmt.Errorf("%s: head %s is signed by the renderer but does not show %s: the accepted tip is not read", branch, short(c.Hash), folder)
		}
		data, err := snap.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s: head %s has no %s: the accepted tip is not read", branch, short(c.Hash), file)
		}
		if err != nil {
			return "", err
		}
		return render.WriterTip(data, ref), nil
	}
}
