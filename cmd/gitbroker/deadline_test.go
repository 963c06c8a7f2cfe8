package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// Every command that talks to git fails against a server that accepts the connection and then
// says nothing: within --git-timeout, or within a write's --push-timeout, exit 1, naming the URL
// and what it was doing. They used to hang for minutes (agent --once for good).
func TestStalledServerFailsEveryCommand(t *testing.T) {
	url := gitsynctest.Silent(t)
	for _, args := range [][]string{
		{"plan", "--git", url, "--git-timeout", "500ms"},
		{"check", "--git", url, "--git-timeout", "500ms"},
		{"history", "--git", url, "--git-timeout", "500ms"},
		{"render", "--git", url, "--git-timeout", "500ms"},
		{"render", "--git", url, "--push-timeout", "1s"},
		{"agent", "--allow-debug-echo", "--once", "--git", url, "--node", "edge-a", "--git-timeout", "500ms", "--discovery-handlers-dir", ""},
	} {
		start := time.Now()
		code, _, stderr := gitbroker(t, args...)
		took := time.Since(start)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Less(t, took, 10*time.Second, args)
		if args[0] == "agent" {
			continue // its logger writes the error to the process's stderr, shown above
		}
		require.Contains(t, stderr, "from "+url, args)
		if args[len(args)-2] == "--push-timeout" {
			require.Contains(t, stderr, "the write did not land within 1s (--push-timeout)", args)
		} else {
			require.Contains(t, stderr, "sent nothing for 500ms", args)
		}
	}
}

// A negative timeout is refused before anything is fetched, not taken as the default.
func TestNegativeGitTimeoutIsRefused(t *testing.T) {
	code, _, stderr := gitbroker(t, "plan", "--git", gitsynctest.Silent(t), "--git-timeout", "-1s")
	require.Equal(t, 2, code, "invalid usage")
	require.Contains(t, stderr, "--git-timeout and --push-timeout must not be negative")
}
