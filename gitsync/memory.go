package gitsync

import (
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// MemorySnapshot is a Snapshot of files held in memory, at commit (a commit's files taken out
// of a store, or verified and kept: a publication, the inputs a render mirrored). Its commit
// time is zero.
func MemorySnapshot(commit string, files map[string][]byte) Snapshot {
	return &memorySnapshot{commit: commit, files: files}
}

type memorySnapshot struct {
	commit string
	files  map[string][]byte
}

func (t *memorySnapshot) Commit() string { return t.commit }

func (t *memorySnapshot) CommitTime() time.Time { return time.Time{} }

func (t *memorySnapshot) ReadFile(name string) ([]byte, error) {
	b, ok := t.files[name]
	if !ok {
		return nil, fmt.Errorf("reading %s: %w", name, fs.ErrNotExist)
	}
	return b, nil
}

func (t *memorySnapshot) Files(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for p, b := range t.files {
		if dir == "" || strings.HasPrefix(p, dir+"/") {
			out[p] = b
		}
	}
	return out, nil
}
