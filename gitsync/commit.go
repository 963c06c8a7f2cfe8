package gitsync

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// commitBuilder writes a Change as new git objects on top of a base
// commit. It reads and writes only the trees on the changed paths; every
// other subtree is referenced by hash, so a commit's cost follows the size
// of the change, not of the repository.
type commitBuilder struct {
	s       storer.EncodedObjectStorer
	signer  Signer
	created []plumbing.Hash
}

// Signer signs a commit: given the commit object without its signature, it returns the
// armored signature that goes into the gpgsig header (trust.Signer makes git's SSH signatures).
type Signer interface {
	Sign(payload []byte) ([]byte, error)
}

// build writes the change on top of base (nil for a new branch) and returns
// the new commit and every object it created, which is what a push must
// send. It returns ErrNoChanges when the tree would not change, unless c.Overwrite.
func (b *commitBuilder) build(base *object.Commit, c *Change, known func(name string, content []byte) (plumbing.Hash, bool)) (plumbing.Hash, []plumbing.Hash, error) {
	if err := c.validate(); err != nil {
		return plumbing.ZeroHash, nil, err
	}
	var root *object.Tree
	if base != nil {
		t, err := base.Tree()
		if err != nil {
			return plumbing.ZeroHash, nil, fmt.Errorf("reading tree of %s: %w", base.Hash, err)
		}
		root = t
	}
	// Each folder's tree is decoded once per build: looking every file up from the root decodes
	// its folders again for each file (a thousand node inventories in one folder: a million
	// entries decoded).
	folders := map[string]map[string]object.TreeEntry{}
	entries := func(dir string) (map[string]object.TreeEntry, error) {
		if m, ok := folders[dir]; ok {
			return m, nil
		}
		m := map[string]object.TreeEntry{}
		t := root
		if dir != "" {
			sub, err := root.Tree(dir)
			switch {
			case errors.Is(err, object.ErrDirectoryNotFound), errors.Is(err, object.ErrEntryNotFound), errors.Is(err, plumbing.ErrObjectNotFound):
				t = nil
			case err != nil:
				return nil, fmt.Errorf("looking up %s: %w", dir, err)
			default:
				t = sub
			}
		}
		if t != nil {
			for _, e := range t.Entries {
				m[e.Name] = e
			}
		}
		folders[dir] = m
		return m, nil
	}
	var edits map[string][]byte
	var err error
	if c.Edits != nil {
		var head plumbing.Hash
		if base != nil {
			head = base.Hash
		}
		edits, err = c.editsOn(head)
	} else {
		edits, err = c.patch(
			func(name string) (string, bool, error) {
				if root == nil {
					return "", false, nil
				}
				dir, file := path.Split(name)
				m, err := entries(strings.TrimSuffix(dir, "/"))
				if err != nil {
					return "", false, err
				}
				e, ok := m[file]
				switch {
				case !ok || e.Mode == filemode.Dir:
					return "", false, nil
				case e.Mode != filemode.Regular && e.Mode != filemode.Executable:
					// A symbolic link or a submodule where the writer owns a file: present, and
					// never what the writer means, whatever it points at.
					return "", true, nil
				}
				return e.Hash.String(), true, nil
			},
			func(dir string) ([]string, error) { return listFiles(root, dir) },
			func(name string, content []byte) string {
				if h, ok := known(name, content); ok {
					return h.String()
				}
				return plumbing.ComputeHash(plumbing.BlobObject, content).String()
			},
		)
	}
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	if len(edits) == 0 && (!c.Overwrite || root == nil) {
		return plumbing.ZeroHash, nil, ErrNoChanges
	}
	treeHash := plumbing.ZeroHash
	if len(edits) == 0 {
		treeHash = root.Hash
	} else if treeHash, err = b.rewrite(root, "", edits); err != nil {
		return plumbing.ZeroHash, nil, err
	}
	if root != nil && treeHash == root.Hash && !c.Overwrite {
		return plumbing.ZeroHash, nil, ErrNoChanges
	}
	commit := &object.Commit{
		Author:    object.Signature{Name: c.Author.Name, Email: c.Author.Email, When: c.Author.When},
		Committer: object.Signature{Name: c.committer().Name, Email: c.committer().Email, When: c.committer().When},
		Message:   c.FullMessage(),
		TreeHash:  treeHash,
	}
	if base != nil {
		commit.ParentHashes = []plumbing.Hash{base.Hash}
	}
	h, err := b.commit(commit)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	return h, b.created, nil
}

