package api

import (
	"fmt"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// Errorf builds a FieldError for a field path of this document, finding its line.
func (d *Document) Errorf(field string, format string, args ...any) *FieldError {
	e := &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	if d != nil {
		e.File, e.Line = d.File, d.LineOf(field)
		if d.prefix != "" {
			e.Field = strings.TrimSuffix(d.prefix+field, ".")
		}
	}
	return e
}

// LineOf returns the line of a field path such as "spec.brokerSpec.brokerPodSpec.containers[0].image".
// Map keys may themselves contain dots (annotations); list indices may be missing (encoding/json
// type errors), in which case the first element that has the rest of the path is chosen. When the
// path cannot be followed to the end, the line of the deepest key or list element reached is
// returned: a missing field is named where it belongs.
func (d *Document) LineOf(field string) int {
	if d == nil || d.tree() == nil {
		return 0
	}
	n := d.tree()
	if n.Kind == yamlv3.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if d.prefix != "" {
		field = strings.TrimSuffix(d.prefix+field, ".")
	}
	line, _ := lookup(n, parsePath(field))
	if line == 0 {
		return d.Line
	}
	return line
}

type pathToken struct {
	key   string
	index int // -1 for map keys
}

func parsePath(p string) []pathToken {
	var toks []pathToken
	for _, part := range strings.Split(p, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				toks = append(toks, pathToken{key: part, index: -1})
				break
			}
			if i > 0 {
				toks = append(toks, pathToken{key: part[:i], index: -1})
			}
			j := strings.IndexByte(part[i:], ']')
			if j < 0 {
				toks = append(toks, pathToken{key: part[i:], index: -1})
				break
			}
			idx := part[i+1 : i+j]
			if n, err := strconv.Atoi(idx); err == nil {
				toks = append(toks, pathToken{index: n})
			} else {
				toks = append(toks, pathToken{key: strings.Trim(idx, `"'`), index: -1})
			}
			part = part[i+j+1:]
		}
	}
	return toks
}

// lookup follows toks from n; it returns the best line found and whether the whole path resolved.
func lookup(n *yamlv3.Node, toks []pathToken) (int, bool) {
	if len(toks) == 0 {
		return n.Line, true
	}
	switch n.Kind {
	case yamlv3.MappingNode:
		if toks[0].index >= 0 {
			return n.Line, false
		}
		// Longest key first, so "gitbroker.dev/after" matches before "gitbroker".
		for k := len(toks); k >= 1; k-- {
			if !allKeys(toks[:k]) {
				continue
			}
			key := joinKeys(toks[:k])
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					if len(toks) == k {
						return n.Content[i].Line, true
					}
					line, ok := lookup(n.Content[i+1], toks[k:])
					if !ok && line == 0 {
						line = n.Content[i].Line
					}
					return line, ok
				}
			}
		}
		// Not here: the caller names the line of the key this mapping is the value of, where
		// the missing field belongs.
		return 0, false
	case yamlv3.SequenceNode:
		if toks[0].index >= 0 {
			if toks[0].index < len(n.Content) {
				line, ok := lookup(n.Content[toks[0].index], toks[1:])
				if line == 0 {
					line = n.Content[toks[0].index].Line
				}
				return line, ok
			}
			return n.Line, false
		}
		for _, c := range n.Content {
			if line, ok := lookup(c, toks); ok {
				return line, true
			}
		}
		return n.Line, false
	case yamlv3.AliasNode:
		if n.Alias != nil {
			return lookup(n.Alias, toks)
		}
	}
	return n.Line, false
}

func allKeys(toks []pathToken) bool {
	for _, t := range toks {
		if t.index >= 0 {
			return false
		}
	}
	return true
}

func joinKeys(toks []pathToken) string {
	keys := make([]string, len(toks))
	for i, t := range toks {
		keys[i] = t.key
	}
	return strings.Join(keys, ".")
}
