package yamlcodec

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// yamlCorner holds YAML 1.1 as yaml.v2 reads it differently from YAML 1.2, and the constructs
// the node tree loses: each document must either convert as YAMLToJSON converts it or be left
// to YAMLToJSON.
var yamlCorner = []string{
	"a: yes\nb: no\nc: on\nd: off\ne: y\nf: N\ng: ~\nh:\ni: null\nj: True\n",
	"a: 0777\nb: 0x1F\nc: 1_000\nd: +1\ne: -1\nf: 1.5\ng: 1e3\nh: .inf\ni: -.inf\nj: .nan\nk: 0b101\nl: 1:20\n",
	"a: 9223372036854775807\nb: 9223372036854775808\nc: -9223372036854775808\nd: 0\ne: -0\nf: 00\n",
	"a: 2001-12-14\nb: 2001-12-14t21:59:43.10-05:00\nc: 2001-13-45\nd: 1234-x\n",
	"a: 192.168.1.10\nb: 1.2.3\nc: 10a\nd: 1 2\ne: '1'\nf: \"2\"\n",
	"a: !!str 1\nb: !!int \"2\"\nc: ! 3\nd: !custom x\n",
	"base: &b {x: 1}\nuse: *b\nm:\n  <<: *b\n  y: 2\n",
	"? complex\n: value\n[a]: b\n",
	"1: one\ntrue: t\nyes: y\nnull: n\n~: tilde\n1.5: f\n",
	"s: |\n  line 1\n  line 2\nf: >\n  folded\n  text\nq: \"tab\\tnewline\\n\\u00e9\\\\\"\nu: Süd\n",
	"list:\n- a\n- - b\n  - c\n- {x: 1, y: [1, 2]}\n- []\n- {}\nempty: []\n",
	"key with spaces: value with: colon\n'quoted key': x\n\"dq\": y\n",
	"a: \"\\x01\\u2028\"\nb: 'it''s'\nc: \"\\\"\"\n",
	"a: 1\n# comment\nb: 2 # trailing\n",
}

func yamlCorpus(t *testing.T) []string {
	docs := append([]string(nil), yamlCorner...)
	for _, root := range []string{"../../fixtures", "../../templates", "../../deploy"} {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, documents(b)...)
			return nil
		})
	}
	return docs
}

func decodeJSON(t *testing.T, js []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// compareNodeJSON reports whether the node tree's JSON was used, failing when it differs.
func compareNodeJSON(t *testing.T, doc string) bool {
	t.Helper()
	var root yamlv3.Node
	if err := yamlv3.Unmarshal([]byte(doc), &root); err != nil {
		return false
	}
	fast, ok := DocumentJSON([]byte(doc), &root)
	if !ok {
		return false
	}
	sameAsYAMLToJSON(t, "the node tree", doc, fast)
	return true
}

// sameAsYAMLToJSON fails unless YAMLToJSON reads doc and gets what fast decodes to.
func sameAsYAMLToJSON(t *testing.T, reader, doc string, fast []byte) {
	t.Helper()
	slow, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("%s read a document YAMLToJSON refuses (%v):\n%s", reader, err, doc)
	}
	if a, b := decodeJSON(t, fast), decodeJSON(t, slow); !reflect.DeepEqual(a, b) {
		t.Fatalf("%s differs from YAMLToJSON on\n%s\n%s: %s\nYAMLToJSON: %s", reader, doc, reader, fast, slow)
	}
}

func TestNodeJSONMatchesYAMLToJSON(t *testing.T) {
	fast := 0
	docs := yamlCorpus(t)
	for _, doc := range docs {
		if compareNodeJSON(t, doc) {
			fast++
		}
	}
	if fast < len(docs)/2 {
		t.Fatalf("the node tree converted only %d of %d documents", fast, len(docs))
	}
	t.Logf("node tree JSON: %d of %d documents", fast, len(docs))
}

func FuzzNodeJSON(f *testing.F) {
	for _, d := range yamlCorner {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		compareNodeJSON(t, doc)
	})
}

// documents splits a YAML stream at its "---" lines.
func documents(b []byte) []string {
	var docs []string
	var cur strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.TrimRight(line, " \r\n") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.String())
}
