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

// readTree loads every input and owned file of the repository work tree at dir. Inputs that are
// not regular files (a symbolic link could point outside the repository, a FIFO would block)
// are not read: they come back in unreadable, each an invalid input for the render.
func readTree(dir string) (tree render.Tree, unreadable map[string]string, err error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading repository %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, nil, fmt.Errorf("reading repository %s: not a directory", dir)
	}
	return readFSWithUnreadable(os.DirFS(dir))
}

// readFS loads every input and owned file of a repository file system whose files are all
// regular (an embedded one).
func readFS(fsys fs.FS) (render.Tree, error) {
	t, unreadable, err := readFSWithUnreadable(fsys)
	if err == nil && len(unreadable) > 0 {
		err = fmt.Errorf("reading repository: %d files are not regular files", len(unreadable))
	}
	return t, err
}

func readFSWithUnreadable(fsys fs.FS) (render.Tree, map[string]string, error) {
	t := render.Tree{}
	unreadable := map[string]string{}
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
			kind := "not a regular file"
			if d.Type()&fs.ModeSymlink != 0 {
				kind = "a symbolic link"
			} else if d.Type()&fs.ModeNamedPipe != 0 {
				kind = "a named pipe (FIFO)"
			}
			if render.IsInput(p) {
				unreadable[p] = kind + "; inputs must be regular files, so it is not read"
				return nil
			}
			return fmt.Errorf("%s: %s; rendered/ and history/ hold only regular files", p, kind)
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		t[p] = data
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reading repository: %w", err)
	}
	return t, unreadable, nil
}

// writeOwned changes rendered/ and history/ under dir from prev (what the render read) to next.
func writeOwned(dir string, prev, next render.Tree) error {
	w := &treeWriter{dir: dir, made: map[string]bool{}}
	for _, p := range next.Paths() {
		if old, ok := prev[p]; render.IsOwned(p) && (!ok || !bytes.Equal(old, next[p])) {
			if err := w.write(p, next[p]); err != nil {
				return err
			}
		}
	}
	for _, p := range prev.Owned().Paths() {
		if _, keep := next[p]; !keep {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing %s: %w", p, err)
			}
		}
	}
	return removeEmptyDirs(dir, []string{"rendered", "history"})
}

// writeAll writes every file of t under dir (used to materialize a repository).
func writeAll(dir string, t render.Tree) error {
	w := &treeWriter{dir: dir, made: map[string]bool{}}
	for _, p := range t.Paths() {
		if err := w.write(p, t[p]); err != nil {
			return err
		}
	}
	return nil
}

// treeWriter writes files with as few system calls as it can, since a large fleet renders to
// tens of thousands of files: each directory is created once, and each file is written to a
// temporary name and renamed, so a reader never sees half a file.
type treeWriter struct {
	dir  string
	made map[string]bool
}

func (w *treeWriter) write(p string, data []byte) error {
	full := filepath.Join(w.dir, filepath.FromSlash(p))
	parent := filepath.Dir(full)
	if !w.made[parent] {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		w.made[parent] = true
	}
	tmp := filepath.Join(parent, ".gitbroker-tmp-"+filepath.Base(full))
	err := os.WriteFile(tmp, data, 0o644)
	if err == nil {
		err = os.Rename(tmp, full)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", p, err)
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
