package verify

import (
	"slices"
	"strings"

	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/trust"
)

// Writers whose inputs a Rejection names, beside node:<name> (trust.NodePrincipal).
const (
	WriterPeople   = "people"
	WriterRecorder = trust.PrincipalRecorder
	WriterRenderer = trust.PrincipalRenderer
)

// Rejection is an input the renderer refused for who wrote it: the writer's part stays as it
// was verified before.
type Rejection struct {
	// Writer is whose part it is: WriterPeople (the source branch), node:<name>,
	// WriterRecorder or WriterRenderer.
	Writer string
	// Ref is the branch it was read from.
	Ref string
	// Commit is the commit refused, "" when none was read (the ref is gone or too large).
	Commit string
	// Reason says why, and what stands in its place.
	Reason string
}

// String is the sentence the plan, the log and the pull-request description show.
func (r Rejection) String() string { return r.Ref + ": " + r.Reason }

// reject records a rejection.
func (in *Inputs) reject(r Rejection) { in.Rejections = append(in.Rejections, r) }

// sentences sets Untrusted from the rejections, sorted.
func (in *Inputs) sentences() {
	slices.SortFunc(in.Rejections, func(a, b Rejection) int { return strings.Compare(a.String(), b.String()) })
	in.Untrusted = make([]string, len(in.Rejections))
	for i, r := range in.Rejections {
		in.Untrusted[i] = r.String()
	}
}

// Problems are the rejections, in Untrusted's order, structured for the plan's JSON.
func (in *Inputs) Problems() []render.Problem {
	out := make([]render.Problem, len(in.Rejections))
	for i, r := range in.Rejections {
		out[i] = render.RefProblem(r.Writer, r.Ref, r.Commit, r.Reason)
	}
	return out
}
