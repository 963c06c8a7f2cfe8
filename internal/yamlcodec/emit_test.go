package yamlcodec

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	yamlv2 "go.yaml.in/yaml/v2"
)

// Strings chosen at yaml.v2's edges: other types written plain, indicators, quotes, spaces at
// the ends, timestamps, base 60, numbers in all the forms strconv reads, and text yaml.v2 folds.
var emitStrings = []string{
	"", "a", "abc", "ghcr.io/project-akri/akri/onvif-video-broker:latest", "1", "0", "-1", "+1",
	"1.5", ".5", "1e5", "1E+5", "3e", "0x1F", "0o17", "0b101", "-0b101", "0b2", "0777", "089",
	"1_000", "_1", "1__0", "9223372036854775808", "18446744073709551616", "1:20", "1:2:3",
	"1:60", "190:20:30.15", "-1:20", "1:20.5", "12:5x", "2001-12-14", "2001-12-14t21:59:43.10-05:00",
	"2001-13-45", "1234-", "yes", "Yes", "no", "NO", "on", "off", "y", "n", "true", "False", "null",
	"Null", "~", "<<", "<", "<x", ".inf", "-.inf", "+.INF", ".nan", ".", "..", "...", "...a",
	"---", "--", "-", "-a", "- a", "?", "?a", ":", ":a", "a:", "a:b", "a: b", "a #b", "a#b", "#a",
	"a,b", "[a]", "{a}", "&a", "*a", "!a", "|a", ">a", "'a", "a'b", "it's", `"a`, `a"b`, `a\b`,
	"%a", "@a", "`a", " a", "a ", "a  b", "a b", "hello world", "sh -c 'echo hi'",
	`say "hi"`, "tab\there", "line\nbreak", "trailing\n", "Süd", "é", "\x7f", "a\u2028b",
	"<script>", "a&b", "x>y", "1 2", "-1 2", "0.0.0.0", "1.2.3", "v1", "Never", "IfNotPresent",
	strings.Repeat("word ", 20), strings.Repeat("x", 100), strings.Repeat("ab ", 30) + "end",
	"akri.sh/configuration", "gitbroker.dev/inputs-hash", "a1", "a01", "a10", "a9", "A", "B", "_a",
	"a_b", "a-b", "a.b", "a/b", "0a", "00a", "1a", "10a", "9a", "a0b", "a00b",
}

// randomJSON builds a document of objects, arrays and scalars from emitStrings.
func randomJSON(rng *rand.Rand, depth int) any {
	switch k := rng.Intn(10); {
	case depth > 4 || k < 4:
		switch rng.Intn(8) {
		case 0:
			return rng.Int63n(2000) - 1000
		case 1:
			return []float64{0.5, 1e21, -2.25, 1e-7, 3, 123456789.125}[rng.Intn(6)]
		case 2:
			return rng.Intn(2) == 0
		case 3:
			return nil
		default:
			return emitStrings[rng.Intn(len(emitStrings))]
		}
	case k < 7:
		m := map[string]any{}
		for i := rng.Intn(5); i > 0; i-- {
			key := emitStrings[rng.Intn(len(emitStrings))]
			if rng.Intn(3) == 0 {
				key = fmt.Sprintf("key%d", rng.Intn(30))
			}
			m[key] = randomJSON(rng, depth+1)
		}
		return m
	default:
		var a []any
		for i := rng.Intn(4); i > 0; i-- {
			a = append(a, randomJSON(rng, depth+1))
		}
		if a == nil {
			a = []any{}
		}
		return a
	}
}

// checkEmit compares the fast emitter with yaml.v2 on one JSON document, and reports whether the
// fast path took it.
func checkEmit(t *testing.T, js []byte) bool {
	t.Helper()
	fast, ok := fastYAML(js)
	if !ok {
		return false
	}
	if slow := slowYAML(js); string(fast) != string(slow) {
		t.Fatalf("the fast emitter differs from yaml.v2 on %s:\nfast:\n%s\nyaml.v2:\n%s", js, fast, slow)
	}
	return true
}

