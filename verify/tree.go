package verify

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

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
// reads to name the tip it replaces: the tip of ref the renderer accepted last, from the render
// metadata at the head of the rendered branch, read only when that head is a render commit the
// pinned renderer key signed. Anyone who can push there could otherwise name any tip: a
// writer that named one the renderer never accepted would be refused for good. A head that is
// not the renderer's (a commit pushed on top, a person's adoption) is an error until the
// renderer puts its branch back; the writer reads it again until it sees its line accepted
// (gitsync.WithAcceptedRecheck), which also undoes an older render put back as the head. It
// reads the rendered branch's head once per call, only while a writer recovers.
func AcceptedTip(rendered interface {
	Snapshot(ctx context.Context) (gitsync.Snapshot, error)
}, keys *RendererKeys, ref string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		snap, err := rendered.Snapshot(ctx)
		if errors.Is(err, gitsync.ErrNoBranch) {
			return "", nil // nothing rendered yet: nothing accepted
		}
		if err != nil {
			return "", err
		}
		if keys == nil {
			return "", fmt.Errorf("%s: no renderer key to check its head with: its render metadata is not read", RenderedBranch)
		}
		c := gitsync.HeadCommit(snap)
		if c == nil {
			return "", fmt.Errorf("%s: no commit to read", RenderedBranch)
		}
		if err := keys.signed(c, time.Now()); err != nil {
			return "", fmt.Errorf("%s: head %s is not the renderer's (%w): its render metadata is not read", RenderedBranch, short(c.Hash), err)
		}
		if !isRender(c, func(*gitsync.Commit) bool { return true }) {
			return "", fmt.Errorf("%s: head %s is signed by the renderer but is not a render commit: its render metadata is not read", RenderedBranch, short(c.Hash))
		}
		data, err := snap.ReadFile(render.MetadataPath)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return render.WriterTip(data, ref), nil
	}
}
