package render

import (
	"path"
	"sort"
	"strings"
)

// prevIndex is the index of prev: the last render's index of its output when prev is exactly
// that output (a daemon renders on top of its own last render), else indexed anew.
func (p *pass) prevIndex() map[objectKey]string {
	if p.index.prevObjects == nil {
		if last := p.r.last; last.objects != nil && p.scoping.onLast {
			p.index.prevObjects, p.index.prevDups = last.objects, last.dups
		} else {
			p.index.prevObjects, p.index.prevDups = objectIndex(p.prev)
		}
	}
	return p.index.prevObjects
}

// outIndex may only be asked for once out is final: after the layout and the metadata. It is
// the index of prev brought up to date with the files of the diff, when no object of prev was
// held by two files (then which of them the index names cannot be known from the diff alone).
func (p *pass) outIndex() map[objectKey]string {
	if p.index.outObjects != nil {
		return p.index.outObjects
	}
	prev := p.prevIndex()
	if p.index.prevDups || !p.output.diffed {
		p.index.outObjects, p.index.outDups = objectIndex(p.output.files)
		return p.index.outObjects
	}
	// The index of prev becomes that of out in place, and undo keeps what it held for prevID
	// and for dropIndex: a copy would cost a pass over every object of the fleet.
	if prev == nil {
		prev = map[objectKey]string{}
		p.index.prevObjects = prev
	}
	idx := prev
	p.index.prevCount, p.index.undo = len(prev), map[objectKey]prevEntry{}
	set := func(k objectKey, f string, present bool) {
		if _, saved := p.index.undo[k]; !saved {
			old, had := idx[k]
			p.index.undo[k] = prevEntry{file: old, had: had}
		}
		if present {
			idx[k] = f
		} else {
			delete(idx, k)
		}
	}
	// Without duplicates each object of prev has one file, the one the index names: a file
	// gone from out takes its object with it, unless a file of the diff holds it again.
	for _, f := range p.output.diff {
		if _, ok := p.output.files[f]; ok {
			continue
		}
		if ref, ok := parseObjectPath(f); ok && idx[ref.key()] == f {
			set(ref.key(), "", false)
		}
	}
	for _, f := range p.output.diff {
		if _, ok := p.output.files[f]; !ok {
			continue
		}
		if ref, ok := parseObjectPath(f); ok {
			old, dup := idx[ref.key()]
			if dup && old != f {
				p.index.outDups = true
			}
			if !dup || f < old {
				set(ref.key(), f, true)
			}
		}
	}
	p.index.outObjects, p.index.outFromDiff = idx, true
	return idx
}

// prevEntry is what the index of prev held for an object before outIndex changed it.
type prevEntry struct {
	file string
	had  bool
}

// prevID is the file of prev that holds an object, whether or not outIndex has made prev's
// index into out's since.
func (p *pass) prevID(k objectKey) (string, bool) {
	if e, ok := p.index.undo[k]; ok {
		return e.file, e.had
	}
	f, ok := p.prevIndex()[k]
	return f, ok
}

// prevLen is the number of objects in prev.
func (p *pass) prevLen() int {
	if p.index.undo != nil {
		return p.index.prevCount
	}
	return len(p.prevIndex())
}

// dropIndex gives the index of prev back what outIndex changed in it: a pass that is not kept
// leaves the Renderer's index of its last output as it found it.
func (p *pass) dropIndex() {
	for k, e := range p.index.undo {
		if e.had {
			p.index.prevObjects[k] = e.file
		} else {
			delete(p.index.prevObjects, k)
		}
	}
	p.index.undo, p.index.outObjects, p.index.outFromDiff = nil, nil, false
}

func (p *pass) prevPaths() []string {
	if p.index.prevSorted == nil {
		p.index.prevSorted = p.prev.Paths()
	}
	return p.index.prevSorted
}

// prevJobPaths are the paths of prev that may hold a Job or its history, sorted: every file under
// history/, and each file under rendered/ named job-*. The Job lifecycle passes over these,
// not over the Pods and Services beside them.
func (p *pass) prevJobPaths() []string {
	if p.index.prevJobs == nil && p.scoping.scope != nil {
		p.index.prevJobs = p.prevJobPathsIn(p.scoping.scope)
	}
	if p.index.prevJobs == nil {
		p.index.prevJobs = []string{}
		for f := range p.prev {
			if strings.HasPrefix(f, HistoryDir) || strings.HasPrefix(f, RenderedDir) && strings.HasPrefix(path.Base(f), "job-") {
				p.index.prevJobs = append(p.index.prevJobs, f)
			}
		}
		sort.Strings(p.index.prevJobs)
	}
	return p.index.prevJobs
}

// inputPaths are the request's inputs, sorted: gitbroker.yaml, the Configurations, the
// inventories and the records, not the ten times as many rendered files beside them.
func (p *pass) inputPaths() []string {
	if p.index.filesSorted == nil {
		p.index.filesSorted = []string{}
		for f := range p.req.Files {
			if IsInput(f) {
				p.index.filesSorted = append(p.index.filesSorted, f)
			}
		}
		sort.Strings(p.index.filesSorted)
	}
	return p.index.filesSorted
}
