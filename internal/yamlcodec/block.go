package yamlcodec

import (
	"bytes"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// BlockJSON reads the block YAML that gitbroker itself writes (an agent's inventory, the
// recorder's records, every rendered object: one mapping, keys of letters, digits and ._/-, a
// value per line, plain or quoted without escapes, sequences written "- "), and returns the JSON
// YAMLToJSON gives for it, without building a node tree. It returns false for anything else
// (comments, tabs, flow collections other than {} and [], multi-line scalars, anchors, tags,
// duplicate keys, scalars plainJSON leaves to yaml.v2), and the caller parses the document in
// full. A fleet's inventories are most of a render's input, and this reads them several times
// faster. blockyaml_test.go compares it with yaml.v3 and YAMLToJSON on every YAML file in the
// repository and fuzzes the comparison.
func BlockJSON(data []byte) ([]byte, bool) {
	p := blockParser{}
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		if bytes.IndexByte(line, '\t') >= 0 || bytes.IndexByte(line, '\r') >= 0 {
			return nil, false
		}
		text := strings.TrimLeft(string(line), " ")
		if text == "" {
			continue
		}
		p.lines = append(p.lines, blockLine{indent: len(line) - len(text), text: text})
	}
	if len(p.lines) == 0 || p.lines[0].indent != 0 {
		return nil, false
	}
	var buf bytes.Buffer
	buf.Grow(len(data) + 64*len(p.lines))
	p.buf = &buf
	if !p.mapping(0) || p.pos != len(p.lines) {
		return nil, false
	}
	return buf.Bytes(), true
}

type blockLine struct {
	indent int
	text   string
}

type blockParser struct {
	lines []blockLine
	pos   int
	buf   *bytes.Buffer
	depth int
}

// maxBlockDepth is how deep BlockJSON nests; deeper documents are left to yaml.v3 and its limits.
const maxBlockDepth = 64

// entry is one "key: value" of a mapping, its value written to its own buffer so the keys can
// be sorted as YAMLToJSON's encoding/json sorts them.
type entry struct {
	key   string
	value []byte
}

// mapping reads the entries of a block mapping at indent.
func (p *blockParser) mapping(indent int) bool {
	if p.depth++; p.depth > maxBlockDepth {
		return false
	}
	defer func() { p.depth-- }()
	var entries []entry
	var seen map[string]bool
	outer := p.buf
	defer func() { p.buf = outer }()
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent < indent {
			break
		}
		if l.indent > indent || strings.HasPrefix(l.text, "- ") || l.text == "-" {
			return false
		}
		key, rest, ok := splitKey(l.text)
		if !ok {
			return false
		}
		if seen != nil {
			if seen[key] {
				return false
			}
			seen[key] = true
		} else {
			for _, e := range entries {
				if e.key == key {
					return false
				}
			}
			if len(entries) == 16 {
				// A node writes this file: a mapping of many keys must not cost their square.
				seen = make(map[string]bool, 64)
				for _, e := range entries {
					seen[e.key] = true
				}
				seen[key] = true
			}
		}
		var value bytes.Buffer
		p.buf = &value
		p.pos++
		if rest != "" {
			if !p.scalar(rest, indent) {
				return false
			}
		} else if !p.nested(indent) {
			return false
		}
		entries = append(entries, entry{key, value.Bytes()})
	}
	p.buf = outer
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	p.buf.WriteByte('{')
	for i, e := range entries {
		if i > 0 {
			p.buf.WriteByte(',')
		}
		jsonString(p.buf, e.key)
		p.buf.WriteByte(':')
		p.buf.Write(e.value)
	}
	p.buf.WriteByte('}')
	return true
}

// nested reads the value of "key:" at indent given on the lines after it: a mapping indented
// deeper, a sequence at the key's indent or deeper, or nothing (null).
func (p *blockParser) nested(indent int) bool {
	if p.pos >= len(p.lines) || p.lines[p.pos].indent < indent {
		p.buf.WriteString("null")
		return true
	}
	l := p.lines[p.pos]
	if strings.HasPrefix(l.text, "- ") {
		return p.sequence(l.indent)
	}
	if l.indent == indent {
		p.buf.WriteString("null")
		return true
	}
	return p.mapping(l.indent)
}

