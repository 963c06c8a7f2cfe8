package render

import (
	"bytes"
	"maps"
	"path"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// Tree is a set of repository files: slash-separated paths relative to the repository root.
type Tree map[string][]byte

// Output prefixes the renderer owns (api's, named here too).
const (
	RenderedDir  = api.RenderedDir
	HistoryDir   = api.HistoryDir
	MetadataPath = api.MetadataPath
)

// Paths returns the tree's paths, sorted.
func (t Tree) Paths() []string {
	ps := make([]string, 0, len(t))
	for p := range t {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// Owned returns the part of the tree the renderer owns: rendered/ and history/.
func (t Tree) Owned() Tree {
	// A clone copies the map's tables as they are, several times faster than inserting a
	// rendered fleet's files one by one; the few inputs are then taken out.
	out := maps.Clone(t)
	if out == nil {
		return Tree{}
	}
	maps.DeleteFunc(out, func(p string, _ []byte) bool { return !IsOwned(p) })
	return out
}

// IsOwned reports whether the renderer owns a path.
func IsOwned(p string) bool {
	return strings.HasPrefix(p, RenderedDir) || strings.HasPrefix(p, HistoryDir)
}

// Diff lists the paths whose content differs between a and b, sorted.
func Diff(a, b Tree) []string {
	var d []string
	for p, x := range a {
		if y, ok := b[p]; !ok || !bytes.Equal(x, y) {
			d = append(d, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, p)
		}
	}
	sort.Strings(d)
	return d
}

// Equal reports whether two trees hold the same files with the same bytes.
func Equal(a, b Tree) bool {
	if len(a) != len(b) {
		return false
	}
	for p, x := range a {
		if y, ok := b[p]; !ok || !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}

// objectRef is what a rendered file's path says about it:
// rendered/<namespace>/<configuration>/[<sub>/]<kind>-<name>.yaml.
type objectRef struct {
	namespace, configuration, kind, name string
}

func parseObjectPath(p string) (objectRef, bool) {
	if !strings.HasPrefix(p, RenderedDir) || !strings.HasSuffix(p, ".yaml") {
		return objectRef{}, false
	}
	rest := p[len(RenderedDir):]
	ns, rest, _ := strings.Cut(rest, "/")
	cfg, rest, _ := strings.Cut(rest, "/")
	// rest is <file> or <sub>/<file>.
	if ns == "" || cfg == "" || rest == "" || ns == "flux" || strings.Count(rest, "/") > 1 {
		return objectRef{}, false
	}
	base := strings.TrimSuffix(path.Base(p), ".yaml")
	kind, name, ok := strings.Cut(base, "-")
	if !ok || base == "kustomization" {
		return objectRef{}, false
	}
	switch kind {
	case "deployment", "job", "service", "pod", // pod: the bare broker Pods of older renders
		"resourceslice", "resourceclaimtemplate", "deviceclass": // DRA mode's

	default:
		return objectRef{}, false
	}
	return objectRef{namespace: ns, configuration: cfg, kind: kind, name: name}, true
}

// objectKey is an object's identity, kind, namespace and name, as substrings of its path: a
// key made without building a string, for indexes over every file of a fleet.
type objectKey struct{ kind, namespace, name string }

func (o objectRef) key() objectKey { return objectKey{o.kind, o.namespace, o.name} }

// objectIndex maps each object in t to its file (to the first by path, should two files hold
// the same object, which dups reports).
func objectIndex(t Tree) (index map[objectKey]string, dups bool) {
	out := make(map[objectKey]string, len(t))
	for f := range t {
		if ref, ok := parseObjectPath(f); ok {
			old, dup := out[ref.key()]
			dups = dups || dup
			if !dup || f < old {
				out[ref.key()] = f
			}
		}
	}
	return out, dups
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
