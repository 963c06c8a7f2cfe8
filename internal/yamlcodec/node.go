package yamlcodec

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	yamlv3 "go.yaml.in/yaml/v3"
)

// NodeJSON writes the JSON sigs.k8s.io/yaml's YAMLToJSON makes of a document, from the node tree
// already parsed for lines, so a file is parsed once instead of twice. It knows YAML 1.1 as
// yaml.v2 reads it only for what machine-written files hold: mappings with string keys,
// sequences, quoted and block strings, and plain scalars that are strings, booleans, null or
// decimal integers. Anything else (anchors, aliases, merge keys, tags, floats, octal or hex
// numbers, timestamps, keys that are not strings) returns false and the caller converts the
// document with YAMLToJSON itself. yamljson_test.go compares the two.
func NodeJSON(buf *bytes.Buffer, n *yamlv3.Node) bool {
	if n.Anchor != "" || n.Style&yamlv3.TaggedStyle != 0 {
		return false
	}
	switch n.Kind {
	case yamlv3.MappingNode:
		if len(n.Content)%2 != 0 {
			return false
		}
		// JSON objects from YAMLToJSON have their keys sorted (encoding/json sorts map keys);
		// the order does not change what decodes, but it keeps the two forms comparable.
		idx := make([]int, 0, len(n.Content)/2)
		for i := 0; i < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yamlv3.ScalarNode || k.Anchor != "" || k.Style&yamlv3.TaggedStyle != 0 {
				return false
			}
			if k.Style&(yamlv3.DoubleQuotedStyle|yamlv3.SingleQuotedStyle|yamlv3.LiteralStyle|yamlv3.FoldedStyle) == 0 {
				if k.Value == "" || k.Value == "<<" {
					return false
				}
				if isStr, known := plainString(k.Value); !known || !isStr {
					return false
				}
			}
			idx = append(idx, i)
		}
		slices.SortFunc(idx, func(a, b int) int { return strings.Compare(n.Content[a].Value, n.Content[b].Value) })
		buf.WriteByte('{')
		for j, i := range idx {
			if j > 0 {
				buf.WriteByte(',')
			}
			if !jsonString(buf, n.Content[i].Value) {
				return false
			}
			buf.WriteByte(':')
			if !NodeJSON(buf, n.Content[i+1]) {
				return false
			}
		}
		buf.WriteByte('}')
		return true
	case yamlv3.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if !NodeJSON(buf, c) {
				return false
			}
		}
		buf.WriteByte(']')
		return true
	case yamlv3.ScalarNode:
		if n.Style&(yamlv3.DoubleQuotedStyle|yamlv3.SingleQuotedStyle|yamlv3.LiteralStyle|yamlv3.FoldedStyle) != 0 {
			return jsonString(buf, n.Value)
		}
		return plainJSON(buf, n.Value)
	}
	return false
}

// plainJSON writes a plain scalar as yaml.v2 resolves it.
func plainJSON(buf *bytes.Buffer, s string) bool {
	switch s {
	case "", "~", "null", "Null", "NULL":
		buf.WriteString("null")
		return true
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		buf.WriteString("true")
		return true
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		buf.WriteString("false")
		return true
	}
	isStr, known := plainString(s)
	if !known {
		return false
	}
	if isStr {
		return jsonString(buf, s)
	}
	if decimalInt(s) {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			buf.WriteString(strconv.FormatInt(i, 10))
			return true
		}
	}
	return false
}

