package yamlcodec

import (
	"fmt"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/gitbroker/gitbroker/fixtures"
)

var blockCorner = []string{
	"a: 1\nb:\n  c: d\n  e:\n  - f\n  - g: h\n    i: j\n  - - k\n",
	"a:\n- x\n- y\nb: z\n",
	"a:\n  - x\n  - y\nb: z\n",
	"a: b\n  c\n",
	"a:\n- b\n  c\n",
	"a: 'it''s'\nb: \"q\"\nc: ''\nd: \"\"\ne: 'a'b'\n",
	"a: {}\nb: []\nc: {x: 1}\nd: [1]\n",
	"a: x # comment\nb: x#y\nc: x: y\n",
	"a: -1\nb: -x\nc: - x\nd: -\n",
	"a: 1\na: 2\n",
	"a:\n  b: 1\n   c: 2\n",
	"a:\n  b: 1\n c: 2\n",
	"- a\n- b\n",
	"a: yes\nb: No\nc: ~\nd: null\ne: 0777\nf: 1.5\ng: 12345678901234567890\nh: 2001-01-01\n",
	"a: \"1\"\nb: '2'\nc: \"true\"\n",
	"a:    spaced\nb: trailing \nc:\n",
	"a:\n\n  b: 1\n\n",
	"true: x\n1: y\n",
	"a: |\n  x\n",
	"a: >-\n  x\n",
	"a: &x 1\nb: *x\n",
	"a: !!str 1\n",
	"a: ? x\n",
	"a: %x\n",
	"a:\n- b: 1\n  c:\n  - d\n- e\n",
	"a:\n-   b: 1\n    c: 2\n",
	"a: \"x\\ny\"\n",
	"a: 'x\"y'\nb: \"x'y\"\n",
	"key.with/slash_and-dash: v\n",
	"a: b:c\nd: http://x/y\n",
	"...\n",
	"a: 1\n...\n",
	"a:\n  -\n    b\n",
}

// compareBlockJSON fails when BlockJSON reads a document otherwise than yaml.v3 and YAMLToJSON
// do, and reports whether it read it.
func compareBlockJSON(t *testing.T, doc string) bool {
	t.Helper()
	fast, ok := BlockJSON([]byte(doc))
	if !ok {
		return false
	}
	var root yamlv3.Node
	if err := yamlv3.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatalf("BlockJSON read a document yaml.v3 refuses (%v):\n%s", err, doc)
	}
	if duplicateKey(&root) {
		t.Fatalf("BlockJSON read a document with a duplicate key:\n%s", doc)
	}
	sameAsYAMLToJSON(t, "BlockJSON", doc, fast)
	return true
}

func TestBlockJSONMatchesYAMLToJSON(t *testing.T) {
	read := 0
	docs := yamlCorpus(t)
	docs = append(docs, blockCorner...)
	for _, doc := range docs {
		if compareBlockJSON(t, doc) {
			read++
		}
	}
	t.Logf("BlockJSON read %d of %d documents", read, len(docs))
	if read < len(docs)/2 {
		t.Fatalf("BlockJSON read only %d of %d documents", read, len(docs))
	}
}

// The inventories agents write, the fleet's, must all take the fast path.
func TestBlockJSONReadsInventories(t *testing.T) {
	fleet := fixtures.Fleet(fixtures.FleetSpec{Nodes: 50, Configurations: 4, Devices: 400, Seed: 1})
	n := 0
	for p, b := range fleet {
		if !strings.HasPrefix(p, "inventory/") {
			continue
		}
		n++
		if !compareBlockJSON(t, string(b)) {
			t.Fatalf("%s is not read by BlockJSON:\n%s", p, b)
		}
	}
	if n == 0 {
		t.Fatal("no inventories")
	}
}

func FuzzBlockJSON(f *testing.F) {
	for _, d := range append(append([]string(nil), blockCorner...), yamlCorner...) {
		f.Add(d)
	}
	f.Add(fmt.Sprint("a:\n- b: 1\n  c: [x]\n"))
	f.Fuzz(func(t *testing.T, doc string) {
		compareBlockJSON(t, doc)
	})
}

// A mapping of many keys is read in one pass, and a key given twice in it is still refused,
// with both lines named.
func TestBlockJSONManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: n\nspec:\n  configurations:\n  - name: c\n    devices:\n    - id: d\n      properties:\n")
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "        P%d: v\n", i)
	}
	if !compareBlockJSON(t, b.String()) {
		t.Fatal("BlockJSON did not read the document")
	}
	b.WriteString("        P17: again\n")
	if _, ok := BlockJSON([]byte(b.String())); ok {
		t.Fatal("BlockJSON read a duplicate key")
	}
}

// duplicateKey reports whether a mapping in the tree gives one key twice.
func duplicateKey(n *yamlv3.Node) bool {
	if n.Kind == yamlv3.MappingNode {
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yamlv3.ScalarNode {
				if seen[k.Value] {
					return true
				}
				seen[k.Value] = true
			}
		}
	}
	for _, c := range n.Content {
		if duplicateKey(c) {
			return true
		}
	}
	return false
}
