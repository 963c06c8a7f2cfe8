package house

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the module's root, two folders up.
const root = "../.."

// generated is Go's marker of a generated file (go help generate).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// sources are the module's hand-written Go files that are not tests, by path from the root.
func sources(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !generated.Match(b) {
			rel, _ := filepath.Rel(root, p)
			out[filepath.ToSlash(rel)] = b
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out)
	return out
}

// A file a newcomer reads whole stays short enough to: over 500 lines it holds more than one
// thing, and is split by what each part owns.
func TestNoHandWrittenFileIsOver500Lines(t *testing.T) {
	for p, b := range sources(t) {
		n := bytes.Count(b, []byte("\n"))
		assert.LessOrEqual(t, n, 500, "%s has %d lines: split it by what each part owns", p, n)
	}
}

// A render stage reads in one screen or two: no function of render/ or renderer/ is over 100
// lines.
func TestNoRenderFunctionIsOver100Lines(t *testing.T) {
	for p, b := range sources(t) {
		if !strings.HasPrefix(p, "render/") && !strings.HasPrefix(p, "renderer/") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, b, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			assert.LessOrEqual(t, n, 100, "%s: %s is %d lines: split it into stages that hand values on", p, fn.Name.Name, n)
		}
	}
}
