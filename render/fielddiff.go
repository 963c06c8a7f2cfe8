package render

import (
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
)

// maxFieldChanges bounds the fields a plan lists for one object; the rest are counted.
const maxFieldChanges = 6

// FieldChange is one field of an object that changed, for plan -o json: its path (named lists
// by name), and its value before and after (a string as it is, anything else as JSON; "" when
// absent).
type FieldChange struct {
	Path string `json:"path"`
	// Op is changed, added or removed.
	Op     string `json:"op"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
}

// fieldChanges lists the fields of an object that changed between two renders of its file. The
// inputs hash is left out when anything else changed: it changes with them.
func fieldChanges(before, after []byte) []FieldChange {
	a, b := leaves(before), leaves(after)
	var paths []string
	for p := range a {
		paths = append(paths, p)
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var changes []FieldChange
	var hash *FieldChange
	for _, p := range paths {
		x, inA := a[p]
		y, inB := b[p]
		if inA && inB && x == y {
			continue
		}
		c := FieldChange{Path: p, Op: "changed", Before: plain(x), After: plain(y)}
		if !inA {
			c.Op = "added"
		} else if !inB {
			c.Op = "removed"
		}
		if p == "metadata.annotations."+api.AnnotationInputsHash {
			hash = &c
			continue
		}
		changes = append(changes, c)
	}
	if len(changes) == 0 && hash != nil {
		return []FieldChange{*hash}
	}
	return changes
}

// plain is a leaf's value as a person writes it: a JSON string unquoted, anything else as JSON.
func plain(v string) string {
	var s string
	if err := json.Unmarshal([]byte(v), &s); err == nil {
		return s
	}
	return v
}

// fieldDiff says which fields changed, as `flux diff` and `helm diff` show it:
// "spec.containers[name=broker].image: nginx:1 → nginx:2".
func fieldDiff(changes []FieldChange) string {
	var out []string
	for _, c := range changes {
		switch c.Op {
		case "changed":
			out = append(out, fmt.Sprintf("%s: %s → %s", c.Path, short(c.Before), short(c.After)))
		case "added":
			out = append(out, fmt.Sprintf("%s: added %s", c.Path, short(c.After)))
		default:
			out = append(out, fmt.Sprintf("%s: removed", c.Path))
		}
	}
	if len(out) > maxFieldChanges {
		out = append(out[:maxFieldChanges], fmt.Sprintf("and %d more fields", len(out)-maxFieldChanges))
	}
	return strings.Join(out, "; ")
}

// leaves flattens a YAML document into its scalar fields, keyed by their path.
func leaves(doc []byte) map[string]string {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return map[string]string{"": "(unreadable)"}
	}
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 0 {
				out[path] = "{}"
			}
			for k, x := range v {
				if path == "" {
					walk(k, x)
				} else {
					walk(path+"."+k, x)
				}
			}
		case []any:
			if len(v) == 0 {
				out[path] = "[]"
			}
			names := listNames(v)
			for i, x := range v {
				if names != nil {
					// Keyed by its name, the element's name field says nothing more.
					m := maps.Clone(x.(map[string]any))
					delete(m, "name") // {name: X} alone is still one leaf, "{}"
					walk(fmt.Sprintf("%s[name=%s]", path, names[i]), m)
				} else {
					walk(fmt.Sprintf("%s[%d]", path, i), x)
				}
			}
		default:
			b, _ := json.Marshal(v)
			out[path] = string(b)
		}
	}
	walk("", v)
	return out
}

// listNames returns the names of a list's elements when each is a mapping with a name of its
// own (containers, env, ports, volumes), so a change reads "env[name=VERSION].value: 4 → 5" and an
// entry added in the middle does not shift every later one; nil otherwise.
func listNames(list []any) []string {
	names := make([]string, len(list))
	seen := map[string]bool{}
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok {
			return nil
		}
		n, ok := m["name"].(string)
		if !ok || n == "" || seen[n] {
			return nil
		}
		seen[n] = true
		names[i] = n
	}
	return names
}

func short(v string) string {
	if s, err := strconv.Unquote(v); err == nil && !strings.ContainsAny(s, "\n\"") {
		v = s
	}
	if r := []rune(v); len(r) > 60 {
		v = string(r[:57]) + "..."
	}
	return v
}
