// Package cli holds what gitbroker's binaries share: exit codes, the daemons' endpoints and
// signing keys, the version, and the agent command, which the small gitbroker-agent binary
// builds without the renderer's and recorder's Kubernetes clients.
package cli

import "fmt"

// Exit codes, as docs/COMMANDS.md gives them.
const (
	ExitOK      = 0
	ExitRefused = 1 // check found rendered/ stale, or a safety rule refused the render
	ExitInvalid = 2 // invalid input or usage
)

// ExitError carries an exit code to main; its message has already been printed when Silent.
type ExitError struct {
	Code   int
	Err    error
	Silent bool
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Exitf is an ExitError with a formatted message.
func Exitf(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}
