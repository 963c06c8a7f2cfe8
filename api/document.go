package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	yamlv3 "go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// MaxFileSize bounds one input file; larger files are refused rather than parsed.
const MaxFileSize = 8 << 20

// Document is one YAML document of a file: its JSON form (as kubectl would read it) and its text,
// from which its node tree is parsed again when an error needs a line. A fleet's inventories
// are read on every render and rarely wrong: keeping every node tree would hold more memory
// than the whole rendered output.
type Document struct {
	File string
	// Line is the first line of the document in its file.
	Line int
	JSON []byte

	text     []byte
	rootOnce sync.Once
	root     *yamlv3.Node
	// prefix is the path of this document within the one its text holds: "items[2]." for an
	// item of a List (ListItems); field paths are reported and looked up under it.
	prefix string
}

// ListItems returns the items of a document of kind List (apiVersion v1, as kubectl get -o
// yaml prints several objects), each a Document whose errors name "items[<i>].<field>" at its
// line; ok is false for any other document. Fields the API server sets and a reviewed file
// never holds are dropped from each item: status, and metadata's uid, resourceVersion,
// generation, creationTimestamp, managedFields and selfLink.
func (d *Document) ListItems() (items []*Document, ok bool, err error) {
	apiVersion, kind := d.TypeMeta()
	if kind != "List" || apiVersion != "v1" {
		return nil, false, nil
	}
	var l struct {
		Items []map[string]json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(d.JSON, &l); err != nil {
		return nil, true, d.Errorf("items", "expected a list of objects: %v", err)
	}
	for i, item := range l.Items {
		delete(item, "status")
		if raw, ok := item["metadata"]; ok {
			var meta map[string]json.RawMessage
			if err := json.Unmarshal(raw, &meta); err == nil {
				for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink"} {
					delete(meta, f)
				}
				if item["metadata"], err = json.Marshal(meta); err != nil {
					return nil, true, err
				}
			}
		}
		js, err := json.Marshal(item)
		if err != nil {
			return nil, true, err
		}
		items = append(items, &Document{File: d.File, Line: d.Line, JSON: js, text: d.text, prefix: fmt.Sprintf("%sitems[%d].", d.prefix, i)})
	}
	return items, true, nil
}

