// Package publication owns what the renderer publishes for the writers that run on nodes and
// beside the cluster, and how they check it with the renderer's pinned key (RendererKeys): the
// Configurations it verified, on api.ConfigurationsBranch (Configurations, an agent's source),
// and the tips of each writer's ref it accepted last, on api.AcceptedBranch (AcceptedTip, what a
// restarted agent or recorder names when its ref was moved back). It links neither the renderer
// nor its verification of the people's branch (package verify), so the edge agent carries
// neither.
package publication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/trust"
)

// Files are the single files the renderer publishes beside configurations/: the settings, the
// enrolment files (so an agent can tell whether the renderer accepts its key) and the instance
// digests the render gave that are not Akri's 3-byte ones.
var Files = []string{api.SettingsPath, api.AllowedSignersPath, api.RevokedKeysPath, api.InstanceDigestsPath}

// IsPublished reports whether a path is one the renderer publishes for the agents.
func IsPublished(p string) bool {
	return slices.Contains(Files, p) || api.IsConfigurationPath(p)
}

// HasAllowedSigners reports whether a source branch's snapshot declares who may sign (so an
// agent reading Configurations from it unverified should be told to pin the renderer's key).
func HasAllowedSigners(s gitsync.Snapshot) bool {
	_, err := s.ReadFile(api.AllowedSignersPath)
	return err == nil
}

// RendererKeys are the renderer's public keys as an agent pins them, from a file given on its
// command line (never from git): git's allowed_signers format, whose lines for principal
// renderer count (the line the renderer logs when it makes its key), or the armored OpenPGP
// public key of a renderer that signs with OpenPGP.
type RendererKeys struct {
	file    string
	signers *trust.AllowedSigners
	ring    *trust.KeyRing
}

// ParseRendererKeys reads a RendererKeys file; one that names no renderer key is an error, since
// it would trust nothing and stop every agent.
func ParseRendererKeys(file string, data []byte) (*RendererKeys, error) {
	k := &RendererKeys{file: file}
	if trust.IsOpenPGPPublicKey(data) {
		ring, err := trust.ParseKeyRing(map[string][]byte{file: data})
		if err != nil {
			return nil, err
		}
		if ring.Empty() {
			return nil, fmt.Errorf("%s: holds no OpenPGP public key", file)
		}
		k.ring = ring
		return k, nil
	}
	a, err := trust.ParseAllowedSigners(file, data)
	if err != nil {
		return nil, err
	}
	if !a.Enrolled(trust.PrincipalRenderer, time.Now()) {
		return nil, fmt.Errorf("%s: names no key for principal %s (a line \"%s ssh-ed25519 AAAA...\", as the renderer logs it)", file, trust.PrincipalRenderer, trust.PrincipalRenderer)
	}
	k.signers = a
	return k, nil
}

// Signed reports why c is not signed by the renderer; nil when it is.
func (k *RendererKeys) Signed(c *gitsync.Commit, when time.Time) error {
	payload, armored := trust.SplitSignedCommit(c.Raw)
	if len(armored) == 0 {
		return errors.New("unsigned")
	}
	if k.ring != nil {
		if !trust.IsOpenPGP(armored) {
			return fmt.Errorf("not signed with the OpenPGP key in %s", k.file)
		}
		_, err := k.ring.Verify(payload, armored, when)
		return err
	}
	sig, err := trust.VerifySignature(payload, armored)
	if err != nil {
		return err
	}
	if !k.signers.Allows(sig, trust.PrincipalRenderer, when) {
		return fmt.Errorf("signed by %s, which %s does not list as %s", sig.Fingerprint, k.file, trust.PrincipalRenderer)
	}
	return nil
}

// Reader is what Configurations reads api.ConfigurationsBranch with; a *gitsync.Repository
// opened on that branch implements it.
type Reader interface {
	Snapshot(ctx context.Context) (gitsync.Snapshot, error)
	CommitOf(ctx context.Context, branch, hash string) (*gitsync.Commit, error)
	IsAncestor(ctx context.Context, branch, ancestor, tip string) (bool, error)
}

// Configurations is an agent's source of Configurations: the newest commit on
// api.ConfigurationsBranch
// that the pinned renderer key signed and marked as published Configurations. A tip that is
// not (unsigned, another key, a render or folder commit, a rollback to an older publication)
// is refused, and the last accepted publication stands in for it, so whoever can push to the
// branch can neither feed the agent Configurations the renderer did not verify nor stop it:
// the worst they can do is delay a change until the renderer puts the branch back, which it
// does on its next render.
type Configurations struct {
	Repo Reader
	Keys *RendererKeys
	// Now is the clock certificates are checked against; time.Now when nil.
	Now func() time.Time

	mu   sync.Mutex
	last struct {
		commit string
		when   time.Time
		snap   gitsync.Snapshot
	}
	// refused is why the branch's tip was last refused, "" when it was not.
	refused string
	// floor is the publication the agent's own last commit names (SetFloor): with nothing
	// taken yet, an older one is refused as a rollback, as after the last one taken.
	floor struct {
		commit string
		when   time.Time
	}
}

