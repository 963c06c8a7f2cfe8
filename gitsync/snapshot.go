package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// listFiles returns the full paths of the entries under dir in root that are not folders.
func listFiles(root *object.Tree, dir string) ([]string, error) {
	if root == nil {
		return nil, nil
	}
	t := root
	if dir != "" {
		sub, err := root.Tree(dir)
		if errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading folder %s: %w", dir, err)
		}
		t = sub
	}
	var names []string
	w := object.NewTreeWalker(t, true, nil)
	defer w.Close()
	for {
		name, e, err := w.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("walking %s: %w", dir, err)
		}
		// Every entry but a folder: files and symbolic links, and submodules, which a writer
		// never writes, so one planted in its folder goes.
		if e.Mode != filemode.Dir {
			names = append(names, joinPath(dir, name))
		}
	}
	return names, nil
}

// treeSnapshot reads files from a commit's tree in the object store.
type treeSnapshot struct {
	c      *object.Commit
	commit string
	when   time.Time
	root   *object.Tree
	// maxFile bounds one file read (0: no bound).
	maxFile int64
	// replaces says the snapshot is a writer's own commit below the branch's head (Replaces).
	replaces bool

	// read remembers the blob hash of every file handed out, so a change
	// that writes the same bytes back needs no hashing.
	mu   sync.Mutex
	read map[string]readFile
}

type readFile struct {
	content []byte
	hash    plumbing.Hash
}

func (s *treeSnapshot) remember(name string, content []byte, hash plumbing.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read == nil {
		s.read = map[string]readFile{}
	}
	// A copy: the caller may change the slice it was given.
	s.read[name] = readFile{append([]byte(nil), content...), hash}
}

// known returns the hash of content if it is what the snapshot handed out
// for name.
func (s *treeSnapshot) known(name string, content []byte) (plumbing.Hash, bool) {
	s.mu.Lock()
	f, ok := s.read[name]
	s.mu.Unlock()
	if ok && bytes.Equal(f.content, content) {
		return f.hash, true
	}
	return plumbing.ZeroHash, false
}

func (s *treeSnapshot) CommitTime() time.Time { return s.when }

func (s *treeSnapshot) Commit() string { return s.commit }

func (s *treeSnapshot) ReadFile(name string) ([]byte, error) {
	if s.root == nil {
		return nil, fmt.Errorf("reading %s: %w", name, fs.ErrNotExist)
	}
	f, err := s.root.File(name)
	if errors.Is(err, object.ErrFileNotFound) {
		// go-git says so of a file whose blob is not in the store too: one the server left out.
		if e, ferr := s.root.FindEntry(name); ferr == nil && e.Mode.IsFile() {
			err = plumbing.ErrObjectNotFound
		}
	}
	if errors.Is(err, object.ErrFileNotFound) || errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
		return nil, fmt.Errorf("reading %s at %s: %w", name, s.commit, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s at %s: %w", name, s.commit, leftOut(err, s.maxFile))
	}
	b, err := readBlob(f, s.maxFile)
	if err == nil {
		s.remember(name, b, f.Hash)
	}
	return b, err
}

func (s *treeSnapshot) Files(dir string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	if s.root == nil {
		return out, nil
	}
	t := s.root
	if dir = strings.TrimSuffix(dir, "/"); dir != "" {
		sub, err := s.root.Tree(dir)
		if errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading folder %s at %s: %w", dir, s.commit, err)
		}
		t = sub
	}
	err := t.Files().ForEach(func(f *object.File) error {
		if !f.Mode.IsFile() {
			return nil
		}
		b, err := readBlob(f, s.maxFile)
		if err != nil {
			return err
		}
		name := joinPath(dir, f.Name)
		out[name] = b
		s.remember(name, b, f.Hash)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading folder %s at %s: %w", dir, s.commit, leftOut(err, s.maxFile))
	}
	return out, nil
}

// leftOut says a blob missing from a fetched commit's tree is one the server left out as
// larger than the fetch's blob limit (filter.go): a file too large to read.
func leftOut(err error, max int64) error {
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return fmt.Errorf("%w: the server left it out as larger than %d bytes", ErrTooLarge, max)
	}
	return err
}

func readBlob(f *object.File, max int64) ([]byte, error) {
	if max > 0 && f.Size > max {
		return nil, fmt.Errorf("reading %s: it is %d bytes: %w (%d bytes)", f.Name, f.Size, ErrTooLarge, max)
	}
	r, err := f.Reader()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name, err)
	}
	return b, nil
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Paths lists every entry of a snapshot's tree that is not a folder, without reading a blob:
// regular files, and apart from them whatever else a tree can hold (symbolic links and
// submodules), which a writer never writes. A reader checks what a ref holds with it before
// reading any content. A snapshot that is not a commit's (a work tree) lists its files.
func Paths(s Snapshot) (files, other []string, err error) {
	t, ok := s.(*treeSnapshot)
	if !ok {
		all, err := s.Files("")
		if err != nil {
			return nil, nil, err
		}
		for p := range all {
			files = append(files, p)
		}
		return files, nil, nil
	}
	if t.root == nil {
		return nil, nil, nil
	}
	w := object.NewTreeWalker(t.root, true, nil)
	defer w.Close()
	for {
		name, e, err := w.Next()
		if err == io.EOF {
			return files, other, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("walking the tree of %s: %w", t.commit, err)
		}
		switch {
		case e.Mode == filemode.Dir:
		case e.Mode == filemode.Regular || e.Mode == filemode.Executable || e.Mode == filemode.Deprecated:
			files = append(files, name)
		default:
			other = append(other, name)
		}
	}
}
