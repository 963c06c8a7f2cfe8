package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/render"
)

// readTree loads every input and owned file of the repository work tree at dir.
func readTree(dir string) (render.Tree, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("reading repository %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("reading repository %s: not a directory", dir)
	}
	return readFS(os.DirFS(dir))
}

// readFS loads every input and owned file of a repository file system.
func readFS(fsys fs.FS) (render.Tree, error) {
	t := render.Tree{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		if !render.IsInput(p) && !render.IsOwned(p) {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		t[p] = data
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading repository: %w", err)
	}
	return t, nil
}

// writeOwned makes rendered/ and history/ under dir hold exactly the owned files of t. Each file
// is written to a temporary name and renamed, so a reader never sees half a file.
func writeOwned(dir string, t render.Tree) error {
	have, err := readTree(dir)
	if err != nil {
		return err
	}
	for _, p := range t.Paths() {
		if !render.IsOwned(p) {
			continue
		}
		if old, ok := have[p]; ok && bytes.Equal(old, t[p]) {
			continue
		}
		if err := writeFile(dir, p, t[p]); err != nil {
			return err
		}
	}
	for _, p := range have.Owned().Paths() {
		if _, keep := t[p]; !keep {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing %s: %w", p, err)
			}
		}
	}
	return removeEmptyDirs(dir, []string{"rendered", "history"})
}

// writeFile writes one file atomically, creating its directory.
func writeFile(dir, p string, data []byte) error {
	full := filepath.Join(dir, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(full), ".gitbroker-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), full)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", p, werr)
	}
	return nil
}

// writeAll writes every file of t under dir (used to materialize a repository).
func writeAll(dir string, t render.Tree) error {
	for _, p := range t.Paths() {
		if err := writeFile(dir, p, t[p]); err != nil {
			return err
		}
	}
	return nil
}

func removeEmptyDirs(dir string, roots []string) error {
	for _, root := range roots {
		var dirs []string
		err := filepath.WalkDir(filepath.Join(dir, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return fs.SkipAll
				}
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		if err != nil {
			return err
		}
		sep := string(filepath.Separator)
		sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], sep) > strings.Count(dirs[j], sep) })
		for _, d := range dirs {
			if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
				_ = os.Remove(d)
			}
		}
	}
	return nil
}