// sequence reads the items of a block sequence at indent. An item that starts a mapping
// ("- key: value") continues at indent+2.
func (p *blockParser) sequence(indent int) bool {
	if p.depth++; p.depth > maxBlockDepth {
		return false
	}
	defer func() { p.depth-- }()
	p.buf.WriteByte('[')
	for n := 0; p.pos < len(p.lines); n++ {
		l := p.lines[p.pos]
		if l.indent < indent {
			break
		}
		if l.indent > indent || !strings.HasPrefix(l.text, "- ") {
			if l.indent == indent && n > 0 {
				// The parent mapping's next key at the same indent as its sequence.
				break
			}
			return false
		}
		if n > 0 {
			p.buf.WriteByte(',')
		}
		item := strings.TrimLeft(l.text[2:], " ")
		at := indent + len(l.text) - len(item)
		if item == "" || strings.HasPrefix(item, "- ") || item == "-" {
			return false
		}
		if _, _, isKey := splitKey(item); isKey {
			p.lines[p.pos] = blockLine{indent: at, text: item}
			if !p.mapping(at) {
				return false
			}
			continue
		}
		p.pos++
		if !p.scalar(item, indent) {
			return false
		}
	}
	p.buf.WriteByte(']')
	return true
}

// scalar writes a value given on its key's or item's line; the next line must not continue it.
func (p *blockParser) scalar(s string, indent int) bool {
	if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
		return false
	}
	switch {
	case s == "{}":
		p.buf.WriteString("{}")
		return true
	case s == "[]":
		p.buf.WriteString("[]")
		return true
	case !printableASCII(s):
		return false
	case s[0] == '"':
		if len(s) < 2 || s[len(s)-1] != '"' || strings.ContainsAny(s[1:len(s)-1], `"\`) {
			return false
		}
		return jsonString(p.buf, s[1:len(s)-1])
	case s[0] == '\'':
		if len(s) < 2 || s[len(s)-1] != '\'' {
			return false
		}
		inner := s[1 : len(s)-1]
		if strings.Count(inner, "'")%2 != 0 || strings.Contains(strings.ReplaceAll(inner, "''", ""), "'") {
			return false
		}
		return jsonString(p.buf, strings.ReplaceAll(inner, "''", "'"))
	}
	if !plainScalar(s) {
		return false
	}
	return plainJSON(p.buf, s)
}

// plainScalar is a one-line plain scalar YAML reads as the whole of s (s is printable ASCII): not
// starting with an indicator, without ": ", " #" or a trailing ':' or space.
func plainScalar(s string) bool {
	switch s[0] {
	case '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		// "-1" is a number YAML reads plain; anything else starting so is left to the parser.
		if !(s[0] == '-' && len(s) > 1 && s[1] >= '0' && s[1] <= '9') {
			return false
		}
	}
	// ",[]{}" after the first character are text in a block scalar ("Force=true,Replace=true").
	return !strings.Contains(s, ": ") && !strings.Contains(s, " #") && !strings.HasSuffix(s, ":") && !strings.HasSuffix(s, " ")
}

// splitKey splits "key: value" or "key:" where key is letters, digits and ._/- (and not a word
// yaml.v2 reads as another type), at most 128 bytes (YAML allows 1024 for a key without "? ").
func splitKey(text string) (key, rest string, ok bool) {
	i := strings.IndexByte(text, ':')
	if i <= 0 || i > 128 || i+1 < len(text) && text[i+1] != ' ' {
		return "", "", false
	}
	key = text[:i]
	for j := 0; j < len(key); j++ {
		c := key[j]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '/' || c == '-') {
			return "", "", false
		}
	}
	if isStr, known := plainString(key); !isStr || !known || key[0] == '-' {
		return "", "", false
	}
	return key, strings.TrimLeft(text[i+1:], " "), true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// YAMLToJSON is sigs.k8s.io/yaml's YAMLToJSON, reading the block YAML gitbroker writes without
// yaml.v2 (see BlockJSON): what the renderer uses to read back its own rendered files.
func ToJSON(data []byte) ([]byte, error) {
	if js, ok := BlockJSON(data); ok {
		return js, nil
	}
	return yaml.YAMLToJSON(data)
}
