package api

import (
	"bytes"
	"encoding/json"
	"fmt"
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