// Used returns the publication taken last and its committer time, for the agent's commit
// (TrailerPublication); "" before one is taken.
func (p *Configurations) Used() (string, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last.commit, p.last.when
}

// SetFloor gives a restarted agent's floor: the publication its own last commit names
// (TrailerPublication). Nothing older that does not descend from it is taken.
func (p *Configurations) SetFloor(commit string, when time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.floor.commit, p.floor.when = commit, when
}

// Snapshot returns the Configurations to discover with. err is set when the branch's tip was
// refused (the last accepted publication is then returned with it, when there is one, and snap
// is nil otherwise) or could not be read.
func (p *Configurations) Snapshot(ctx context.Context) (snap gitsync.Snapshot, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	head, err := p.Repo.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", api.ConfigurationsBranch, err)
	}
	if head.Commit() != "" && head.Commit() == p.last.commit {
		return p.last.snap, nil
	}
	why := p.accept(ctx, head)
	if why == nil {
		p.refused = ""
		return p.last.snap, nil
	}
	p.refused = why.Error()
	err = &RefusedError{Commit: head.Commit(), Why: why}
	if p.last.snap == nil {
		return nil, err
	}
	return p.last.snap, err
}

// Refused is why the branch's tip was last refused, "" when the last read took it.
func (p *Configurations) Refused() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// RefusedError is a tip of api.ConfigurationsBranch the agent does not take.
type RefusedError struct {
	Commit string
	Why    error
}

func (e *RefusedError) Error() string {
	if e.Commit == "" {
		return fmt.Sprintf("%s: %v", api.ConfigurationsBranch, e.Why)
	}
	return fmt.Sprintf("%s: commit %s refused: %v", api.ConfigurationsBranch, short(e.Commit), e.Why)
}

func (e *RefusedError) Unwrap() error { return e.Why }

