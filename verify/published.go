package verify

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

// The Configurations the renderer verified, published for the agents (docs/DESIGN.md, "Trust: an
// edge credential reaches only its own node": agents read Configurations only from the renderer's
// verified commit). The branch lives in the repository that holds the node refs (--inventory-git
// when the fleet has one), so an agent reads it where it writes, and holds no credential for the
// people's branch.
const (
	// ConfigurationsBranch holds gitbroker.yaml and configurations/ exactly as the renderer
	// verified and rendered them, in commits the renderer signs.
	ConfigurationsBranch = api.ConfigurationsBranch
	// TrailerConfigurations marks a commit of ConfigurationsBranch and names the source commit
	// its files come from; a render commit or a folder commit, which the renderer signs too,
	// never carries it, so neither can be pushed there in its place.
	TrailerConfigurations = "Gitbroker-Configurations"
	// TrailerPublication, on an agent's inventory commit, names the publication it used.
	TrailerPublication = api.TrailerPublication
)

// isPublished reports whether a path is one the renderer publishes for the agents.
// The enrolment files go with them, so an agent can tell whether the renderer accepts its key.
func isPublished(p string) bool {
	return slices.Contains(publishedFiles, p) || api.IsConfigurationPath(p)
}

// publishedFiles are the single files published beside configurations/.
var publishedFiles = []string{api.SettingsPath, AllowedSignersPath, RevokedKeysPath, api.InstanceDigestsPath}

// PublishedChange is the commit that publishes, on ConfigurationsBranch, the settings and
// Configurations of in: what the renderer verified (and rendered) from source commit in.Source,
// and the instance digests the render gave that are not Akri's 3-byte ones (the render
// metadata's, api.InstanceDigestsPath), nil when there are none.
func PublishedChange(in *Inputs, instanceDigests []byte, author gitsync.Signature) *gitsync.Change {
	files := map[string][]byte{}
	for p, b := range in.Inputs {
		if isPublished(p) && p != api.InstanceDigestsPath {
			files[p] = b
		}
	}
	if len(instanceDigests) > 0 {
		files[api.InstanceDigestsPath] = instanceDigests
	}
	return &gitsync.Change{
		Owned:    append([]string{api.ConfigurationsDir + "/"}, publishedFiles...),
		Files:    files,
		Message:  fmt.Sprintf("configurations: as verified at %s, for the agents", short(in.Source)),
		Trailers: []gitsync.Trailer{{Key: TrailerConfigurations, Value: in.Source}},
		Author:   author,
	}
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

// signed reports why c is not signed by the renderer; nil when it is.
func (k *RendererKeys) signed(c *gitsync.Commit, when time.Time) error {
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

// PublishedReader is what Published reads ConfigurationsBranch with; a *gitsync.Repository
// opened on that branch implements it.
type PublishedReader interface {
	Snapshot(ctx context.Context) (gitsync.Snapshot, error)
	CommitOf(ctx context.Context, branch, hash string) (*gitsync.Commit, error)
	IsAncestor(ctx context.Context, branch, ancestor, tip string) (bool, error)
}

// Published is an agent's source of Configurations: the newest commit on ConfigurationsBranch
// that the pinned renderer key signed and marked as published Configurations. A tip that is
// not (unsigned, another key, a render or folder commit, a rollback to an older publication)
// is refused, and the last accepted publication stands in for it, so whoever can push to the
// branch can neither feed the agent Configurations the renderer did not verify nor stop it:
// the worst they can do is delay a change until the renderer puts the branch back, which it
// does on its next render.
type Published struct {
	Repo PublishedReader
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
func (p *Published) Used() (string, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last.commit, p.last.when
}

// SetFloor gives a restarted agent's floor: the publication its own last commit names
// (TrailerPublication). Nothing older that does not descend from it is taken.
func (p *Published) SetFloor(commit string, when time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.floor.commit, p.floor.when = commit, when
}

// Snapshot returns the Configurations to discover with. err is set when the branch's tip was
// refused (the last accepted publication is then returned with it, when there is one, and snap
// is nil otherwise) or could not be read.
func (p *Published) Snapshot(ctx context.Context) (snap gitsync.Snapshot, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	head, err := p.Repo.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ConfigurationsBranch, err)
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
func (p *Published) Refused() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// RefusedError is a tip of ConfigurationsBranch the agent does not take.
type RefusedError struct {
	Commit string
	Why    error
}

func (e *RefusedError) Error() string {
	if e.Commit == "" {
		return fmt.Sprintf("%s: %v", ConfigurationsBranch, e.Why)
	}
	return fmt.Sprintf("%s: commit %s refused: %v", ConfigurationsBranch, short(e.Commit), e.Why)
}

func (e *RefusedError) Unwrap() error { return e.Why }

// accept checks head and, when it is a publication to take, makes it the last accepted one.
func (p *Published) accept(ctx context.Context, head gitsync.Snapshot) error {
	if head.Commit() == "" {
		return errors.New("the branch does not exist (yet): the renderer publishes it on its first render with a --signing-key")
	}
	c, err := p.Repo.CommitOf(ctx, ConfigurationsBranch, head.Commit())
	if err != nil {
		return err
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	if err := p.Keys.signed(c, now()); err != nil {
		return err
	}
	if _, ok := gitsync.TrailerValue(c.Raw, TrailerConfigurations); !ok {
		return fmt.Errorf("the renderer signed it, but not as published Configurations (no %s trailer)", TrailerConfigurations)
	}
	last, lastWhen, what := p.last.commit, p.last.when, "the publication taken last"
	if last == "" {
		last, lastWhen, what = p.floor.commit, p.floor.when, "the publication this node's own last commit used"
	}
	if last != "" && c.Hash != last && !c.When.After(lastWhen) {
		// Signed, and not newer than what was taken: an older publication put back, unless it
		// descends from the last one (a renderer whose clock runs behind).
		ok, err := p.Repo.IsAncestor(ctx, ConfigurationsBranch, last, c.Hash)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("older than %s, %s: a rollback", short(last), what)
		}
	}
	files := map[string][]byte{}
	for _, path := range publishedFiles {
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
		if isPublished(path) {
			files[path] = bytes.Clone(b)
		}
	}
	p.last.commit, p.last.when = c.Hash, c.When
	p.last.snap = &treeSnap{commit: c.Hash, files: files}
	return nil
}

// HasAllowedSigners reports whether a source branch's snapshot declares who may sign (so an
// agent reading Configurations from it unverified should be told to pin the renderer's key).
func HasAllowedSigners(s gitsync.Snapshot) bool {
	_, err := s.ReadFile(AllowedSignersPath)
	return err == nil
}
