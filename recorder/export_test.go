package recorder

// StatusWriterKinds are the kinds a recorder writes beside its JobRecords.
func StatusWriterKinds() []string {
	var kinds []string
	for _, f := range statusWriters {
		kinds = append(kinds, f(&Recorder{}).kind)
	}
	return kinds
}
