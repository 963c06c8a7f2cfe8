package gitsynctest

import (
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// SetRef points branch at commit in the server's repository, as a force push of that commit
// would: a replay or a rollback by someone holding a credential. An empty commit deletes it.
func (s *Server) SetRef(branch, commit string) {
	s.t.Helper()
	if commit == "" {
		if s.On(branch).Head() != "" { // git refuses to delete a missing ref that a ref under it blocks
			Git(s.t, s.Bare(), "update-ref", "-d", "refs/heads/"+branch)
		}
		return
	}
	Git(s.t, s.Bare(), "update-ref", "refs/heads/"+branch, commit)
}

// SeedBranches writes each branch as one unsigned commit holding exactly its files, straight
// into the server's object store: a thousand node refs in a second, where a thousand pushes
// would take minutes. The repository is then packed, objects and refs, as a maintained
// server's is, and git's automatic gc turned off: tens of thousands of loose objects would
// otherwise start a gc in the background of the next push, which competes with what a test or
// benchmark measures and may still be writing when the test's folder is removed.
func (s *Server) SeedBranches(branches map[string]map[string][]byte) {
	s.t.Helper()
	s.seedBranches(branches)
	Git(s.t, s.Bare(), "gc", "--quiet")
	Git(s.t, s.Bare(), "config", "gc.auto", "0")
}

func (s *Server) seedBranches(branches map[string]map[string][]byte) {
	s.t.Helper()
	repo, err := git.PlainOpen(s.Bare())
	if err != nil {
		s.t.Fatal(err)
	}
	st := repo.Storer
	put := func(o interface {
		Encode(plumbing.EncodedObject) error
	}) plumbing.Hash {
		obj := st.NewEncodedObject()
		if err := o.Encode(obj); err != nil {
			s.t.Fatal(err)
		}
		h, err := st.SetEncodedObject(obj)
		if err != nil {
			s.t.Fatal(err)
		}
		return h
	}
	blob := func(content []byte) plumbing.Hash {
		obj := st.NewEncodedObject()
		obj.SetType(plumbing.BlobObject)
		w, _ := obj.Writer()
		_, _ = w.Write(content)
		_ = w.Close()
		h, err := st.SetEncodedObject(obj)
		if err != nil {
			s.t.Fatal(err)
		}
		return h
	}
	// tree writes the files under dir ("" for the root) and returns its hash.
	var tree func(files map[string][]byte, dir string) plumbing.Hash
	tree = func(files map[string][]byte, dir string) plumbing.Hash {
		entries := map[string]object.TreeEntry{}
		for p, content := range files {
			rest, ok := strings.CutPrefix(p, dir)
			if !ok {
				continue
			}
			name, _, sub := strings.Cut(rest, "/")
			if _, done := entries[name]; done {
				continue
			}
			if sub {
				entries[name] = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: tree(files, dir+name+"/")}
			} else {
				entries[name] = object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: blob(content)}
			}
		}
		t := &object.Tree{}
		for _, e := range entries {
			t.Entries = append(t.Entries, e)
		}
		// git sorts a tree's entries by name, a folder's as if it ended in "/".
		sort.Slice(t.Entries, func(i, j int) bool {
			key := func(e object.TreeEntry) string {
				if e.Mode == filemode.Dir {
					return e.Name + "/"
				}
				return e.Name
			}
			return key(t.Entries[i]) < key(t.Entries[j])
		})
		return put(t)
	}
	when := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sig := object.Signature{Name: "gitsynctest", Email: "seed@gitbroker.dev", When: when}
	for branch, files := range branches {
		commit := put(&object.Commit{Author: sig, Committer: sig, Message: "seed\n", TreeHash: tree(files, "")})
		if err := st.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName(branch), commit)); err != nil {
			s.t.Fatal(err)
		}
	}
}

// AddGitlink commits a submodule entry (a gitlink to commit) at path on the branch, signed with
// signingKey when one is given: what no writer writes, pushed by someone holding a credential.
func (s *Server) AddGitlink(signingKey, path, commit, message string) string {
	s.t.Helper()
	work := s.t.TempDir()
	Git(s.t, "", "clone", "--quiet", "--depth=1", "--branch", s.branch, "file://"+s.Bare(), work)
	Git(s.t, work, "update-index", "--add", "--cacheinfo", "160000,"+commit+","+path)
	args := []string{"-c", "user.name=A Person", "-c", "user.email=person@example.com"}
	if signingKey != "" {
		args = append(args, "-c", "gpg.format=ssh", "-c", "user.signingkey="+signingKey, "-c", "commit.gpgsign=true")
	}
	Git(s.t, work, append(args, "commit", "--quiet", "-m", message)...)
	Git(s.t, work, "push", "--quiet", "file://"+s.Bare(), "HEAD:refs/heads/"+s.branch)
	return s.Head()
}
