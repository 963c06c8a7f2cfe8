package yamlcodec

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"

	yamlv2 "go.yaml.in/yaml/v2"
)

// The YAML emitter: every rendered object is written the way sigs.k8s.io/yaml writes it
// (encoding/json, then the yaml.v2 emitter with sorted keys), byte for byte, without the yaml.v2
// emitter's cost. marshal parses the JSON into a small tree and writes the block YAML itself for
// the values whose yaml.v2 form is certain: ASCII strings without line breaks, short enough
// that yaml.v2 would not fold them at 80 columns; numbers, booleans and null. Any other value
// (a multi-line script, non-ASCII text, a long line with spaces) sends the whole document to
// yaml.v2, so the output never depends on which path wrote it. emit_test.go compares the two
// on generated documents and fuzzes the comparison.

// jsonBuffers hold the JSON of one object while it is converted: json.Marshal would copy it out
// for each of a fleet's hundred thousand objects, only for it to be dropped at once.
var jsonBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// marshal writes v as YAML with sorted keys.
func Marshal(v any) []byte {
	buf := jsonBuffers.Get().(*bytes.Buffer)
	defer jsonBuffers.Put(buf)
	buf.Reset()
	// json.Marshal's encoding (HTML characters escaped), with a newline after it.
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		// Only types built here are marshalled; they always encode.
		panic(err)
	}
	js := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if b, ok := fastYAML(js); ok {
		return b
	}
	return slowYAML(js)
}

// slowYAML is sigs.k8s.io/yaml's JSONToYAML without its second parse: the JSON decoded with
// numbers kept, then the yaml.v2 encoder, given the keys in sortKeys' order. yaml.v2's own order
// is not always one order: its comparison is not transitive for some keys ("1:20", "0777" and
// "0b101" each sort before the next), and it sorts them in the map's random order.
func slowYAML(js []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		panic(err)
	}
	b, err := yamlv2.Marshal(ordered(tree))
	if err != nil {
		panic(err)
	}
	return b
}

