package api

import "strings"

// StatusKind is one kind of record the recorder writes on its ref (StatusBranch): where its
// files live, what a path of one looks like, and, for messages, how its paths are spelled.
// Every reader of the recorder's ref (the renderer's inputs, verify's check of what the ref may
// hold) takes the kinds from StatusKinds, so a new kind is added here, with its parser and the
// recorder's writer, not found by grepping.
type StatusKind struct {
	Kind   string
	Dir    string
	IsPath func(p string) bool
	// Layout is its paths as messages spell them.
	Layout string
}

// StatusKinds are the records the recorder writes.
var StatusKinds = []StatusKind{
	{Kind: KindJobRecord, Dir: JobRecordsDir, IsPath: IsJobRecordPath, Layout: JobRecordsDir + "/<namespace>/<job>.yaml"},
	{Kind: KindNodeLoss, Dir: NodeLossDir, IsPath: IsNodeLossPath, Layout: NodeLossDir + "/<node>.yaml"},
	{Kind: KindRolloutRecord, Dir: RolloutDir, IsPath: IsRolloutPath, Layout: RolloutDir + "/<namespace>/<deployment>.yaml"},
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
