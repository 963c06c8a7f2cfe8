package render

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gitbroker/gitbroker/internal/identity"
)

// memo keeps parse results by path and content, so unchanged files are parsed once per Renderer.
// Each render keeps only what it used, so the memo never outgrows the repository. An entry
// keeps the content it was parsed from: a daemon's next tree shares most of its files' bytes
// with the last one, and comparing a slice with itself costs nothing, where hashing every file
// of a large fleet on every render did.
type memo[T any] struct {
	old, cur map[string]memoEntry[T]
}

type memoEntry[T any] struct {
	data []byte
	val  T
}

func sameContent(a, b []byte) bool {
	return identity.Bytes(a, b) || bytes.Equal(a, b)
}

// parallel runs f(0..n-1) on every CPU. f must only touch its own index.
func parallel(n int, f func(i int)) {
	workers := runtime.GOMAXPROCS(0)
	if workers > n {
		workers = n
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

func (m *memo[T]) get(p string, data []byte, parse func() T) T {
	if m.has(p, data) {
		return m.cur[p].val
	}
	v := parse()
	m.set(p, data, v)
	return v
}

// has reports whether the memo holds a value for p with this content, keeping it for this pass.
func (m *memo[T]) has(p string, data []byte) bool {
	if m.cur == nil {
		m.cur = make(map[string]memoEntry[T], len(m.old))
	}
	if e, ok := m.cur[p]; ok && sameContent(e.data, data) {
		return true
	}
	if e, ok := m.old[p]; ok && sameContent(e.data, data) {
		m.cur[p] = e
		return true
	}
	return false
}

// set records what get would have parsed from p with this content.
func (m *memo[T]) set(p string, data []byte, v T) {
	if m.cur == nil {
		m.cur = make(map[string]memoEntry[T], len(m.old))
	}
	m.cur[p] = memoEntry[T]{data: data, val: v}
}

// getMany is get for many files, parsing the ones not in the memo in parallel. scope is part of
// the key: what else the parse depends on.
func (m *memo[T]) getMany(scope string, paths []string, files Tree, parse func(p string, data []byte) T) []T {
	if m.cur == nil {
		m.cur = make(map[string]memoEntry[T], len(m.old))
	}
	out := make([]T, len(paths))
	var miss []int
	for i, p := range paths {
		key := scope + "\x00" + p
		if e, ok := m.cur[key]; ok && sameContent(e.data, files[p]) {
			out[i] = e.val
		} else if e, ok := m.old[key]; ok && sameContent(e.data, files[p]) {
			out[i] = e.val
			m.cur[key] = e
		} else {
			miss = append(miss, i)
		}
	}
	parallel(len(miss), func(j int) {
		i := miss[j]
		out[i] = parse(paths[i], files[paths[i]])
	})
	for _, i := range miss {
		m.cur[scope+"\x00"+paths[i]] = memoEntry[T]{data: files[paths[i]], val: out[i]}
	}
	return out
}

// lookup finds a value stored under a key that has no content of its own (built objects, keyed
// by the hash of their inputs).
func (m *memo[T]) lookup(key string) (T, bool) {
	if e, ok := m.cur[key]; ok {
		return e.val, true
	}
	if e, ok := m.old[key]; ok {
		m.store(key, e.val)
		return e.val, true
	}
	var zero T
	return zero, false
}

func (m *memo[T]) store(key string, v T) {
	if m.cur == nil {
		m.cur = make(map[string]memoEntry[T], len(m.old))
	}
	m.cur[key] = memoEntry[T]{val: v}
}

func (m *memo[T]) rotate() { m.old, m.cur = m.cur, nil }

// grown reports whether the memo took in half as much again as it kept at its last rotation.
func (m *memo[T]) grown() bool { return len(m.cur) > len(m.old)/2+1024 }
