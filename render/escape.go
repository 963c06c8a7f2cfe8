package render

import (
	"strconv"
	"strings"
	"unicode"
)

// Text that nodes and the cluster report (device ids, a Job's failure message, errors quoting
// inventory values) reaches plans, commit messages and pull-request descriptions. It is escaped
// there, so a device cannot format a reviewer's page, hide lines in it, or mention people.

// printable quotes s when it holds anything but printable characters, so a terminal shows
// control characters instead of acting on them.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// mdEscaper escapes what can start markup mid-line (emphasis, code, links, images, tables,
// strikethrough, HTML, mentions); text is never at a line's start here.
var mdEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`, "|", `\|`, "~", `\~`,
	"<", "&lt;", ">", "&gt;", "&", "&amp;", "@", "&#64;",
)

// mdText escapes s as one line of markdown text: no markup, no HTML, no mentions, and no new
// lines (printable quotes them).
func mdText(s string) string { return mdEscaper.Replace(printable(s)) }

// mdCode writes s as an inline code span, on one line, that s cannot end: the fence is longer
// than any run of backticks in s.
func mdCode(s string) string {
	s = printable(s)
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if longest > 0 || strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}
