package api

import (
	"fmt"
	"strings"
	"testing"
)

// A duplicate key is refused with both its lines, in a document long enough for the fast reader.
func TestDuplicateKeyNamedWithLine(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: gitbroker.dev/v1alpha1\nkind: NodeInventory\nmetadata:\n  name: n\nspec:\n  configurations:\n  - name: c\n    devices:\n    - id: d\n      properties:\n")
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "        P%d: v\n", i)
	}
	b.WriteString("        P17: again\n")
	_, err := SplitDocuments("inventory/n.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), `key "P17" is given twice`) || !strings.Contains(err.Error(), "inventory/n.yaml:5011:") || !strings.Contains(err.Error(), "first on line 28") {
		t.Fatalf("want the duplicate key named with its line, got %v", err)
	}
}

// TestYAMLDirectives: %YAML 1.2 is valid YAML (the YAML library reads only 1.1); a document
// after it reads the same and its lines keep their numbers. Another major version and %TAG are
// refused at their line.
func TestYAMLDirectives(t *testing.T) {
	doc := "apiVersion: akri.sh/v0\nkind: Configuration\nmetadata:\n  name: cam\n"
	for _, tc := range []struct{ stream, err string }{
		{"%YAML 1.2\n---\n" + doc, ""},
		{"# a comment first\n%YAML 1.1\n--- # and one here\n" + doc, ""},
		{doc + "...\n%YAML 1.2\n---\n" + doc, ""},
		{"%YAML 2.0\n---\n" + doc, "configurations/c.yaml:1: invalid YAML: %YAML 2.0 is not a YAML version"},
		{"%YAML 1.2\n%TAG ! tag:example.com,2026:\n---\n" + doc, "configurations/c.yaml:2: invalid YAML: %TAG directives are not supported"},
	} {
		docs, err := SplitDocuments("configurations/c.yaml", []byte(tc.stream))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: want %q, got %v", tc.stream, tc.err, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.stream, err)
			continue
		}
		last := docs[len(docs)-1]
		if want := strings.Count(tc.stream, "\n"); last.LineOf("metadata.name") != want {
			t.Errorf("%q: metadata.name on line %d, want %d", tc.stream, last.LineOf("metadata.name"), want)
		}
		if !strings.Contains(string(last.JSON), `"name":"cam"`) {
			t.Errorf("%q: read as %s", tc.stream, last.JSON)
		}
	}
}