// accept checks head and, when it is a publication to take, makes it the last accepted one.
func (p *Configurations) accept(ctx context.Context, head gitsync.Snapshot) error {
	if head.Commit() == "" {
		return errors.New("the branch does not exist (yet): the renderer publishes it on its first render with a --signing-key")
	}
	c, err := p.Repo.CommitOf(ctx, api.ConfigurationsBranch, head.Commit())
	if err != nil {
		return err
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	if err := p.Keys.Signed(c, now()); err != nil {
		return err
	}
	if _, ok := gitsync.TrailerValue(c.Raw, api.TrailerConfigurations); !ok {
		return fmt.Errorf("the renderer signed it, but not as published Configurations (no %s trailer)", api.TrailerConfigurations)
	}
	last, lastWhen, what := p.last.commit, p.last.when, "the publication taken last"
	if last == "" {
		last, lastWhen, what = p.floor.commit, p.floor.when, "the publication this node's own last commit used"
	}
	if last != "" && c.Hash != last && !c.When.After(lastWhen) {
		// Signed, and not newer than what was taken: an older publication put back, unless it
		// descends from the last one (a renderer whose clock runs behind).
		ok, err := p.Repo.IsAncestor(ctx, api.ConfigurationsBranch, last, c.Hash)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("older than %s, %s: a rollback", short(last), what)
		}
	}
	files := map[string][]byte{}
	for _, path := range Files {
		if b, err := head.ReadFile(path); err == nil {
			files[path] = b
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	configs, err := head.Files(api.ConfigurationsDir)
	if err != nil {
		return err
	}
	for path, b := range configs {
		if IsPublished(path) {
			files[path] = bytes.Clone(b)
		}
	}
	p.last.commit, p.last.when = c.Hash, c.When
	p.last.snap = gitsync.MemorySnapshot(c.Hash, files)
	return nil
}

// AcceptedTip returns what a writer that must start a new line on ref (gitsync.WithRecoverFrom)
// reads to name the tip it replaces: the tip of ref the renderer accepted last, from the
// accepted-tips shard of ref (shard, opened on api.AcceptedBranch(ref)), read only when its
// head is a commit the pinned renderer key signed that shows that shard's folder. The shard is
// a few kilobytes at any fleet size; the rendered tree it is copied from is hundreds of
// megabytes at 100,000 nodes, far above what an agent may fetch. Anyone who can push there
// could otherwise name any tip: a writer that named one the renderer never accepted would be
// refused for good. A head that is not the renderer's (a commit pushed on top) is an error
// until the renderer puts the branch back, with its next render; the writer reads it again
// until it sees its line accepted (gitsync.WithAcceptedRecheck), which also undoes an older
// shard put back as the head. A shard branch that does not exist names nothing: nothing of
// ref's was accepted yet, or the renderer re-creates the branch with its next render.
func AcceptedTip(shard Shard, keys *RendererKeys, ref string) func(ctx context.Context) (string, error) {
	name := api.AcceptedShard(ref)
	return func(ctx context.Context) (string, error) {
		data, _, err := readShard(ctx, shard, keys, name, api.AcceptedFile(name), "the accepted tip")
		if err != nil || data == nil {
			return "", err
		}
		return api.WriterTip(data, ref), nil
	}
}

// Shard is a writer's accepted-tips shard: the branch api.AcceptedBranch(ref) opened read-only.
type Shard interface {
	Snapshot(ctx context.Context) (gitsync.Snapshot, error)
}

// Shares returns what node's agent may offer of its shared devices (docs/DESIGN.md, "Devices
// counted once across the cluster"): its slots of each shared instance, by instance, from the
// shares of its inventory ref's accepted shard (api.SharesFile), read under the same checks
// as AcceptedTip. A shard with no shares file, or a branch that does not exist yet, gives no
// slot. An error gives none either, and the agent keeps the shares it read last: a head that is
// not the renderer's, one committed before the head read last (an older shard put back: its shares
// were the renderer's once, not now), and the branch gone after a read. The renderer puts the
// shard back with its next render.
func Shares(shard Shard, keys *RendererKeys, node string) func(ctx context.Context) (map[string]int, error) {
	name := api.AcceptedShard(api.InventoryBranch(node))
	branch := api.AcceptedBranchPrefix + name
	var mu sync.Mutex
	var last *gitsync.Commit
	return func(ctx context.Context) (map[string]int, error) {
		mu.Lock()
		defer mu.Unlock()
		data, c, err := readShard(ctx, shard, keys, name, api.SharesFile(name), "the device shares")
		switch {
		case err != nil:
			return nil, err
		case c == nil && last != nil:
			return nil, fmt.Errorf("%s is gone since %s was read: the device shares are not read", branch, short(last.Hash))
		case c != nil && last != nil && c.When.Before(last.When):
			// A shard's commits have no parents (the renderer force-moves the branch), so age
			// is told by the committer time, to the second: two renders in one second are
			// both taken.
			return nil, fmt.Errorf("%s: head %s is older than %s, read before: an older shard put back, the device shares are not read", branch, short(c.Hash), short(last.Hash))
		}
		if c != nil {
			last = c
		}
		return api.SharesOf(data, node), nil
	}
}

// readShard reads file from shard name's branch, and the head it read it at, only when that head
// is a commit the pinned renderer key signed that shows that shard's folder; nothing (no data,
// no commit, no error) when the branch does not exist, and no data when the head has no such
// file (an error for the accepted tips, which the renderer writes with every shard).
func readShard(ctx context.Context, shard Shard, keys *RendererKeys, name, file, what string) ([]byte, *gitsync.Commit, error) {
	branch, folder := api.AcceptedBranchPrefix+name, api.AcceptedFolder(name)
	if keys == nil {
		return nil, nil, fmt.Errorf("%s: no renderer key to check it with: %s is not read", branch, what)
	}
	snap, err := shard.Snapshot(ctx)
	if errors.Is(err, gitsync.ErrNoBranch) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	c := gitsync.HeadCommit(snap)
	if c == nil {
		return nil, nil, fmt.Errorf("%s: no commit to read", branch)
	}
	if err := keys.Signed(c, time.Now()); err != nil {
		return nil, nil, fmt.Errorf("%s: head %s is not the renderer's (%w): %s is not read", branch, short(c.Hash), err, what)
	}
	if shows, ok := gitsync.TrailerValue(c.Raw, gitsync.TrailerCompanion); !ok || shows != folder {
		return nil, nil, fmt.Errorf("%s: head %s is signed by the renderer but does not show %s: %s is not read", branch, short(c.Hash), folder, what)
	}
	data, err := snap.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		if file == api.AcceptedFile(name) {
			return nil, nil, fmt.Errorf("%s: head %s has no %s: %s is not read", branch, short(c.Hash), file, what)
		}
		return nil, c, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return data, c, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
