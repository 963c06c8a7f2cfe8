package render

import (
	"fmt"

	"github.com/gitbroker/gitbroker/api"
)

// Problem is an input the render could not use, for people and for scripts alike: where it is
// (file, line, field) or whose it is (writer, ref, commit), and why. plan -o json writes these
// fields, so a CI job can annotate the line without parsing prose.
type Problem struct {
	File  string `json:"file,omitempty"`
	Line  int    `json:"line,omitempty"`
	Field string `json:"field,omitempty"`
	// Writer is whose part was refused: people, node:<name>, recorder or renderer.
	Writer string `json:"writer,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Commit string `json:"commit,omitempty"`
	// Message says what is wrong, and what stands in its place.
	Message string `json:"message"`
	// Text is the whole sentence the text and markdown plans show.
	Text string `json:"text"`
}

func (p Problem) String() string { return p.Text }

// fieldProblem is an invalid input's error as a Problem.
func fieldProblem(e *api.FieldError) Problem {
	return Problem{File: e.File, Line: e.Line, Field: e.Field, Message: e.Message, Text: e.Error()}
}

// RefProblem is a writer's ref refused for who wrote it (verify.Rejection), for callers that
// verified the writers' refs.
func RefProblem(writer, ref, commit, reason string) Problem {
	return Problem{Writer: writer, Ref: ref, Commit: commit, Message: reason, Text: ref + ": " + reason}
}

func fieldProblems(errs api.ErrorList) []Problem {
	out := make([]Problem, len(errs))
	for i, e := range errs {
		out[i] = fieldProblem(e)
	}
	return out
}

// untrustedProblems are the request's refused inputs, structured when the caller gave them so
// (Request.Rejections), else each sentence alone; then the JobRecords refused in this render.
func untrustedProblems(req Request, records []Problem) []Problem {
	var out []Problem
	if len(req.Rejections) == len(req.Untrusted) {
		out = append(out, req.Rejections...)
	} else {
		for _, u := range req.Untrusted {
			out = append(out, Problem{Message: u, Text: u})
		}
	}
	return append(out, records...)
}

// recordProblem is a JobRecord in status/jobs/ refused under RenderedJobsOnly.
func recordProblem(file, why string) Problem {
	return Problem{File: file, Writer: "recorder", Message: why, Text: fmt.Sprintf("%s: %s", file, why)}
}