// decimalInt is -?(0|[1-9][0-9]*): the integers yaml.v2 and JSON read alike (yaml.v2 reads
// 0777 as octal and accepts + and _; those and floats are left to YAMLToJSON).
func decimalInt(s string) bool {
	if strings.HasPrefix(s, "-") {
		s = s[1:]
	}
	if s == "" || s[0] == '0' && len(s) > 1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// yamlResolveMap is yaml.v2's table of plain scalars that are not strings.
var yamlResolveMap = map[string]bool{}

func init() {
	for _, s := range []string{
		"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON",
		"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF",
		"", "~", "null", "Null", "NULL",
		".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF",
		"<<",
	} {
		yamlResolveMap[s] = true
	}
}

// plainString reports whether yaml.v2 (how kubectl, kustomize and sigs.k8s.io/yaml read
// YAML) reads s, written as a plain scalar, as a string: its resolve("", s) is !!str and, as
// its encoder also asks before writing s plain, s is not a base 60 float. It follows yaml.v2's
// resolve.go; known is false for what might be a timestamp (YYYY-...), which it leaves to
// yaml.v2.
func plainString(s string) (isString, known bool) {
	if s == "" {
		return false, true
	}
	c := s[0]
	if !(c == '+' || c == '-' || c == '.' || c >= '0' && c <= '9' || strings.IndexByte("yYnNtTfFoO~", c) >= 0) {
		return true, true
	}
	if yamlResolveMap[s] {
		return false, true
	}
	switch {
	case c == '.':
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return false, true
		}
	case c == '+' || c == '-' || c >= '0' && c <= '9':
		if looksLikeTimestamp(s) {
			return false, false
		}
		plain := strings.ReplaceAll(s, "_", "")
		if _, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return false, true
		}
		if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return false, true
		}
		if yamlStyleFloat(plain) {
			if _, err := strconv.ParseFloat(plain, 64); err == nil {
				return false, true
			}
		}
		if strings.HasPrefix(plain, "0b") {
			if _, err := strconv.ParseUint(plain[2:], 2, 64); err == nil {
				return false, true
			}
			if _, err := strconv.ParseInt(plain[2:], 2, 64); err == nil {
				return false, true
			}
		} else if strings.HasPrefix(plain, "-0b") {
			if _, err := strconv.ParseInt("-"+plain[3:], 2, 64); err == nil {
				return false, true
			}
		}
	}
	// yaml.v2 quotes base 60 floats (1:20) for other parsers' sake.
	return !isBase60Float(s), true
}

// looksLikeTimestamp is yaml.v2's parseTimestamp test, "YYYY-" first; such strings go to yaml.v2.
func looksLikeTimestamp(s string) bool {
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
	}
	return i == 4 && i < len(s) && s[i] == '-'
}

// yamlStyleFloat is ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$ without a regexp.
func yamlStyleFloat(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	} else {
		if digits() == 0 {
			return false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits()
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// isBase60Float is yaml.v2's ^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$ test, with its
// quick check.
func isBase60Float(s string) bool {
	if s == "" {
		return false
	}
	c := s[0]
	if !(c == '+' || c == '-' || c >= '0' && c <= '9') || strings.IndexByte(s, ':') < 0 {
		return false
	}
	i := 0
	if s[i] == '+' || s[i] == '-' {
		i++
	}
	if i >= len(s) || s[i] < '0' || s[i] > '9' {
		return false
	}
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_') {
		i++
	}
	groups := 0
	for i < len(s) && s[i] == ':' {
		i++
		n := 0
		for n < 2 && i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		// [0-5]?[0-9]: one digit, or two with the first 0-5 (two with a first digit over 5
		// leave a digit the rest of the pattern cannot take).
		if n == 0 || n == 2 && s[i-2] > '5' {
			return false
		}
		groups++
	}
	if groups == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_') {
			i++
		}
	}
	return i == len(s)
}

// jsonString writes s as encoding/json would read it back; invalid UTF-8 is left to YAMLToJSON.
func jsonString(buf *bytes.Buffer, s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf.WriteString(s[start:i])
		switch c {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\n':
			buf.WriteString(`\n`)
		case '\t':
			buf.WriteString(`\t`)
		case '\r':
			buf.WriteString(`\r`)
		default:
			buf.WriteString(`\u00`)
			buf.WriteByte("0123456789abcdef"[c>>4])
			buf.WriteByte("0123456789abcdef"[c&0xf])
		}
		start = i + 1
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
	return true
}

// DocumentJSON is the document's JSON from its node tree (NodeJSON), for a document that is one
// mapping and has no tag: yaml.v2 gives even the non-specific tag "!" a meaning the tree no
// longer shows.
func DocumentJSON(data []byte, root *yamlv3.Node) ([]byte, bool) {
	if root.Kind != yamlv3.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yamlv3.MappingNode || bytes.IndexByte(data, '!') >= 0 {
		return nil, false
	}
	var buf bytes.Buffer
	buf.Grow(len(data))
	if !NodeJSON(&buf, root.Content[0]) {
		return nil, false
	}
	return buf.Bytes(), true
}
