package details

import (
	"slices"
	"sort"
)

// Handler is one discovery handler gitbroker knows by name: a row of Handlers, which the
// agent (what it serves itself, and what it logs of a handler), the renderer and review (which
// discoveryDetails to check, which names to suggest for a typo) all read.
type Handler struct {
	// Name is the spec.discoveryHandler.name, as Akri spells it.
	Name string
	// Builtin says the agent serves the handler itself (agent.Builtins); otherwise it is
	// Akri's handler container, which registers over Akri's gRPC protocol.
	Builtin bool
	// Check parses discoveryDetails as the handler does (as Akri's serde types read them, for
	// Akri's own handlers).
	Check func(details string) error
	// NotServed says, in the agent's log, why a node may have no such handler; "" for Akri's
	// general reason (no handler of that name has registered).
	NotServed string
	// NothingFound hints, in the agent's log, why the handler may find no device; "" for the
	// general hint.
	NothingFound string
}

// Handlers is the table, sorted by name. A new built-in handler is its parser and its agent
// implementation (one file each) and a row here; a row of Akri's needs only its parser.
var Handlers = []Handler{
	{Name: DebugEcho, Builtin: true, Check: check(ParseDebugEcho),
		NotServed: "debugEcho is a test handler, served only with --allow-debug-echo (Akri's agent.allowDebugEcho)"},
	{Name: ONVIF, Check: check(ParseONVIF)},
	{Name: OPCUA, Check: check(ParseOPCUA)},
	{Name: Udev, Builtin: true, Check: check(ParseUdev),
		NothingFound: "no device on this node matches its udevRules (udevadm info --export-db shows what each rule can match)"},
}

// check is a parser as a Check.
func check[T any](parse func(string) (T, error)) func(string) error {
	return func(details string) error {
		_, err := parse(details)
		return err
	}
}

// Lookup is the row of the handler name.
func Lookup(name string) (Handler, bool) {
	i, ok := sort.Find(len(Handlers), func(i int) int {
		switch {
		case name < Handlers[i].Name:
			return -1
		case name > Handlers[i].Name:
			return 1
		}
		return 0
	})
	if !ok {
		return Handler{}, false
	}
	return Handlers[i], true
}

// Names are the handlers' names, sorted.
func Names() []string {
	out := make([]string, 0, len(Handlers))
	for _, h := range Handlers {
		out = append(out, h.Name)
	}
	return slices.Clip(out)
}

// Builtin reports whether the agent itself implements the handler name.
func Builtin(name string) bool {
	h, ok := Lookup(name)
	return ok && h.Builtin
}

// Check parses details as the handler name does, for the handlers of the table; for any other
// handler it returns nil: its own container parses them, in a format only it knows.
func Check(name, details string) error {
	if h, ok := Lookup(name); ok && h.Check != nil {
		return h.Check(details)
	}
	return nil
}

// Checked reports whether Check knows name's format.
func Checked(name string) bool {
	h, ok := Lookup(name)
	return ok && h.Check != nil
}
