package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/memory"
)

// boundedStorage is the object store of a Repository: go-git's memory storage, which takes
// every fetched pack through PackfileWriter. A pack is small on the wire and may inflate to
// anything (150 MB of zeros is a few hundred kilobytes), so before a single object is inflated
// into memory the pack is scanned: each object's inflated size, as its header declares it (and
// for a delta, as the delta declares its result), must be at most maxObject, and all of them
// together at most maxTotal. go-git holds every object to the size its header declares. Only
// then is the pack parsed into the store, from memory, so its deltas resolve without keeping
// their data a second time.
type boundedStorage struct {
	*memory.Storage
	maxObject, maxTotal int64
}

// PackfileWriter implements storer.PackfileWriter: go-git's fetch writes the received pack
// here.
func (s *boundedStorage) PackfileWriter() (io.WriteCloser, error) {
	return &boundedPack{s: s}, nil
}

type boundedPack struct {
	s   *boundedStorage
	buf bytes.Buffer
}

func (p *boundedPack) Write(b []byte) (int, error) { return p.buf.Write(b) }

// Close checks the pack's sizes and, when they are within the bounds, adds its objects to the
// store.
func (p *boundedPack) Close() error {
	if p.buf.Len() == 0 {
		return nil
	}
	data := p.buf.Bytes()
	if err := checkInflatedSizes(data, p.s.maxObject, p.s.maxTotal); err != nil {
		return err
	}
	parser, err := packfile.NewParserWithStorage(packfile.NewScanner(bytes.NewReader(data)), p.s.Storage)
	if err != nil {
		return err
	}
	_, err = parser.Parse()
	return err
}

// checkInflatedSizes scans a pack's object headers and refuses it when an object would inflate
// to more than maxObject bytes, or all of them to more than maxTotal. A delta's content is
// inflated (at most its declared size, which is checked first) to read the size of what it
// makes. Everything else is inflated into nothing, only to find where the next object starts.
func checkInflatedSizes(pack []byte, maxObject, maxTotal int64) error {
	sc := packfile.NewScanner(bytes.NewReader(pack))
	_, count, err := sc.Header()
	if err != nil {
		return fmt.Errorf("reading the pack: %w", err)
	}
	var total int64
	for i := uint32(0); i < count; i++ {
		h, err := sc.NextObjectHeader()
		if err != nil {
			return fmt.Errorf("reading the pack: %w", err)
		}
		size := h.Length
		if size > maxObject {
			return fmt.Errorf("%w: an object of the pack inflates to %d bytes, above the limit of %d", ErrTooLarge, size, maxObject)
		}
		if h.Type == plumbing.OFSDeltaObject || h.Type == plumbing.REFDeltaObject {
			var head deltaHead
			if _, _, err := sc.NextObject(&head); err != nil {
				return fmt.Errorf("reading the pack: %w", err)
			}
			target, err := head.targetSize()
			if err != nil {
				return fmt.Errorf("reading the pack: %w", err)
			}
			if target > maxObject {
				return fmt.Errorf("%w: an object of the pack inflates to %d bytes, above the limit of %d", ErrTooLarge, target, maxObject)
			}
			size += target
		} else if _, _, err := sc.NextObject(io.Discard); err != nil {
			return fmt.Errorf("reading the pack: %w", err)
		}
		if total += size; total > maxTotal {
			return fmt.Errorf("%w: the pack's objects inflate to more than %d bytes", ErrTooLarge, maxTotal)
		}
	}
	return nil
}

// deltaHead keeps the first bytes of a delta, which hold the sizes of its base and result.
type deltaHead struct{ b []byte }

func (d *deltaHead) Write(p []byte) (int, error) {
	if n := 32 - len(d.b); n > 0 {
		d.b = append(d.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// targetSize reads the result size of a delta: two little-endian base-128 numbers, the base's
// size and the result's.
func (d *deltaHead) targetSize() (int64, error) {
	b := d.b
	var sizes [2]int64
	for i := range sizes {
		var v int64
		for shift := uint(0); ; shift += 7 {
			if len(b) == 0 || shift > 56 {
				return 0, errors.New("malformed delta header")
			}
			c := b[0]
			b = b[1:]
			v |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				break
			}
		}
		sizes[i] = v
	}
	return sizes[1], nil
}