func TestEmitMatchesYAMLv2(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	fastCount := 0
	const docs = 20000
	for i := 0; i < docs; i++ {
		doc := map[string]any{"apiVersion": "v1", "kind": "Pod"}
		for j := rng.Intn(6); j > 0; j-- {
			doc[emitStrings[rng.Intn(len(emitStrings))]] = randomJSON(rng, 0)
		}
		js, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if checkEmit(t, js) {
			fastCount++
		}
	}
	// Most generated documents hold a string the fast path leaves to yaml.v2; enough of them
	// must go through it for the comparison to mean something.
	if fastCount < docs/10 {
		t.Fatalf("the fast emitter took only %d of %d documents", fastCount, docs)
	}
	t.Logf("fast emitter: %d of %d documents", fastCount, docs)
}

// Every scalar on its own and as a key, at columns that put long values either side of 80.
func TestEmitScalars(t *testing.T) {
	fast := 0
	for _, s := range emitStrings {
		for _, key := range []string{"k", strings.Repeat("k", 40), strings.Repeat("k", 70)} {
			for _, doc := range []any{
				map[string]any{key: s},
				map[string]any{s: key},
				map[string]any{key: []any{s, map[string]any{s: s}}},
				map[string]any{key: map[string]any{key: map[string]any{key: s}}},
			} {
				js, _ := json.Marshal(doc)
				if checkEmit(t, js) {
					fast++
				}
			}
		}
	}
	t.Logf("fast emitter: %d documents", fast)
}

func FuzzEmit(f *testing.F) {
	for _, s := range emitStrings {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		for _, doc := range []any{
			map[string]any{"key": v},
			map[string]any{k: v, "list": []any{v, map[string]any{k: v}}},
			map[string]any{strings.Repeat("k", len(k)%80): map[string]any{k: []any{v}}},
		} {
			js, err := json.Marshal(doc)
			if err != nil {
				return
			}
			checkEmit(t, js)
		}
	})
}

// sortKeys gives yaml.v2's order wherever yaml.v2's comparison is an order on the keys.
func TestEmitKeyOrderMatchesYAMLv2(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	compared := 0
	for i := 0; i < 5000; i++ {
		m := map[string]any{}
		for j := 2 + rng.Intn(6); j > 0; j-- {
			m[emitStrings[rng.Intn(len(emitStrings))]] = 1
		}
		var keys []jnode
		for k := range m {
			keys = append(keys, jnode{raw: k})
		}
		consistent := true
		for _, a := range keys {
			for _, b := range keys {
				if a.raw != b.raw && keyLess(a.raw, b.raw) == keyLess(b.raw, a.raw) {
					consistent = false
				}
			}
		}
		for _, a := range keys {
			for _, b := range keys {
				for _, c := range keys {
					if keyLess(a.raw, b.raw) && keyLess(b.raw, c.raw) && !keyLess(a.raw, c.raw) {
						consistent = false
					}
				}
			}
		}
		if !consistent {
			continue
		}
		compared++
		js, _ := json.Marshal(m)
		want, err := yamlv2.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := slowYAML(js); string(got) != string(want) {
			t.Fatalf("key order differs from yaml.v2:\n%s\nyaml.v2:\n%s", got, want)
		}
	}
	if compared < 1000 {
		t.Fatalf("only %d key sets compared", compared)
	}
}

// Objects with many keys are sorted another way; the order must still be yaml.v2's.
func TestEmitManyKeys(t *testing.T) {
	m := map[string]any{}
	for i := 0; i < 300; i++ {
		m[fmt.Sprintf("key%d", i)] = i
		m[fmt.Sprintf("k.io/a%d-b", i)] = "v"
	}
	js, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": m}})
	want, err := yamlv2.Marshal(map[string]any{"metadata": map[string]any{"labels": m}})
	if err != nil {
		t.Fatal(err)
	}
	if got := slowYAML(js); string(got) != string(want) {
		t.Fatalf("yaml.v2 path: key order differs from yaml.v2")
	}
	if got, ok := fastYAML(js); !ok || string(got) != string(want) {
		t.Fatalf("fast path (took it: %v): key order differs from yaml.v2", ok)
	}
}
