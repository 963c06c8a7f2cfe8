package api

import (
	"slices"
	"strings"
)

// StatusKind is one kind of record the recorder writes on its ref (StatusBranch): where its
// files live, what a path of one looks like, and, for messages, how its paths are spelled.
// Every reader of the recorder's ref (the renderer's inputs, verify's check of what the ref may
// hold) takes the kinds from StatusKinds, so a new kind is added in its own file, with its
// parser, not found by grepping (docs/ARCHITECTURE.md, "Adding a kind of status record").
type StatusKind struct {
	Kind   string
	Dir    string
	IsPath func(p string) bool
	// Layout is its paths as messages spell them.
	Layout string
}

// StatusKinds are the records the recorder writes, in the order of their folders. Each kind's
// file registers it (registerStatusKind, in an init), as a Kubernetes API's types register
// with their scheme.
var StatusKinds []StatusKind

func registerStatusKind(k StatusKind) {
	StatusKinds = append(StatusKinds, k)
	slices.SortFunc(StatusKinds, func(a, b StatusKind) int { return strings.Compare(a.Dir, b.Dir) })
}

func init() {
	registerStatusKind(StatusKind{Kind: KindJobRecord, Dir: JobRecordsDir, IsPath: IsJobRecordPath, Layout: JobRecordsDir + "/<namespace>/<job>.yaml"})
}

// StatusKindOf is the kind of record at p, and whether p is one.
func StatusKindOf(p string) (StatusKind, bool) {
	for _, k := range StatusKinds {
		if k.IsPath(p) {
			return k, true
		}
	}
	return StatusKind{}, false
}

// IsStatusPath reports whether p is a record of the recorder's.
func IsStatusPath(p string) bool {
	_, ok := StatusKindOf(p)
	return ok
}

// IsJobRecordPath reports whether p is a JobRecord's path: a YAML file under status/jobs/.
func IsJobRecordPath(p string) bool {
	return strings.HasPrefix(p, JobRecordsDir+"/") && strings.HasSuffix(p, ".yaml")
}

// StatusLayouts lists the kinds' layouts, for messages.
func StatusLayouts() string {
	var b strings.Builder
	for i, k := range StatusKinds {
		switch {
		case i == len(StatusKinds)-1 && i > 0:
			b.WriteString(" and ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(k.Layout)
	}
	return b.String()
}
