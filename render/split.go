package render

import (
	"sort"

	"github.com/gitbroker/gitbroker/internal/identity"
)

// split is a request's files parted into the previous output and the inputs.
type split struct {
	prev Tree
	// onLast says prev is the Renderer's last output, the very byte slices.
	onLast bool
	// inputs are the input paths, sorted.
	inputs []string
}

// split parts a request's files in one pass. A kept Renderer's previous output is, render after
// render, its own last output: it is then taken as it is, not copied out of a fleet's files. Given
// apart (Request.Previous), it is known by the map's identity, and only the inputs are looked at.
func (r *Renderer) split(req Request) split {
	last := r.last.files
	inputs := []string{}
	if req.Previous != nil {
		for f := range req.Files {
			if IsInput(f) {
				inputs = append(inputs, f)
			}
		}
		sort.Strings(inputs)
		same := last != nil && len(last) == len(req.Previous) && identity.Map(last, req.Previous)
		return split{prev: req.Previous, onLast: same, inputs: inputs}
	}
	same, owned := last != nil, 0
	for f, b := range req.Files {
		if IsOwned(f) {
			owned++
			if same {
				y, ok := last[f]
				same = ok && identity.Bytes(b, y)
			}
			continue
		}
		if IsInput(f) {
			inputs = append(inputs, f)
		}
	}
	sort.Strings(inputs)
	if same && owned == len(last) {
		return split{prev: last, onLast: true, inputs: inputs}
	}
	return split{prev: req.Files.Owned(), inputs: inputs}
}
