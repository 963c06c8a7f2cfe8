package verify

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/trust"
)

// mode is how the source branch is trusted at one commit.
type mode struct {
	allowed   *trust.AllowedSigners // nil: no allowed_signers, nothing verified
	people    *trust.KeyRing        // people's OpenPGP keys, for merges a git host signs
	renderers *trust.KeyRing        // the OpenPGP keys of renderers that sign with OpenPGP
	protected bool                  // the host protects the branch; people's commits need no signature
	bound     bool                  // a person's signature counts only up to a commit bound to the branch
	err       error                 // allowed_signers or trust.yaml does not parse
}

// trustSettings is .gitbroker/trust.yaml.
type trustSettings struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		// SourceBranch is "signed" (every first-parent commit signed by a person, the default),
		// "bound" (signed, and rendered only up to the newest commit a person signed that names
		// the branch in a TrailerBranch: a signature made on another branch does not count for
		// this one) or "protected" (the git host requires reviews and refuses direct pushes).
		SourceBranch string `json:"sourceBranch"`
	} `json:"spec"`
}

func modeAt(s gitsync.Snapshot) mode {
	data, err := s.ReadFile(AllowedSignersPath)
	if errors.Is(err, fs.ErrNotExist) {
		return mode{}
	}
	if err != nil {
		return mode{err: err}
	}
	if len(data) > trust.MaxAllowedSignersSize {
		return mode{err: fmt.Errorf("%s: larger than %d bytes", AllowedSignersPath, trust.MaxAllowedSignersSize)}
	}
	a, err := trust.ParseAllowedSigners(AllowedSignersPath, data)
	if err != nil {
		return mode{err: err}
	}
	if a.Empty() {
		return mode{} // enrolls nobody yet: nothing to verify against
	}
	if data, err := s.ReadFile(RevokedKeysPath); err == nil {
		if err := a.Revoke(RevokedKeysPath, data); err != nil {
			return mode{err: err}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return mode{err: err}
	}
	m := mode{allowed: a}
	keys, err := s.Files(TrustedKeysDir)
	if err != nil {
		return mode{err: err}
	}
	for p := range keys {
		if !strings.HasSuffix(p, ".asc") {
			delete(keys, p)
		}
	}
	if m.people, err = trust.ParseKeyRing(keys); err != nil {
		return mode{err: err}
	}
	rkeys, err := s.Files(RendererKeysDir)
	if err != nil {
		return mode{err: err}
	}
	for p := range rkeys {
		if !strings.HasSuffix(p, ".asc") {
			delete(rkeys, p)
		}
	}
	if m.renderers, err = trust.ParseKeyRing(rkeys); err != nil {
		return mode{err: err}
	}
	if data, err := s.ReadFile(TrustPath); err == nil {
		var ts trustSettings
		if err := yaml.UnmarshalStrict(data, &ts); err != nil {
			return mode{err: fmt.Errorf("%s: %v", TrustPath, err)}
		}
		switch ts.Spec.SourceBranch {
		case "", "signed":
		case "bound":
			m.bound = true
		case "protected":
			m.protected = true
		default:
			return mode{err: fmt.Errorf("%s: spec.sourceBranch: %q is not signed, bound or protected", TrustPath, ts.Spec.SourceBranch)}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return mode{err: err}
	}
	return m
}

// guarantee says, for the plan, which guarantee holds for the source branch under m.
func (m mode) guarantee(branch string) string {
	switch {
	case m.allowed == nil:
		return fmt.Sprintf("unverified: %s has no %s that enrolls anyone, so every writer's commits are rendered as they are", branch, AllowedSignersPath)
	case m.protected:
		return fmt.Sprintf("verified: node, recorder and renderer signatures checked against %s; people's commits on %s are trusted because %s declares the branch protected by its host", AllowedSignersPath, branch, TrustPath)
	case m.bound:
		return fmt.Sprintf("verified: every commit on %s signed by a person and rendered up to the newest one a person bound to %s (trailer \"%s: %s\"), and node, recorder and renderer signatures checked against %s", branch, branch, TrailerBranch, branch, AllowedSignersPath)
	default:
		return fmt.Sprintf("verified: every commit on %s signed by a person, and node, recorder and renderer signatures checked against %s", branch, AllowedSignersPath)
	}
}

// TrustFileErrors checks the trust files of a work tree (files under .gitbroker/, by their
// repository paths) as a render checks them on the source branch, so that plan and check
// refuse at the file and line what render would refuse. A file that enrolls nobody is no
// error here: the render's own rule (once anyone is enrolled, verification stays on) needs the
// branch's history.
func TrustFileErrors(files map[string][]byte) api.ErrorList {
	err := modeAt(treeSnapshot("", files)).err
	if err == nil {
		return nil
	}
	if le, ok := errors.AsType[*trust.LineError](err); ok {
		return api.ErrorList{{File: le.File, Line: le.Line, Message: le.Message + " (a render refuses the commit that holds it)"}}
	}
	return api.ErrorList{{File: ".gitbroker/", Message: err.Error() + " (a render refuses the commit that holds it)"}}
}

// IsTrustPath reports whether a repository path is one of the trust files a render reads.
func IsTrustPath(p string) bool {
	switch p {
	case AllowedSignersPath, RevokedKeysPath, TrustPath:
		return true
	}
	return strings.HasSuffix(p, ".asc") && (strings.HasPrefix(p, TrustedKeysDir+"/") || strings.HasPrefix(p, RendererKeysDir+"/"))
}