// commit signs commit (when the builder has a signer) and writes it.
func (b *commitBuilder) commit(commit *object.Commit) (plumbing.Hash, error) {
	if b.signer != nil {
		unsigned := &plumbing.MemoryObject{}
		if err := commit.EncodeWithoutSignature(unsigned); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("encoding commit: %w", err)
		}
		rd, err := unsigned.Reader()
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("encoding commit: %w", err)
		}
		payload, err := io.ReadAll(rd)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("encoding commit: %w", err)
		}
		sig, err := b.signer.Sign(payload)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		commit.PGPSignature = string(sig)
	}
	h, err := b.store(commit)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("writing commit: %w", err)
	}
	return h, nil
}

// folderTree writes the root tree that holds only sub, at folder, and returns its hash.
func (b *commitBuilder) folderTree(folder string, sub plumbing.Hash) (plumbing.Hash, error) {
	h := sub
	parts := strings.Split(folder, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		t := &object.Tree{Entries: []object.TreeEntry{{Name: parts[i], Mode: filemode.Dir, Hash: h}}}
		var err error
		if h, err = b.store(t); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("writing tree: %w", err)
		}
	}
	return h, nil
}

// rewrite returns the hash of tree (nil if absent) with edits applied. Edit
// keys are relative to the tree; a nil value deletes. An empty result is
// the zero hash: git keeps no empty folders.
func (b *commitBuilder) rewrite(tree *object.Tree, prefix string, edits map[string][]byte) (plumbing.Hash, error) {
	entries := make(map[string]object.TreeEntry)
	if tree != nil {
		for _, e := range tree.Entries {
			entries[e.Name] = e
		}
	}
	sub := make(map[string]map[string][]byte)
	for _, name := range slices.Sorted(maps.Keys(edits)) {
		content := edits[name]
		dir, rest, nested := strings.Cut(name, "/")
		if nested {
			if sub[dir] == nil {
				sub[dir] = make(map[string][]byte)
			}
			sub[dir][rest] = content
			continue
		}
		if old, ok := entries[name]; ok && old.Mode == filemode.Dir {
			return plumbing.ZeroHash, fmt.Errorf("writing %s%s: a folder of that name exists", prefix, name)
		}
		if content == nil {
			delete(entries, name)
			continue
		}
		h, err := b.blob(content)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("writing %s%s: %w", prefix, name, err)
		}
		mode := filemode.Regular
		if old, ok := entries[name]; ok && old.Mode == filemode.Executable {
			mode = filemode.Executable
		}
		entries[name] = object.TreeEntry{Name: name, Mode: mode, Hash: h}
	}
	for _, dir := range slices.Sorted(maps.Keys(sub)) {
		var child *object.Tree
		if old, ok := entries[dir]; ok {
			if old.Mode != filemode.Dir {
				return plumbing.ZeroHash, fmt.Errorf("writing under %s%s/: a file of that name exists", prefix, dir)
			}
			t, err := object.GetTree(b.s, old.Hash)
			if err != nil {
				return plumbing.ZeroHash, fmt.Errorf("reading tree %s%s: %w", prefix, dir, err)
			}
			child = t
		}
		h, err := b.rewrite(child, prefix+dir+"/", sub[dir])
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if h.IsZero() {
			delete(entries, dir)
		} else {
			entries[dir] = object.TreeEntry{Name: dir, Mode: filemode.Dir, Hash: h}
		}
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, nil
	}
	list := make([]object.TreeEntry, 0, len(entries))
	for _, e := range entries {
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool { return treeOrder(list[i]) < treeOrder(list[j]) })
	if tree != nil && sameEntries(tree.Entries, list) {
		return tree.Hash, nil
	}
	return b.store(&object.Tree{Entries: list})
}

// treeOrder is git's tree entry order: folders sort as if their name
// ended in "/".
func treeOrder(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

func sameEntries(a, b []object.TreeEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (b *commitBuilder) blob(content []byte) (plumbing.Hash, error) {
	obj := b.s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(content)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(content); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return b.put(obj)
}

type encoder interface {
	Encode(plumbing.EncodedObject) error
}

func (b *commitBuilder) store(o encoder) (plumbing.Hash, error) {
	obj := b.s.NewEncodedObject()
	if err := o.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return b.put(obj)
}

func (b *commitBuilder) put(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	h, err := b.s.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	b.created = append(b.created, h)
	return h, nil
}
