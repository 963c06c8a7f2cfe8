package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/trust"
)

// enrolmentKey keys the reported enrolment error.
const enrolmentKey = "(enrolment)"

// Enrolment is the node's signing key, checked each cycle against the allowed_signers the
// Configurations came with: the renderer ignores a node ref whose commits no enrolled key
// signed, so an agent that is not enrolled says so (log, metric, readiness) instead of
// looking healthy while nothing it writes counts.
type Enrolment struct {
	// Signer is the key the agent signs with; nil when it signs nothing.
	Signer *trust.Signer
}

// NotEnrolledError is a node whose commits the renderer would not accept.
type NotEnrolledError struct {
	Principal string
	// Line is the allowed_signers line that enrolls the agent's key; "" when it has none.
	Line string
	// Commit is the commit of the Configurations' source the check read.
	Commit string
}

func (e *NotEnrolledError) Error() string {
	file := api.AllowedSignersPath
	if e.Commit != "" {
		file = fmt.Sprintf("%s (as of %.12s)", api.AllowedSignersPath, e.Commit)
	}
	if e.Line == "" {
		return fmt.Sprintf("%s enrolls the fleet's writers, but this agent signs nothing: the renderer ignores %s's inventory until it runs with --signing-key and its key is enrolled",
			file, e.Principal)
	}
	return fmt.Sprintf("%s does not enroll this agent's key as %s (never added, revoked, or its certificate expired): the renderer ignores this node's inventory; enroll it with this line on the people's branch, in a signed, reviewed commit: %s",
		file, e.Principal, e.Line)
}

// check returns nil when the repository does not verify its writers (no allowed_signers at
// src) or enrolls the key as the node's principal now; a *NotEnrolledError when it does not;
// another error when the files cannot be read.
func (e *Enrolment) check(src gitsync.Snapshot, node string, now func() time.Time) error {
	data, err := src.ReadFile(api.AllowedSignersPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", api.AllowedSignersPath, err)
	}
	principal := trust.NodePrincipal(node)
	if e.Signer == nil {
		return &NotEnrolledError{Principal: principal, Commit: src.Commit()}
	}
	allowed, err := trust.ParseAllowedSigners(api.AllowedSignersPath, data)
	if err != nil {
		return err
	}
	revoked, err := src.ReadFile(api.RevokedKeysPath)
	switch {
	case err == nil:
		if err := allowed.Revoke(api.RevokedKeysPath, revoked); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("reading %s: %w", api.RevokedKeysPath, err)
	}
	if !allowed.Allows(&trust.Signature{Key: e.Signer.PublicKey()}, principal, now()) {
		return &NotEnrolledError{Principal: principal, Line: e.Signer.AllowedSignersLine(principal), Commit: src.Commit()}
	}
	return nil
}

// enrolment checks the enrolment at src, if the agent checks it, and reports a change of it
// once: the metric, the log, and readiness (through a.enrolled).
func (a *Agent) enrolment(src gitsync.Snapshot) error {
	if a.opts.Enrolment == nil {
		a.enrolled.Store(true)
		return nil
	}
	err := a.opts.Enrolment.check(src, a.opts.Node, a.opts.Now)
	a.enrolled.Store(err == nil)
	a.opts.Metrics.setEnrolled(err == nil)
	switch {
	case err != nil:
		if a.report(enrolmentKey, err) {
			a.opts.Log.Error(err, "this node is not enrolled; its inventory is written but not rendered")
		}
	case a.reported[enrolmentKey] != "":
		delete(a.reported, enrolmentKey)
		a.opts.Log.Info("this node's key is enrolled now", "principal", trust.NodePrincipal(a.opts.Node))
	}
	return err
}
