package gitsync_test

import (
	"io"
	"log"
	"os"
	"testing"
)

// TestMain silences gitkit (behind the SSH test server), which logs every
// connection through the standard logger.
func TestMain(m *testing.M) {
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}
