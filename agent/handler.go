package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gitbroker/gitbroker/agent/details"
	"github.com/gitbroker/gitbroker/api"
)

// ErrNotReady is returned by a handler that has not produced its first list
// of devices yet. The agent keeps what it knew before.
var ErrNotReady = errors.New("discovery handler has not reported devices yet")

// Request asks a handler for the devices of one Configuration.
type Request struct {
	// Configuration is "<namespace>/<name>".
	Configuration string
	// Details is the Configuration's spec.discoveryHandler.discoveryDetails,
	// passed through as Akri does.
	Details string
	// Properties are the Configuration's discoveryProperties with inline
	// values.
	Properties map[string][]byte
}

// Handler discovers devices. Discover returns the devices visible now; a
// handler that watches (a gRPC stream) returns the latest list it has.
type Handler interface {
	Discover(ctx context.Context, req Request) ([]api.Device, error)
}

// Source finds the handler for a discoveryHandler name.
type Source interface {
	Handler(name string) (Handler, bool)
}

// Retainer is a Source that holds per-Configuration state (open streams);
// the agent tells it after each cycle which requests are still wanted so
// it can close the others.
type Retainer interface {
	Retain(keys map[string]bool)
}

// Builtin is a fixed set of handlers keyed by discoveryHandler name.
type Builtin map[string]Handler

// BuiltinOptions choose and set up the agent's built-in handlers.
type BuiltinOptions struct {
	// UdevRoot is where udev's view of the devices is (the host's /, or a test's folder).
	UdevRoot string
	// DebugEcho serves Akri's debugEcho test handler (Akri's agent.allowDebugEcho); off, a
	// debugEcho Configuration discovers nothing.
	DebugEcho bool
	// DebugEchoShared and DebugEchoAvailability are DebugEcho's Shared and AvailabilityFile.
	DebugEchoShared       bool
	DebugEchoAvailability string
}

// builtins are the agent's implementations of the built-in rows of details.Handlers, each
// made from the options, and whether the options serve it
// (TestEveryBuiltinHandlerIsImplemented keeps the two in step).
var builtins = map[string]func(BuiltinOptions) (Handler, bool){
	UdevName: func(o BuiltinOptions) (Handler, bool) { return Udev{Root: o.UdevRoot}, true },
	DebugEchoName: func(o BuiltinOptions) (Handler, bool) {
		return DebugEcho{Shared: o.DebugEchoShared, AvailabilityFile: o.DebugEchoAvailability}, o.DebugEcho
	},
}

// Builtins are the handlers the agent serves itself (the built-in rows of details.Handlers):
// udev, and debugEcho when allowed.
func Builtins(o BuiltinOptions) Builtin {
	b := Builtin{}
	for _, row := range details.Handlers {
		if !row.Builtin {
			continue
		}
		if h, on := builtins[row.Name](o); on {
			b[row.Name] = h
		}
	}
	return b
}

// Handler implements Source.
func (b Builtin) Handler(name string) (Handler, bool) {
	h, ok := b[name]
	return h, ok
}

// Sources looks a name up in each Source in order; the first that has it
// wins. The agent puts registered gRPC handlers before its built-ins, so a
// deployed Akri handler replaces the built-in of the same name.
type Sources []Source

// Handler implements Source.
func (s Sources) Handler(name string) (Handler, bool) {
	for _, src := range s {
		if h, ok := src.Handler(name); ok {
			return h, true
		}
	}
	return nil, false
}

// requestKey identifies a Request for Retainers: a changed discoveryDetails
// is a new discovery.
// requestKey identifies what a handler is asked: a Configuration's details and properties, so a
// change to either opens a new stream (and the old one is closed by Retain).
func requestKey(req Request) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(req.Properties)) {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(req.Properties[k]))
		h.Write(req.Properties[k])
	}
	return req.Configuration + "\x00" + req.Details + "\x00" + hex.EncodeToString(h.Sum(nil))
}

// Retain implements Retainer for every Source that holds state.
func (s Sources) Retain(keys map[string]bool) {
	for _, src := range s {
		if r, ok := src.(Retainer); ok {
			r.Retain(keys)
		}
	}
}
