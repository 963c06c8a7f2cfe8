package trust

import "bytes"

// SplitSignedCommit splits a raw commit object (as `git cat-file commit` prints it) into what
// was signed and its signature, the way git verify-commit does: the gpgsig header and its
// continuation lines are the signature, everything else is the payload.
func SplitSignedCommit(raw []byte) (payload, signature []byte) {
	// The headers end at the first empty line; each header line keeps its newline.
	end := bytes.Index(raw, []byte("\n\n")) + 1
	if end <= 0 {
		end = len(raw)
	}
	var p, sig bytes.Buffer
	lines := bytes.SplitAfter(raw[:end], []byte("\n"))
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !bytes.HasPrefix(l, []byte("gpgsig ")) {
			p.Write(l)
			continue
		}
		sig.Write(bytes.TrimPrefix(l, []byte("gpgsig ")))
		for i+1 < len(lines) && bytes.HasPrefix(lines[i+1], []byte(" ")) {
			i++
			sig.Write(lines[i][1:])
		}
	}
	p.Write(raw[end:])
	return p.Bytes(), sig.Bytes()
}
