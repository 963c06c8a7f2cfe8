package verify

import (
	"fmt"
	"io/fs"
	"strings"
	"time"
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
