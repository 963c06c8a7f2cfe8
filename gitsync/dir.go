package gitsync

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Dir is a Store over a plain directory (a work tree someone else commits,
// or a scratch folder). Updates write the owned files in place, each file
// atomically through a rename; there is no commit and no history.
type Dir struct {
	root string
	mu   sync.Mutex
}

var _ Store = &Dir{}

// NewDir returns a Store over root, which must exist.
func NewDir(root string) (*Dir, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", root, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("opening %s: not a directory", root)
	}
	return &Dir{root: root}, nil
}

// Snapshot implements Store. It reads the directory as it is now.
func (d *Dir) Snapshot(context.Context) (Snapshot, error) { return dirSnapshot{d.root}, nil }

// Update implements Store.
func (d *Dir) Update(ctx context.Context, fn UpdateFunc) (Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	start := time.Now()
	res := Result{Attempts: 1}
	snap := dirSnapshot{d.root}
	change, err := fn(ctx, snap)
	if err != nil {
		return res, err
	}
	if err := change.validate(); err != nil {
		return res, err
	}
	if change.Edits != nil {
		// A folder has no commit the edits could be known to apply to.
		return res, errors.New("a work tree takes a change's Files, not Edits")
	}
	edits, err := change.patch(
		func(name string) (string, bool, error) {
			b, err := os.ReadFile(filepath.Join(d.root, filepath.FromSlash(name)))
			if errors.Is(err, fs.ErrNotExist) {
				return "", false, nil
			}
			if err != nil {
				return "", false, err
			}
			return sum(b), true, nil
		},
		func(dir string) ([]string, error) {
			files, err := snap.Files(dir)
			return slices.Sorted(maps.Keys(files)), err
		},
		func(_ string, b []byte) string { return sum(b) },
	)
	if err != nil {
		return res, err
	}
	if len(edits) == 0 {
		res.Elapsed = time.Since(start)
		return res, ErrNoChanges
	}
	for _, name := range slices.Sorted(maps.Keys(edits)) {
		full := filepath.Join(d.root, filepath.FromSlash(name))
		if edits[name] == nil {
			if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return res, fmt.Errorf("removing %s: %w", name, err)
			}
			continue
		}
		if err := writeFileAtomic(full, edits[name]); err != nil {
			return res, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return string(h[:])
}

// writeFileAtomic writes through a temporary file and a rename, so a reader
// sees the old or the new content, never half of it.
func writeFileAtomic(name string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(name), ".gitbroker-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(content)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), name)
}

type dirSnapshot struct{ root string }

func (dirSnapshot) Commit() string { return "" }

func (dirSnapshot) CommitTime() time.Time { return time.Time{} }

func (s dirSnapshot) ReadFile(name string) ([]byte, error) {
	if err := checkPath(name); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return os.ReadFile(filepath.Join(s.root, filepath.FromSlash(name)))
}

func (s dirSnapshot) Files(dir string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	base := s.root
	if dir != "" {
		if err := checkPath(dir); err != nil {
			return nil, fmt.Errorf("reading %s: %w", dir, err)
		}
		base = filepath.Join(s.root, filepath.FromSlash(dir))
	}
	err := filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == base && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if e.IsDir() {
			if e.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	return out, nil
}
