package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gitbroker/gitbroker/api"
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
			if folder, ok := api.InventoryFolder(p + "/"); ok && folder == p {
				unreadable[p] = api.InventoryFolderError("")
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

// writeOwned writes the owned files of next that differ from prev, removes the owned files of
// prev that next no longer has, and then the folders that removal emptied.
func writeOwned(dir string, prev, next render.Tree) error {
	var writes []string
	for _, p := range next.Paths() {
		if old, ok := prev[p]; render.IsOwned(p) && (!ok || !bytes.Equal(old, next[p])) {
			writes = append(writes, p)
		}
	}
	if err := writeFiles(dir, next, writes); err != nil {
		return err
	}
	emptied := map[string]bool{}
	for _, p := range prev.Owned().Paths() {
		if _, keep := next[p]; !keep {
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing %s: %w", p, err)
			}
			emptied[path.Dir(p)] = true
		}
	}
	removeEmptyDirs(dir, emptied)
	return nil
}

// writeAll writes every file of t under dir (used to materialize a repository).
func writeAll(dir string, t render.Tree) error { return writeFiles(dir, t, t.Paths()) }

// writeFiles writes the files of t named by paths (sorted) under dir. A large fleet renders to
// tens of thousands of files, and creating a file costs the file system more than writing it:
// each folder is created once, and the files are written by several goroutines, each to a
// temporary name and renamed, so a reader never sees half a file. Each goroutine takes a whole
// folder at a time: a folder's entries are changed under its lock, and writers taking turns on
// one folder of thousands of files spend the time waiting for it in the kernel. The error is
// the one of the first path that failed.
func writeFiles(dir string, t render.Tree, paths []string) error {
	var folders [][]int
	byParent := map[string]int{}
	for i, p := range paths {
		parent := path.Dir(p)
		f, ok := byParent[parent]
		if !ok {
			if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(parent)), 0o755); err != nil {
				return fmt.Errorf("writing %s: %w", p, err)
			}
			f = len(folders)
			byParent[parent] = f
			folders = append(folders, nil)
		}
		folders[f] = append(folders[f], i)
	}
	// The largest folders first, so that none is left to one writer at the end.
	sort.SliceStable(folders, func(a, b int) bool { return len(folders[a]) > len(folders[b]) })
	errs := make([]error, len(paths))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				f := int(next.Add(1)) - 1
				if f >= len(folders) {
					return
				}
				// One folder's files are made relative to the folder (openat): the path to it
				// is looked up once, not once per file.
				first := paths[folders[f][0]]
				root, err := os.OpenRoot(filepath.Join(dir, filepath.FromSlash(path.Dir(first))))
				for _, i := range folders[f] {
					if err == nil {
						errs[i] = writeFile(root, path.Base(paths[i]), t[paths[i]])
					} else {
						errs[i] = err
					}
					if errs[i] != nil {
						errs[i] = fmt.Errorf("writing %s: %w", paths[i], errs[i])
					}
				}
				if root != nil {
					root.Close()
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// writers is how many files are written at once: file creation waits on the file system's
// journal more than on a CPU, so more writers than cores keep it busy.
const writers = 8

// writeFile writes data at name in root. A file that is not there yet is created in place
// (O_EXCL: never through a link someone put there); one that is there is replaced whole,
// through a temporary file and a rename, so a reader never sees it half written. A new file half
// written by a render that stopped differs from what the next render makes, which writes it
// again. os.Root keeps every name inside the folder.
func writeFile(root *os.Root, name string, data []byte) error {
	err := create(root, name, data)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	// Whatever is at the temporary name (a file a stopped render left, a link) goes first.
	tmp := ".gitbroker-tmp-" + name
	root.Remove(tmp)
	if err = create(root, tmp, data); err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}

// create makes a new file name in root holding data: fs.ErrExist when something is there.
func create(root *os.Root, name string, data []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(name)
	}
	return err
}

// removeEmptyDirs removes the folders of dirs (slash paths under root) that are now empty, and
// then their parents up to rendered/ and history/, which stay.
func removeEmptyDirs(root string, dirs map[string]bool) {
	for len(dirs) > 0 {
		parents := map[string]bool{}
		for d := range dirs {
			if d == "." || !strings.Contains(d, "/") {
				continue
			}
			if os.Remove(filepath.Join(root, filepath.FromSlash(d))) == nil {
				parents[path.Dir(d)] = true
			}
		}
		dirs = parents
	}
}
