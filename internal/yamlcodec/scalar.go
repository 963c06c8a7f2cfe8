package yamlcodec

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// maxCachedScalars bounds each emitter's memory of scalar forms.
const maxCachedScalars = 4096

// str reads a JSON string. Escapes (encoding/json writes \", \\, \n, \u003c and the like) are
// decoded by encoding/json.
func (e *emitter) str() (string, bool) {
	start := e.pos
	e.pos++
	escaped := false
	for e.pos < len(e.src) {
		switch e.src[e.pos] {
		case '\\':
			escaped = true
			e.pos += 2
			continue
		case '"':
			e.pos++
			if !escaped {
				return string(e.src[start+1 : e.pos-1]), true
			}
			var s string
			if err := json.Unmarshal(e.src[start:e.pos], &s); err != nil {
				return "", false
			}
			return s, true
		}
		e.pos++
	}
	return "", false
}

// number writes a JSON number as yaml.v2 writes the int64 or float64 sigs.k8s.io/yaml makes of it.
func (e *emitter) number() (jnode, bool) {
	start := e.pos
	for e.pos < len(e.src) {
		c := e.src[e.pos]
		if c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || c >= '0' && c <= '9' {
			e.pos++
			continue
		}
		break
	}
	num := string(e.src[start:e.pos])
	if i, err := strconv.ParseInt(num, 10, 64); err == nil {
		return jnode{kind: 's', text: strconv.FormatInt(i, 10)}, true
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return jnode{}, false
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	switch s {
	case "+Inf", "-Inf", "NaN":
		return jnode{}, false
	}
	return jnode{kind: 's', text: s}, true
}

// scalarNode is a string scalar in the form yaml.v2 writes it.
func scalarNode(s string, key bool) (jnode, bool) {
	text, quote, space, ok := scalarText(s, key)
	return jnode{kind: 's', text: text, quote: quote, space: space}, ok
}

// scalarText is a string as yaml.v2 writes it (plain, or between ' or " quotes), for the
// strings whose form this file knows: printable ASCII, no line break, no quote or backslash
// where a quoted form would need escaping. space reports a space, where yaml.v2 may fold a long
// value (keys are never folded).
func scalarText(s string, key bool) (text string, quote byte, space bool, ok bool) {
	if s == "" {
		if key {
			return "", 0, false, false
		}
		return "", '"', false, true
	}
	hasSingle, hasDouble := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ':
			space = true
		case c == '\'':
			hasSingle = true
		case c == '"' || c == '\\':
			hasDouble = true
		case c < 0x21 || c > 0x7e:
			return "", 0, false, false
		}
	}
	isString, known := plainString(s)
	if !known {
		return "", 0, false, false
	}
	if !isString {
		// yaml.v2 asks for double quotes when a plain scalar would read as another type.
		if hasDouble {
			return "", 0, false, false
		}
		return s, '"', space, true
	}
	if plainAllowed(s) {
		return s, 0, space, true
	}
	// Plain is refused by an indicator or an edge space: yaml.v2 falls back to single quotes,
	// which hold any printable ASCII, with ' doubled.
	if hasSingle {
		return strings.ReplaceAll(s, "'", "''"), '\'', space, true
	}
	return s, '\'', space, true
}

// plainAllowed is yaml_emitter_analyze_scalar's block_plain_allowed for a non-empty printable
// ASCII string without line breaks.
func plainAllowed(s string) bool {
	if strings.HasPrefix(s, "---") || strings.HasPrefix(s, "...") {
		return false
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	blankAfter := func(i int) bool { return i+1 >= len(s) || s[i+1] == ' ' }
	switch s[0] {
	case '#', ',', '[', ']', '{', '}', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	case '?', ':', '-':
		if blankAfter(0) {
			return false
		}
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case ':':
			if blankAfter(i) {
				return false
			}
		case '#':
			if s[i-1] == ' ' {
				return false
			}
		}
	}
	return true
}

// sortKeys orders keys, given in byte order, as yaml.v2's keyList.Less orders string keys:
// letters before other characters, runs of digits by their value. Where that comparison is not
// an order, yaml.v2's result depends on the map's iteration; this insertion sort of the
// byte-ordered keys always gives the same one.
func sortKeys(keys []jnode) {
	if len(keys) > 64 {
		// Labels or annotations by the thousand: a merge sort, deterministic like the
		// insertion sort below, without its square.
		slices.SortStableFunc(keys, func(a, b jnode) int {
			switch {
			case keyLess(a.raw, b.raw):
				return -1
			case keyLess(b.raw, a.raw):
				return 1
			}
			return 0
		})
		return
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keyLess(keys[j].raw, keys[j-1].raw); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

func byRaw(a, b jnode) int { return strings.Compare(a.raw, b.raw) }

// keyLess is yaml.v2's keyList.Less for two strings (sorter.go).
func keyLess(a, b string) bool {
	// Runes in buffers on the stack: keys are short, and this runs for every pair sorted.
	var abuf, bbuf [64]rune
	ar, br := appendRunes(abuf[:0], a), appendRunes(bbuf[:0], b)
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			continue
		}
		al := unicode.IsLetter(ar[i])
		bl := unicode.IsLetter(br[i])
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			return bl
		}
		var ai, bi int
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(ar[j]); j-- {
				if ar[j] != '0' {
					an = 1
					bn = 1
					break
				}
			}
		}
		for ai = i; ai < len(ar) && unicode.IsDigit(ar[ai]); ai++ {
			an = an*10 + int64(ar[ai]-'0')
		}
		for bi = i; bi < len(br) && unicode.IsDigit(br[bi]); bi++ {
			bn = bn*10 + int64(br[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}

func appendRunes(buf []rune, s string) []rune {
	for _, r := range s {
		buf = append(buf, r)
	}
	return buf
}
