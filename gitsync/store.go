package gitsync

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// ErrNoChanges is returned by a write whose files equal what the branch
// already holds. No commit is made. For a writer this is success: what it
// wanted is already there.
var ErrNoChanges = errors.New("no changes to commit")

// Snapshot is a read-only view of the files at one commit.
type Snapshot interface {
	// Commit is the commit the snapshot shows, or "" for a branch that
	// does not exist yet (or a directory that is not a git repository).
	Commit() string
	// CommitTime is the commit's committer time; zero without a commit.
	CommitTime() time.Time
	// ReadFile returns the file's content, or an error wrapping
	// fs.ErrNotExist.
	ReadFile(name string) ([]byte, error)
	// Files returns every file under dir ("" for all), keyed by its full
	// slash-separated path. A missing dir gives an empty map.
	Files(dir string) (map[string][]byte, error)
}

// Store is a branch that writers update through Update. Repository and Dir
// implement it.
type Store interface {
	// Snapshot returns the current head.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Update calls fn on the current head and writes the Change it returns
	// as one commit. If the head moved before the write landed, fn is
	// called again on the new head.
	Update(ctx context.Context, fn UpdateFunc) (Result, error)
}

// UpdateFunc computes a writer's files on a head. It may be called more
// than once for one Update, each time on a newer head, so it must be a
// function of the snapshot and the writer's own state only.
type UpdateFunc func(ctx context.Context, head Snapshot) (*Change, error)

// Signature names a commit's author or committer.
type Signature struct {
	Name  string
	Email string
	When  time.Time
}

// TrailerCompanion marks a companion's commit (Change.Companions) with the folder it shows, so
// that it is never taken for a commit of the branch itself, which its writer signed alike.
const TrailerCompanion = "Gitbroker-Folder"

// Trailer is a "Key: Value" line at the end of a commit message.
type Trailer struct {
	Key   string
	Value string
}

// Change is the new state of a writer's owned paths.
type Change struct {
	// Owned lists the paths the writer owns. A path ending in "/" owns
	// everything under that folder.
	Owned []string
	// Files is the complete new content of the owned paths. An owned path
	// that holds a file now but is missing here is deleted. Every key
	// must be under Owned.
	Files map[string][]byte
	// Edits, when set, take the place of Files for a writer that knows what the head holds
	// (it wrote that commit): they are the paths whose content differs from the head's, with
	// their new content, nil deleting one. EditsBase is the head's commit they were computed on,
	// which must be the head the UpdateFunc was given; Files must then be nil. The commit is
	// then built from the edits alone, with no pass over the owned files. Every key must be
	// under Owned.
	Edits     map[string][]byte
	EditsBase string
	// Message is the commit message's subject and body; Trailers are
	// appended after a blank line.
	Message   string
	Trailers  []Trailer
	Author    Signature
	Committer Signature
	// Companions are further branches, each showing one folder of this branch, that move with
	// it in the same atomic push (a Flux source per folder follows one, so a change to one folder
	// moves one source). A companion, keyed by its short branch name and mapped to its folder,
	// points at a commit of its own, with no parent, whose tree holds that folder alone, signed
	// like the branch's commits. It gets a new one when its tip is missing, is refused by
	// KeepCompanion, or shows anything else; otherwise it stays where it is, also when the
	// branch itself has nothing to commit. Every other branch under CompanionPrefixes (each
	// ending in "/") is deleted.
	// Companions are only pushed with the Repository's own branch, never to a review branch, and
	// need a server that accepts atomic pushes; a work tree (Dir) has no branches and ignores
	// them.
	Companions        map[string]string
	CompanionPrefixes []string
	// KeepCompanion reports whether a companion may stay at its current tip (whether this
	// writer signed it); nil keeps any tip that shows the folder's tree.
	KeepCompanion func(*Commit) bool
	// Overwrite commits even when the files are what the head holds already: the head is not
	// the writer's own (someone else pushed a commit with the same tree, which the writer must
	// not leave as the head, since it did not sign it).
	Overwrite bool
}

// Result describes how an Update went.
type Result struct {
	// Base is the head the final attempt was computed on.
	Base string
	// Commit is the commit that landed; "" with ErrNoChanges.
	Commit string
	// Attempts counts pushes tried, including the one that landed.
	Attempts int
	// Conflicts counts pushes refused because the branch had moved.
	Conflicts int
	// Retries counts fetches or pushes repeated after a transient error
	// (network, server).
	Retries int
	// CompanionsMoved counts the companion branches the push created, moved or deleted.
	CompanionsMoved int
	// CompanionBranches are the short names of those branches, in the order pushed.
	CompanionBranches []string
	// Replaced, with WithOwnHistory, is the head the push replaced because its writer had not
	// signed it (or the branch had moved away from the writer's last push); "" otherwise.
	Replaced string
	// Elapsed is the time from the first fetch to the end.
	Elapsed time.Duration
}

// FullMessage renders the commit message with its trailers.
func (c *Change) FullMessage() string {
	msg := strings.TrimRight(c.Message, "\n")
	if len(c.Trailers) == 0 {
		return msg + "\n"
	}
	var b strings.Builder
	b.WriteString(msg)
	b.WriteString("\n\n")
	for _, t := range c.Trailers {
		fmt.Fprintf(&b, "%s: %s\n", t.Key, t.Value)
	}
	return b.String()
}

