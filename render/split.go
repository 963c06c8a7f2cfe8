package render

import (
	"maps"
	"sort"

	"github.com/gitbroker/gitbroker/api"

	"github.com/gitbroker/gitbroker/internal/identity"
)

// split is a request's files parted into the previous output and the inputs.
type split struct {
	prev Tree
	// onLast says prev is the Renderer's last output, the very byte slices.
	onLast bool
	// inputs are the input paths, sorted.
	inputs []string
	// folders are folders under inventory/ (api.InventoryFolder), with a file in each.
	folders map[string]string
}

// stray notes a file in a folder under inventory/, which is never read.
func (s *split) stray(f string) {
	if folder, ok := api.InventoryFolder(f); ok {
		if s.folders == nil {
			s.folders = map[string]string{}
		}
		if old, ok := s.folders[folder]; !ok || f < old {
			s.folders[folder] = f
		}
	}
}

// unreadable is the request's Unreadable with the folders under inventory/ added: each is an
// invalid input, as a symbolic link there is.
func (s *split) unreadable(req Request) map[string]string {
	if len(s.folders) == 0 {
		return req.Unreadable
	}
	out := maps.Clone(req.Unreadable)
	if out == nil {
		out = map[string]string{}
	}
	for folder, f := range s.folders {
		if _, ok := out[folder]; !ok {
			out[folder] = api.InventoryFolderError(f)
		}
	}
	return out
}

// split parts a request's files in one pass. A kept Renderer's previous output is, render after
// render, its own last output: it is then taken as it is, not copied out of a fleet's files. Given
// apart (Request.Previous), it is known by the map's identity, and only the inputs are looked at.
func (r *Renderer) split(req Request) split {
	last := r.last.files
	inputs := []string{}
	var s split
	if req.Previous != nil {
		for f := range req.Files {
			if IsInput(f) {
				inputs = append(inputs, f)
			} else {
				s.stray(f)
			}
		}
		sort.Strings(inputs)
		same := last != nil && len(last) == len(req.Previous) && identity.Map(last, req.Previous)
		s.prev, s.onLast, s.inputs = req.Previous, same, inputs
		return s
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
		} else {
			s.stray(f)
		}
	}
	sort.Strings(inputs)
	s.inputs = inputs
	if same && owned == len(last) {
		s.prev, s.onLast = last, true
		return s
	}
	s.prev = req.Files.Owned()
	return s
}
