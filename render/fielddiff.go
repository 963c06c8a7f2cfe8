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

// fieldDiff says which fields of an object changed between two renders of its file, as
// `flux diff` and `helm diff` show it: "spec.containers[0].image: nginx:1 → nginx:2". The
// inputs hash is left out when anything else changed: it changes with them.
func fieldDiff(before, after []byte) string {
	a, b := leaves(before), leaves(after)
	var changes []string
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
	hashOnly := ""
	for _, p := range paths {
		x, inA := a[p]
		y, inB := b[p]
		var c string
		switch {
		case inA && inB && x == y:
			continue
		case inA && inB:
			c = fmt.Sprintf("%s: %s → %s", p, short(x), short(y))
		case inB:
			c = fmt.Sprintf("%s: added %s", p, short(y))
		default:
			c = fmt.Sprintf("%s: removed", p)
		}
		if p == "metadata.annotations."+api.AnnotationInputsHash {
			hashOnly = c
			continue
		}
		changes = append(changes, c)
	}
	if len(changes) == 0 {
		return hashOnly
	}
	if len(changes) > maxFieldChanges {
		changes = append(changes[:maxFieldChanges], fmt.Sprintf("and %d more fields", len(changes)-maxFieldChanges))
	}
	return strings.Join(changes, "; ")
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
