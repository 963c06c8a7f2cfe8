// Package identity tells whether two values are the same value in memory, not merely equal.
//
// The renderer keeps its last output and the bytes of the files it parsed. A daemon's next
// repository shares most of those bytes and, rendering on top of its own output, the very map:
// knowing them again by identity costs nothing, where comparing or hashing a fleet's hundred
// thousand files on every render did. The tricks that needs (unsafe, reflect) live here only.
package identity

import (
	"reflect"
	"unsafe"
)

// Bytes reports whether a and b are the same bytes: the same length and, when not empty, the
// same backing array. Equal contents in two arrays are not the same bytes.
func Bytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// Map reports whether a and b are the same map (not two maps with the same entries). Two nil
// maps are the same.
func Map[M ~map[K]V, K comparable, V any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
