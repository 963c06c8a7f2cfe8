package recorder

// StatusWriterKinds are the kinds a recorder writes beside its JobRecords.
func StatusWriterKinds() []string {
	var kinds []string
	for _, w := range (&Recorder{}).statusWriters() {
		kinds = append(kinds, w.kind)
	}
	return kinds
}