// tree is the document's node tree, lines counted in its file.
func (d *Document) tree() *yamlv3.Node {
	d.rootOnce.Do(func() {
		var root yamlv3.Node
		if yamlv3.Unmarshal(d.text, &root) == nil {
			shiftLines(&root, d.Line-1)
			d.root = &root
		}
	})
	return d.root
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// SplitDocuments splits a YAML stream into its non-empty documents. YAML is read the way kubectl
// and kustomize read it (sigs.k8s.io/yaml), so existing Akri files mean the same thing here.
func SplitDocuments(file string, data []byte) ([]*Document, error) {
	if len(data) > MaxFileSize {
		return nil, &FieldError{File: file, Message: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
	}
	data, err := directives(file, data)
	if err != nil {
		return nil, err
	}
	var docs []*Document
	for _, chunk := range splitYAML(data) {
		if isBlankYAML(chunk.data) {
			continue
		}
		if js, ok := yamlcodec.BlockJSON(chunk.data); ok {
			docs = append(docs, &Document{File: file, Line: chunk.line, JSON: js, text: chunk.data})
			continue
		}
		var root yamlv3.Node
		if err := yamlv3.Unmarshal(chunk.data, &root); err != nil {
			return nil, yamlError(file, chunk.line, err)
		}
		shiftLines(&root, chunk.line-1)
		if err := duplicateKeys(file, &root); err != nil {
			return nil, err
		}
		js, ok := yamlcodec.DocumentJSON(chunk.data, &root)
		if !ok {
			// Not YAMLToJSONStrict: its yaml.v2 decoder also refuses a key that overrides one
			// brought in by a merge key ({<<: *base, memory: 24Mi}), which YAML allows and
			// kubectl accepts. Real duplicates were refused above.
			var err error
			if js, err = yaml.YAMLToJSON(chunk.data); err != nil {
				return nil, yamlError(file, chunk.line, err)
			}
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		docs = append(docs, &Document{File: file, Line: chunk.line, JSON: js, text: chunk.data})
	}
	return docs, nil
}

// directives turns the YAML directives of a stream (%YAML 1.2 before a document's "---") into
// comments, keeping every line where it is: the YAML library reads only %YAML 1.1 and refuses
// 1.2, which is valid YAML and means the same for the plain data of a Configuration. A %TAG
// directive (it would change what tags mean) and a %YAML of another major version are refused.
func directives(file string, data []byte) ([]byte, error) {
	if !bytes.HasPrefix(data, []byte("%")) && !bytes.Contains(data, []byte("\n%")) {
		return data, nil
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	prefix := true // before a document's content: where directives are
	var out bytes.Buffer
	for i, l := range lines {
		text := strings.TrimRight(string(l), " \t\r\n")
		switch {
		case prefix && strings.HasPrefix(text, "%"):
			fields := strings.Fields(text)
			switch {
			case fields[0] == "%YAML" && len(fields) >= 2 && strings.HasPrefix(fields[1], "1."):
			case fields[0] == "%YAML":
				return nil, &FieldError{File: file, Line: i + 1, Message: fmt.Sprintf("invalid YAML: %s is not a YAML version gitbroker reads (1.1 and 1.2 are)", text)}
			case fields[0] == "%TAG":
				return nil, &FieldError{File: file, Line: i + 1, Message: "invalid YAML: %TAG directives are not supported; write tags in full"}
			}
			out.WriteString("# ")
		case text == "---" || strings.HasPrefix(text, "--- ") || text != "" && !strings.HasPrefix(text, "#") && text != "...":
			prefix = false
		case text == "...":
			prefix = true
		}
		out.Write(l)
	}
	return out.Bytes(), nil
}

// duplicateKeys refuses a mapping that gives one key twice, naming both lines. A key given
// explicitly next to a merge key (<<) may override a merged one: that is how merges are used.
func duplicateKeys(file string, n *yamlv3.Node) error {
	switch n.Kind {
	case yamlv3.DocumentNode, yamlv3.SequenceNode:
		for _, c := range n.Content {
			if err := duplicateKeys(file, c); err != nil {
				return err
			}
		}
	case yamlv3.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yamlv3.ScalarNode && k.Tag != "!!merge" && k.Value != "<<" {
				if first, dup := seen[k.Value]; dup {
					return &FieldError{File: file, Line: k.Line, Message: fmt.Sprintf("invalid YAML: key %q is given twice in one mapping (first on line %d)", k.Value, first)}
				}
				seen[k.Value] = k.Line
			}
			if err := duplicateKeys(file, v); err != nil {
				return err
			}
		}
	}
	return nil
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
		// encoding/json reports type errors without list indices and errors of custom decoders
		// (quantities, times) without any path: find the failing value by decoding piece by piece.
		field, t, cause := locate(reflect.TypeOf(out), d.JSON, "")
		if cause == nil {
			field, t, cause = "", nil, err
		}
		errs = append(errs, d.Errorf(field, "%s", decodeMessage(cause, t)))
	}
	for _, se := range strictErrs {
		var fe kjson.FieldError
		if !errors.As(se, &fe) {
			errs = append(errs, d.Errorf("", "%s", se.Error()))
			continue
		}
		kind := "unknown field"
		if strings.HasPrefix(se.Error(), "duplicate field") {
			kind = "duplicate field"
		}
		errs = append(errs, d.Errorf(fe.FieldPath(), "%s", kind))
	}
	return errs
}

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// locate finds the deepest value of raw that does not decode into t and returns its path, the
// type it should have had and the error; a nil error means raw decodes.
func locate(t reflect.Type, raw json.RawMessage, path string) (string, reflect.Type, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	err := kjson.UnmarshalCaseSensitivePreserveInts(raw, reflect.New(t).Interface())
	if err == nil {
		return "", nil, nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return path, t, err
	}
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return path, t, err
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			if ft, ok := fields[k]; ok {
				if p, ft, e := locate(ft, obj[k], join(k)); e != nil {
					return p, ft, e
				}
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return path, t, err
		}
		for _, k := range sortedKeys(obj) {
			if p, ft, e := locate(t.Elem(), obj[k], join(k)); e != nil {
				return p, ft, e
			}
		}
	case reflect.Slice:
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return path, t, err
		}
		for i, el := range list {
			if p, ft, e := locate(t.Elem(), el, fmt.Sprintf("%s[%d]", path, i)); e != nil {
				return p, ft, e
			}
		}
	}
	return path, t, err
}

// jsonFields maps the JSON names of a struct's fields, inline fields included, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case name == "" && f.Anonymous:
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range jsonFields(ft) {
				out[k] = v
			}
		case name == "":
			out[f.Name] = f.Type
		default:
			out[name] = f.Type
		}
	}
	return out
}

var typeErrRE = regexp.MustCompile(`cannot unmarshal (\w+) into`)

// decodeMessage says what was wrong with a value that should have been of type t.
func decodeMessage(err error, t reflect.Type) string {
	text := strings.TrimPrefix(err.Error(), "json: ")
	if m := typeErrRE.FindStringSubmatch(text); m != nil && t != nil {
		return fmt.Sprintf("expected %s, got %s", kindName(t), m[1])
	}
	return text
}

func kindName(t reflect.Type) string {
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		switch t.Name() {
		case "IntOrString":
			return "an integer or a string"
		case "Quantity":
			return "a quantity such as 100m or 1Gi"
		case "Time":
			return "an RFC 3339 time"
		case "Duration":
			return "a duration such as 10m"
		}
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a map"
	}
	return t.String()
}

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

// decodeOne decodes file, which must hold exactly one document of kind in gitbroker's
// apiVersion, strictly into out: the prelude of the recorder's status records.
func decodeOne(file string, data []byte, kind string, out any) (*Document, ErrorList) {
	docs, err := SplitDocuments(file, data)
	if err != nil {
		return nil, ErrorList{err.(*FieldError)}
	}
	if len(docs) != 1 {
		return nil, ErrorList{{File: file, Message: fmt.Sprintf("expected exactly one %s document, found %d", kind, len(docs))}}
	}
	d := docs[0]
	apiVersion, got := d.TypeMeta()
	if got != kind {
		return nil, ErrorList{d.Errorf("kind", "expected kind %q, got %q", kind, got)}
	}
	if apiVersion != APIVersion {
		return nil, ErrorList{d.Errorf("apiVersion", "expected %q, got %q", APIVersion, apiVersion)}
	}
	if errs := d.DecodeStrict(out); len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	return d, nil
}
