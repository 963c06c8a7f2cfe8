package agent_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/agent"
	"github.com/gitbroker/gitbroker/trust"
)

// The agent checks each cycle whether the allowed_signers its Configurations came with enrolls
// its key: not enrolled, it is still ready, its metric is 0, it logs the line to add once (not
// every cycle), and the cycle's outcome says why; enrolled, all of that turns back. A
// certificate from the fleet's CA is enrolled by the CA's line.
func TestEnrolmentIsReported(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig, ".gitbroker/allowed_signers": ""})
	signer, _, err := trust.LoadOrCreateSigner(filepath.Join(t.TempDir(), "key"), "edge-a")
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	var logs strings.Builder
	a := f.agent(t, "edge-a", func(o *agent.Options) {
		o.Enrolment = &agent.Enrolment{Signer: signer}
		o.Metrics = agent.NewMetrics(reg)
		o.Log = funcr.New(func(_, args string) { logs.WriteString(args + "\n") }, funcr.Options{})
	})
	line := signer.AllowedSignersLine("node:edge-a")

	for range 2 {
		out, err := a.Sync(context.Background())
		require.NoError(t, err, "the inventory is written all the same")
		var ne *agent.NotEnrolledError
		require.True(t, errors.As(out.NotEnrolled, &ne), "%v", out.NotEnrolled)
		require.Equal(t, line, ne.Line)
		require.True(t, a.Ready(), "not enrolled is no reason to stop a DaemonSet's rollout at this node")
		require.False(t, a.Enrolled())
		require.Equal(t, 0.0, gauge(t, reg, "gitbroker_agent_enrolled"))
	}
	require.Equal(t, 1, strings.Count(logs.String(), "this node is not enrolled"), logs.String())
	require.Contains(t, logs.String(), line)

	// Another node's line enrolls nothing here.
	f.write(t, ".gitbroker/allowed_signers", signer.AllowedSignersLine("node:edge-b")+"\n")
	out, err := a.Sync(context.Background())
	require.NoError(t, err)
	require.Error(t, out.NotEnrolled)

	f.write(t, ".gitbroker/allowed_signers", line+"\n")
	out, err = a.Sync(context.Background())
	require.NoError(t, err)
	require.NoError(t, out.NotEnrolled)
	require.True(t, a.Ready())
	require.Equal(t, 1.0, gauge(t, reg, "gitbroker_agent_enrolled"))
	require.Contains(t, logs.String(), "this node's key is enrolled now")

	// No allowed_signers: the repository verifies nobody, and nothing is wrong.
	g := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	b := g.agent(t, "edge-a", func(o *agent.Options) { o.Enrolment = &agent.Enrolment{} })
	out, err = b.Sync(context.Background())
	require.NoError(t, err)
	require.NoError(t, out.NotEnrolled)
	require.True(t, b.Ready())
}

// A Configuration whose discovery finds nothing on this node (a udev rule that matches no device)
// is said in the log once when it starts, not every cycle, and again after devices came and went.
func TestNothingFoundIsLoggedOnce(t *testing.T) {
	f := newDirFixture(t, map[string]string{"configurations/echo.yaml": echoConfig})
	var logs strings.Builder
	a := f.agent(t, "edge-a", func(o *agent.Options) {
		o.Log = funcr.New(func(_, args string) { logs.WriteString(args + "\n") }, funcr.Options{})
	})
	sync := func() {
		_, err := a.Sync(context.Background())
		require.NoError(t, err)
	}
	const said = "discovery found no device for this Configuration on this node"
	sync()
	sync()
	require.Equal(t, 1, strings.Count(logs.String(), said), logs.String())
	f.echo.set(device("foo0", false))
	sync()
	f.echo.set()
	sync()
	sync()
	require.Equal(t, 2, strings.Count(logs.String(), said), logs.String())
}
