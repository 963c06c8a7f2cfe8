package api

import (
	"fmt"
	"sort"
	"strings"
)

// FieldError is an input problem, located by file, line and field path.
type FieldError struct {
	File    string
	Line    int
	Field   string
	Message string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Message)
	return b.String()
}

// ErrorList is a list of input problems. Its order is by file, line, field and message, so the
// same inputs always report the same list.
type ErrorList []*FieldError

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Sort orders the list deterministically.
func (l ErrorList) Sort() {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Field != b.Field {
			return a.Field < b.Field
		}
		return a.Message < b.Message
	})
}

// Files returns the distinct files named in the list.
func (l ErrorList) Files() map[string]bool {
	files := make(map[string]bool, len(l))
	for _, e := range l {
		files[e.File] = true
	}
	return files
}
