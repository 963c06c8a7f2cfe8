package api

import "bytes"

// WriterTip is the tip a render metadata file (render.Metadata.Writers[ref]) or an
// accepted-tips shard (AcceptedFile) records for one writer ref, found by scanning the file's
// lines as the render writes them (a top-level "writers:" block of "  <ref>: <commit>" lines,
// sorted), without parsing the whole file: a writer (an agent, the recorder) reads it when it
// starts, from a branch anyone may push to and under a memory limit far below what parsing a
// dense YAML file of its size costs (6 MiB took the recorder to 531 MiB). "" when the file names
// none.
func WriterTip(data []byte, ref string) string {
	in := false
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		switch {
		case bytes.Equal(line, []byte("writers:")):
			in = true
		case in && len(line) > 2 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ':
			k, v, ok := bytes.Cut(line[2:], []byte(": "))
			if ok && unquoteScalar(k) == ref {
				return unquoteScalar(v)
			}
		case in:
			return "" // the block ended
		}
	}
	return ""
}

// unquoteScalar strips the quotes YAML puts around a plain string that would read as something
// else (a commit hash of digits only); refs and hashes hold no escapes.
func unquoteScalar(b []byte) string {
	if n := len(b); n >= 2 && (b[0] == '"' && b[n-1] == '"' || b[0] == '\'' && b[n-1] == '\'') {
		return string(b[1 : n-1])
	}
	return string(b)
}