// ordered turns objects into yaml.v2 MapSlices in sortKeys' order and json.Number into int64 or
// float64, so integers never print as 1e+06.
func ordered(v any) any {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]jnode, 0, len(t))
		for k := range t {
			keys = append(keys, jnode{raw: k})
		}
		slices.SortFunc(keys, byRaw)
		sortKeys(keys)
		ms := make(yamlv2.MapSlice, len(keys))
		for i, k := range keys {
			ms[i] = yamlv2.MapItem{Key: k.raw, Value: ordered(t[k.raw])}
		}
		return ms
	case []any:
		for i, x := range t {
			t[i] = ordered(x)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

// A jnode is one JSON value: a scalar already in its YAML form (text between quote characters
// when quote is set), or an object (keys sorted as yaml.v2 sorts them) or array whose members
// are the n nodes of the document's arena from first.
type jnode struct {
	kind  byte // 's' scalar, 'o' object, 'a' array
	quote byte // 0, '\'' or '"'
	space bool // a scalar with a space, which yaml.v2 would fold past column 80
	text  string
	key   string // for an object's member: the key in its YAML form
	raw   string // for an object's member: the key as JSON gave it, for sorting
	first int32
	n     int32
}

// width is the scalar's length as written.
func (v *jnode) width() int {
	if v.quote != 0 {
		return len(v.text) + 2
	}
	return len(v.text)
}

// bestWidth is the yaml.v2 emitter's line width: it breaks plain and quoted scalars at a space
// once the column passes it.
const bestWidth = 80

// maxSimpleKey is the longest key yaml.v2 writes as "key: value"; a longer one is a "? key".
const maxSimpleKey = 128

// emitter is one document's conversion: the JSON, the arena of its nodes, the members of the
// objects and arrays being read, and the YAML written.
type emitter struct {
	src   []byte
	pos   int
	arena []jnode
	stack []jnode
	out   bytes.Buffer
	// keys and values remember the YAML form of strings already seen.
	keys, values map[string]jnode
}

var emitters = sync.Pool{New: func() any { return new(emitter) }}

// fastYAML converts one JSON document to yaml.v2's block YAML, or reports false when some value
// needs yaml.v2 itself.
func fastYAML(js []byte) ([]byte, bool) {
	e := emitters.Get().(*emitter)
	defer emitters.Put(e)
	e.src, e.pos, e.arena, e.stack = js, 0, e.arena[:0], e.stack[:0]
	e.out.Reset()
	defer func() { e.src = nil }()
	root, ok := e.value()
	if !ok || root.kind != 'o' {
		return nil, false
	}
	if root.n == 0 {
		e.out.WriteString("{}\n")
	} else if !e.mapping(&root, 0) {
		return nil, false
	}
	return bytes.Clone(e.out.Bytes()), true
}

func (e *emitter) indent(n int) {
	const spaces = "                                                                "
	for n > len(spaces) {
		e.out.WriteString(spaces)
		n -= len(spaces)
	}
	e.out.WriteString(spaces[:n])
}

// mapping writes a non-empty object's entries at indent, the first one where the cursor is.
func (e *emitter) mapping(v *jnode, indent int) bool {
	for i := v.first; i < v.first+v.n; i++ {
		k := &e.arena[i]
		if i > v.first {
			e.indent(indent)
		}
		e.out.WriteString(k.key)
		e.out.WriteByte(':')
		if !e.member(k, indent, indent+len(k.key)+2, true) {
			return false
		}
	}
	return true
}

// sequence writes a non-empty array's items at indent, the first one where the cursor is.
func (e *emitter) sequence(v *jnode, indent int) bool {
	for i := v.first; i < v.first+v.n; i++ {
		if i > v.first {
			e.indent(indent)
		}
		e.out.WriteByte('-')
		if !e.member(&e.arena[i], indent, indent+2, false) {
			return false
		}
	}
	return true
}

// member writes the value after "key:" or "-": a scalar or empty collection on the same line,
// a mapping or sequence on the next lines (a sequence in a mapping not indented, as yaml.v2
// writes it) or, in a sequence, starting on the same line.
func (e *emitter) member(v *jnode, indent, column int, inMapping bool) bool {
	switch {
	case v.kind == 's':
		if v.space && column+v.width() > bestWidth {
			return false
		}
		e.out.WriteByte(' ')
		if v.quote != 0 {
			e.out.WriteByte(v.quote)
			e.out.WriteString(v.text)
			e.out.WriteByte(v.quote)
		} else {
			e.out.WriteString(v.text)
		}
		e.out.WriteByte('\n')
		return true
	case v.n == 0 && v.kind == 'o':
		e.out.WriteString(" {}\n")
		return true
	case v.n == 0:
		e.out.WriteString(" []\n")
		return true
	case v.kind == 'o' && inMapping:
		e.out.WriteByte('\n')
		e.indent(indent + 2)
		return e.mapping(v, indent+2)
	case inMapping:
		e.out.WriteByte('\n')
		e.indent(indent)
		return e.sequence(v, indent)
	case v.kind == 'o':
		e.out.WriteByte(' ')
		return e.mapping(v, indent+2)
	default:
		e.out.WriteByte(' ')
		return e.sequence(v, indent+2)
	}
}

// value reads the JSON encoding/json writes; anything it does not expect is a false return, and
// the document goes to yaml.v2.
func (e *emitter) value() (jnode, bool) {
	if e.pos >= len(e.src) {
		return jnode{}, false
	}
	switch c := e.src[e.pos]; {
	case c == '{':
		return e.object()
	case c == '[':
		return e.array()
	case c == '"':
		return e.scalar(false)
	case c == 't' && bytes.HasPrefix(e.src[e.pos:], []byte("true")):
		e.pos += 4
		return jnode{kind: 's', text: "true"}, true
	case c == 'f' && bytes.HasPrefix(e.src[e.pos:], []byte("false")):
		e.pos += 5
		return jnode{kind: 's', text: "false"}, true
	case c == 'n' && bytes.HasPrefix(e.src[e.pos:], []byte("null")):
		e.pos += 4
		return jnode{kind: 's', text: "null"}, true
	case c == '-' || c >= '0' && c <= '9':
		return e.number()
	}
	return jnode{}, false
}

// collect moves the members read since mark from the stack to the arena, contiguous.
func (e *emitter) collect(kind byte, mark int) jnode {
	n := jnode{kind: kind, first: int32(len(e.arena)), n: int32(len(e.stack) - mark)}
	e.arena = append(e.arena, e.stack[mark:]...)
	e.stack = e.stack[:mark]
	return n
}

func (e *emitter) object() (jnode, bool) {
	e.pos++ // {
	mark := len(e.stack)
	if e.pos < len(e.src) && e.src[e.pos] == '}' {
		e.pos++
		return e.collect('o', mark), true
	}
	for {
		if e.pos >= len(e.src) || e.src[e.pos] != '"' {
			return jnode{}, false
		}
		k, ok := e.scalar(true)
		if !ok || e.pos >= len(e.src) || e.src[e.pos] != ':' {
			return jnode{}, false
		}
		key, raw := k.key, k.raw
		e.pos++
		v, ok := e.value()
		if !ok {
			return jnode{}, false
		}
		v.key, v.raw = key, raw
		e.stack = append(e.stack, v)
		if e.pos >= len(e.src) {
			return jnode{}, false
		}
		if e.src[e.pos] == '}' {
			e.pos++
			break
		}
		if e.src[e.pos] != ',' {
			return jnode{}, false
		}
		e.pos++
	}
	members := e.stack[mark:]
	slices.SortFunc(members, byRaw)
	sortKeys(members)
	return e.collect('o', mark), true
}

func (e *emitter) array() (jnode, bool) {
	e.pos++ // [
	mark := len(e.stack)
	if e.pos < len(e.src) && e.src[e.pos] == ']' {
		e.pos++
		return e.collect('a', mark), true
	}
	for {
		v, ok := e.value()
		if !ok {
			return jnode{}, false
		}
		e.stack = append(e.stack, v)
		if e.pos >= len(e.src) {
			return jnode{}, false
		}
		if e.src[e.pos] == ']' {
			e.pos++
			return e.collect('a', mark), true
		}
		if e.src[e.pos] != ',' {
			return jnode{}, false
		}
		e.pos++
	}
}

// scalar reads a JSON string as a scalar, or as a key (its YAML form in key, the string in raw).
// Rendered objects repeat the same keys and many of the same values thousands of times, so the
// forms are remembered.
func (e *emitter) scalar(key bool) (jnode, bool) {
	start := e.pos
	end := start + 1
	for end < len(e.src) && e.src[end] != '"' && e.src[end] != '\\' {
		end++
	}
	cache := &e.values
	if key {
		cache = &e.keys
	}
	if end < len(e.src) && e.src[end] == '"' {
		if n, hit := (*cache)[string(e.src[start+1:end])]; hit {
			e.pos = end + 1
			return n, true
		}
	}
	s, ok := e.str()
	if !ok {
		return jnode{}, false
	}
	if key && (s == "" || len(s) > maxSimpleKey) {
		return jnode{}, false
	}
	n, ok := scalarNode(s, key)
	if !ok {
		return jnode{}, false
	}
	if key {
		n.key, n.raw = n.text, s
		if n.quote != 0 {
			n.key = string(n.quote) + n.text + string(n.quote)
		}
	}
	switch {
	case *cache == nil:
		*cache = make(map[string]jnode, 256)
	case len(*cache) >= maxCachedScalars:
		// Start again rather than stop remembering: the strings every object has come back
		// at once, the ones only one object has do not. Cleared, the map keeps its memory.
		clear(*cache)
	}
	(*cache)[s] = n
	return n, true
}
