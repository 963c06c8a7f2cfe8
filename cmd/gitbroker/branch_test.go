package main

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
)

// A typo in --branch is an error for every writer, and none of them creates the branch.
func TestMissingBranchIsAnError(t *testing.T) {
	srv := demoServer(t)
	head := srv.Head()
	code, _, stderr := gitbroker(t, "agent", "--allow-debug-echo", "--git", srv.URL(), "--branch", "mian", "--node", "edge-a", "--once",
		"--discovery-handlers-dir", "", "--debug-echo-availability-file", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitRefused, code, stderr)
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL(), "--branch", "mian")
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stderr, "branch does not exist: mian")
	// The branches that do exist are named, the writers' refs left out.
	require.Contains(t, stderr, "(the repository's branches outside gitbroker/: main)")
	code, _, stderr = gitbroker(t, "plan", "--git", srv.URL(), "--branch", "mian")
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stderr, "branch does not exist: mian (the repository's branches outside gitbroker/: main)")
	nodes := []string{"gitbroker/inventory/edge-a", "gitbroker/inventory/edge-b"}
	require.ElementsMatch(t, append([]string{"main"}, nodes...), srv.Branches(), "no branch was created")
	require.Equal(t, head, srv.Head())

	// The renderer's own rendered branch is made by its first render, with the shards of the
	// tips it accepted.
	code, _, stderr = gitbroker(t, "render", "--git", srv.URL())
	require.Equal(t, exitOK, code, stderr)
	require.ElementsMatch(t, append([]string{"main", "gitbroker/rendered", api.AcceptedBranch(nodes[0]), api.AcceptedBranch(nodes[1])}, nodes...), srv.Branches())
}

// A one-shot command on a remote that is not there fails at once, without retrying.
func TestUnreachableRemoteFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String() + "/repo.git"
	require.NoError(t, l.Close()) // nothing listens there now: connection refused
	code, _, stderr := gitbroker(t, "render", "--git", url)
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stderr, "connection refused")
	require.NotContains(t, stderr, "giving up after")
	code, _, stderr = gitbroker(t, "agent", "--allow-debug-echo", "--git", url, "--node", "edge-a", "--once", "--discovery-handlers-dir", "")
	require.Equal(t, exitRefused, code, stderr)
}
