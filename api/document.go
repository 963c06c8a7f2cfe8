package api

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// MaxFileSize bounds one input file; larger files are refused rather than parsed.
const MaxFileSize = 8 << 20

// Document is one YAML document of a file: its JSON form (as kubectl would read it) and its node
// tree, kept to point errors at lines.
type Document struct {
	File string
	// Line is the first line of the document in its file.
	Line int
	JSON []byte
	root *yamlv3.Node
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// SplitDocuments splits a YAML stream into its non-empty documents. YAML is read the way kubectl
// and kustomize read it (sigs.k8s.io/yaml), so existing Akri files mean the same thing here.
func SplitDocuments(file string, data []byte) ([]*Document, error) {
	if len(data) > MaxFileSize {
		return nil, &FieldError{File: file, Message: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
	}
	var docs []*Document
	for _, chunk := range splitYAML(data) {
		if isBlankYAML(chunk.data) {
			continue
		}
		var root yamlv3.Node
		if err := yamlv3.Unmarshal(chunk.data, &root); err != nil {
			return nil, yamlError(file, chunk.line, err)
		}
		shiftLines(&root, chunk.line-1)
		js, err := yaml.YAMLToJSONStrict(chunk.data)
		if err != nil {
			return nil, yamlError(file, chunk.line, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		docs = append(docs, &Document{File: file, Line: chunk.line, JSON: js, root: &root})
	}
	return docs, nil
}

type yamlChunk struct {
	line int
	data []byte
}

// splitYAML cuts a stream at "---" separator lines, remembering where each document starts.
func splitYAML(data []byte) []yamlChunk {
	var chunks []yamlChunk
	start, startLine, line := 0, 1, 1
	for i := 0; i <= len(data); {
		end := bytes.IndexByte(data[i:], '\n')
		next := len(data) + 1
		lineEnd := len(data)
		if end >= 0 {
			lineEnd = i + end
			next = lineEnd + 1
		}
		text := strings.TrimRight(string(data[i:lineEnd]), " \t\r")
		if text == "---" || strings.HasPrefix(text, "--- ") {
			chunks = append(chunks, yamlChunk{line: startLine, data: data[start:i]})
			start, startLine = next, line+1
			if start > len(data) {
				start = len(data)
			}
		}
		i = next
		line++
	}
	chunks = append(chunks, yamlChunk{line: startLine, data: data[start:]})
	return chunks
}

func isBlankYAML(data []byte) bool {
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func shiftLines(n *yamlv3.Node, by int) {
	n.Line += by
	for _, c := range n.Content {
		shiftLines(c, by)
	}
}

func yamlError(file string, firstLine int, err error) error {
	msg := err.Error()
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		line = firstLine + n - 1
		msg = yamlLineRE.ReplaceAllString(msg, "")
	}
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "yaml: ", "")), " ")
	msg = strings.TrimPrefix(msg, ": ")
	return &FieldError{File: file, Line: line, Message: "invalid YAML: " + msg}
}

// TypeMeta reads apiVersion and kind without decoding the rest.
func (d *Document) TypeMeta() (apiVersion, kind string) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	_ = kjson.UnmarshalCaseSensitivePreserveInts(d.JSON, &tm)
	return tm.APIVersion, tm.Kind
}

// DecodeStrict decodes the document into out, rejecting unknown, duplicate and mistyped fields.
// Every problem is returned as a FieldError naming the line and field path.
func (d *Document) DecodeStrict(out any) ErrorList {
	strictErrs, err := kjson.UnmarshalStrict(d.JSON, out)
	var errs ErrorList
	if err != nil {
		var typeErr interface{ Error() string }
		typeErr = err
		field, msg := describeDecodeError(err)
		if field == "" {
			errs = append(errs, &FieldError{File: d.File, Line: d.Line, Message: typeErr.Error()})
		} else {
			errs = append(errs, d.Errorf(field, "%s", msg))
		}
	}
	for _, se := range strictErrs {
		var fe kjson.FieldError
		if errors.As(se, &fe) {
			kind := "unknown field"
			if strings.HasPrefix(se.Error(), "duplicate field") {
				kind = "duplicate field"
			}
			errs = append(errs, d.Errorf(fe.FieldPath(), "%s", kind))
			continue
		}
		errs = append(errs, &FieldError{File: d.File, Line: d.Line, Message: se.Error()})
	}
	return errs
}

var typeErrRE = regexp.MustCompile(`^json: cannot unmarshal (.+) into Go struct field [^ ]*? of type (.+)$`)

// describeDecodeError turns encoding/json's type errors into a field path and a short message.
func describeDecodeError(err error) (field, msg string) {
	var fe kjson.FieldError
	if errors.As(err, &fe) {
		field = fe.FieldPath()
	}
	type fielded interface{ Error() string }
	text := err.(fielded).Error()
	if field == "" {
		// encoding/json's UnmarshalTypeError carries the path as "Struct.field.path".
		if i := strings.Index(text, "Go struct field "); i >= 0 {
			rest := text[i+len("Go struct field "):]
			if j := strings.Index(rest, " of type "); j >= 0 {
				path := rest[:j]
				if k := strings.Index(path, "."); k >= 0 {
					field = path[k+1:]
				}
			}
		}
	}
	if m := typeErrRE.FindStringSubmatch(text); m != nil {
		return field, fmt.Sprintf("expected %s, got %s", goTypeName(m[2]), m[1])
	}
	return field, strings.TrimPrefix(text, "json: ")
}

func goTypeName(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a map"
	case strings.Contains(t, "IntOrString"):
		return "an integer or a string"
	case strings.Contains(t, "Quantity"):
		return "a quantity"
	}
	return "an object (" + t + ")"
}

// Errorf builds a FieldError for a field path of this document, finding its line.
func (d *Document) Errorf(field string, format string, args ...any) *FieldError {
	e := &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	if d != nil {
		e.File, e.Line = d.File, d.LineOf(field)
	}
	return e
}

// LineOf returns the line of a field path such as "spec.brokerSpec.brokerPodSpec.containers[0].image".
// Map keys may themselves contain dots (annotations); list indices may be missing (encoding/json
// type errors), in which case the first element that has the rest of the path is chosen. When the
// path cannot be followed to the end, the line of the deepest node reached is returned.
func (d *Document) LineOf(field string) int {
	if d == nil || d.root == nil {
		return 0
	}
	n := d.root
	if n.Kind == yamlv3.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
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
		return n.Line, false
	case yamlv3.SequenceNode:
		if toks[0].index >= 0 {
			if toks[0].index < len(n.Content) {
				return lookup(n.Content[toks[0].index], toks[1:])
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