// validate checks the change's paths and signatures before anything is
// written.
func (c *Change) validate() error {
	if c == nil {
		return errors.New("writer returned no change")
	}
	if len(c.Owned) == 0 {
		return errors.New("change owns no paths")
	}
	for _, o := range c.Owned {
		if err := checkPath(strings.TrimSuffix(o, "/")); err != nil {
			return fmt.Errorf("owned path %q: %w", o, err)
		}
	}
	if c.Edits != nil && c.Files != nil {
		return errors.New("change has both Files and Edits")
	}
	for _, files := range []map[string][]byte{c.Files, c.Edits} {
		for name := range files {
			if err := checkPath(name); err != nil {
				return fmt.Errorf("file %q: %w", name, err)
			}
			if !c.owns(name) {
				return fmt.Errorf("file %q is not under the change's owned paths %v", name, c.Owned)
			}
		}
	}
	if c.Author.Name == "" || c.Author.Email == "" || c.Author.When.IsZero() {
		return errors.New("change has no author name, email or time")
	}
	if strings.TrimSpace(c.Message) == "" {
		return errors.New("change has no commit message")
	}
	for _, prefix := range c.CompanionPrefixes {
		if !strings.HasSuffix(prefix, "/") || len(prefix) < 2 {
			return fmt.Errorf("companion prefix %q does not name a folder of branches (it must end in \"/\")", prefix)
		}
	}
	for name, folder := range c.Companions {
		if !c.companion(name) {
			return fmt.Errorf("companion branch %q is not under the companion prefixes %q", name, c.CompanionPrefixes)
		}
		if err := plumbing.NewBranchReferenceName(name).Validate(); err != nil {
			return fmt.Errorf("companion branch %q: %w", name, err)
		}
		if err := checkPath(folder); err != nil {
			return fmt.Errorf("companion %q folder %q: %w", name, folder, err)
		}
	}
	return nil
}

// companion reports whether branch is under one of the companion prefixes.
func (c *Change) companion(branch string) bool {
	return slices.ContainsFunc(c.CompanionPrefixes, func(p string) bool { return strings.HasPrefix(branch, p) })
}

func (c *Change) committer() Signature {
	if c.Committer.Name == "" {
		return c.Author
	}
	return c.Committer
}

// owns reports whether name is one of the owned paths or under an owned
// folder.
func (c *Change) owns(name string) bool {
	for _, o := range c.Owned {
		if strings.HasSuffix(o, "/") {
			if strings.HasPrefix(name, o) {
				return true
			}
		} else if name == o {
			return true
		}
	}
	return false
}

// ownedDirs returns the owned folders without their trailing slash.
func (c *Change) ownedDirs() []string {
	var dirs []string
	for _, o := range c.Owned {
		if strings.HasSuffix(o, "/") {
			dirs = append(dirs, strings.TrimSuffix(o, "/"))
		}
	}
	return dirs
}

// patch computes the per-path edits that turn the head into the change:
// a nil value deletes. lookup returns a path's current content hash (ok
// false when absent) and list returns the files under an owned folder;
// hash gives the hash new content at a path would have. Only differences
// are kept.
func (c *Change) patch(
	lookup func(name string) (string, bool, error),
	list func(dir string) ([]string, error),
	hash func(name string, content []byte) string,
) (map[string][]byte, error) {
	edits := make(map[string][]byte)
	for name, content := range c.Files {
		old, ok, err := lookup(name)
		if err != nil {
			return nil, err
		}
		if content == nil {
			content = []byte{}
		}
		if !ok || old != hash(name, content) {
			edits[name] = content
		}
	}
	for _, o := range c.Owned {
		if strings.HasSuffix(o, "/") {
			continue
		}
		if _, keep := c.Files[o]; keep {
			continue
		}
		if _, ok, err := lookup(o); err != nil {
			return nil, err
		} else if ok {
			edits[o] = nil
		}
	}
	for _, dir := range c.ownedDirs() {
		names, err := list(dir)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if _, keep := c.Files[name]; !keep {
				edits[name] = nil
			}
		}
	}
	return edits, nil
}

// checkPath refuses paths that could escape the repository or that git
// cannot hold.
func checkPath(name string) error {
	switch {
	case name == "":
		return errors.New("empty path")
	case strings.HasPrefix(name, "/"):
		return errors.New("absolute path")
	case path.Clean(name) != name:
		return errors.New("path is not clean")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." || part == "." || part == ".git" {
			return fmt.Errorf("path element %q is not allowed", part)
		}
	}
	return nil
}

// editsOn returns the change's Edits as the edits to base, refusing edits computed on another
// commit: applied to the wrong base they would silently keep or drop files.
func (c *Change) editsOn(base plumbing.Hash) (map[string][]byte, error) {
	head := ""
	if !base.IsZero() {
		head = base.String()
	}
	if c.EditsBase != head {
		return nil, fmt.Errorf("the change's edits were computed on %q, but the head is %q", c.EditsBase, head)
	}
	return c.Edits, nil
}

// CommitTrailers returns the trailers of a raw commit object (Commit.Raw): the "Key: Value"
// lines of its message's last paragraph. A signature header is not part of the message.
func CommitTrailers(raw []byte) []Trailer {
	_, msg, ok := strings.Cut(string(raw), "\n\n")
	if !ok {
		return nil
	}
	msg = strings.TrimRight(msg, "\n")
	if i := strings.LastIndex(msg, "\n\n"); i >= 0 {
		msg = msg[i+2:]
	}
	var out []Trailer
	for _, line := range strings.Split(msg, "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil // not a trailer paragraph
		}
		out = append(out, Trailer{Key: k, Value: v})
	}
	return out
}

// TrailerValue returns the value of the first trailer named key in a raw commit object.
func TrailerValue(raw []byte, key string) (string, bool) {
	for _, t := range CommitTrailers(raw) {
		if t.Key == key {
			return t.Value, true
		}
	}
	return "", false
}
