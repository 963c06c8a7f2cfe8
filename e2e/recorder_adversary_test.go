//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// The adversary of docs/TRUST.md against the recorder's real binary, which make test's adversary
// (cmd/gitbroker) plays only in process because it needs an API server. With one node's key and
// the git credential, each step attacks gitbroker/status (a commit planted on top of the
// recorder's, one that deletes a record, the ref deleted, moved back to an older commit of the
// recorder's, or deleted and blocked by a ref named as its folder, which the recorder deletes),
// and then something makes the recorder
// write (a node lost), or it is restarted (SIGTERM, or SIGKILL), or left to its repair tick.
// After each step the ref's head is the recorder's, verified by git verify-commit, holds every
// node loss recorded so far and nothing the attacker wrote, and a one-shot render accepts it.
// Each round of five steps plays every attack once, in the seed's order;
// GITBROKER_ADVERSARY_SEED and _STEPS replay or lengthen the sequence.
func TestAdversaryPlaysTheRecordersBinary(t *testing.T) {
	seed, steps := uint64(1), 8
	if s := os.Getenv("GITBROKER_ADVERSARY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seed = n
	}
	if s := os.Getenv("GITBROKER_ADVERSARY_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		steps = n
	}
	a := newRecorderAdversary(t, seed)
	defer func() {
		if t.Failed() {
			t.Logf("replay with GITBROKER_ADVERSARY_SEED=%d GITBROKER_ADVERSARY_STEPS=%d; the steps played:\n  %s", seed, steps, strings.Join(a.played, "\n  "))
		}
	}()
	attacks := []struct {
		name string
		play func()
	}{
		{"plant a node-signed commit with a forged node loss and a forged failed JobRecord", a.plant},
		{"plant a node-signed commit deleting a node loss the recorder wrote", a.unrecord},
		{"delete gitbroker/status", a.deleteRef},
		{"move gitbroker/status back to an older commit of the recorder's", a.replay},
		{"delete gitbroker/status and block it with gitbroker/status/x", a.block},
	}
	triggers := []struct {
		name string
		play func()
	}{
		{"a node is lost", a.loseNode},
		{"the recorder restarts (SIGTERM)", func() { a.restart(false) }},
		{"the recorder is killed (SIGKILL) and started again", func() { a.restart(true) }},
		{"the recorder's repair tick", func() {}},
	}
	var order []int
	for i := range steps {
		if len(order) == 0 { // every attack once in each round, in the seed's order
			order = a.rng.Perm(len(attacks))
		}
		at := attacks[order[0]]
		order = order[1:]
		tr := triggers[a.rng.IntN(len(triggers))]
		a.played = append(a.played, fmt.Sprintf("%d: %s; then %s", i, at.name, tr.name))
		at.play()
		tr.play()
		a.check(tr.name == "the recorder's repair tick")
	}
	t.Logf("%d steps: %s", steps, strings.Join(a.played, "; "))
}

// recorderAdversary is one sequence: a git server with everyone enrolled, the recorder's binary,
// and what it recorded.
type recorderAdversary struct {
	t        *testing.T
	rng      *rand.Rand
	srv      *gitsynctest.Server
	keys     map[string]string // key file by principal
	allowed  string
	pinned   string // the renderer's allowed_signers line, as --renderer-key takes it
	recorder *gbProcess
	lost     []string // the nodes whose loss the recorder recorded
	heads    []string // the recorder's heads seen, oldest first
	forged   []string // paths the attacker wrote
	played   []string
	starts   int
}

func newRecorderAdversary(t *testing.T, seed uint64) *recorderAdversary {
	a := &recorderAdversary{t: t, rng: rand.New(rand.NewPCG(seed, 0)), keys: map[string]string{}}
	dir := t.TempDir()
	for _, p := range []string{trust.PrincipalRecorder, trust.PrincipalRenderer, trust.NodePrincipal("rec-adv-edge"), "alice@example.com"} {
		f := filepath.Join(dir, strings.ReplaceAll(p, ":", "-"))
		k, _, err := trust.LoadOrCreateSigner(f, p)
		require.NoError(t, err)
		a.keys[p] = f
		a.allowed += k.AllowedSignersLine(p) + "\n"
		if p == trust.PrincipalRenderer {
			a.pinned = filepath.Join(dir, "renderer.allowed_signers")
			require.NoError(t, os.WriteFile(a.pinned, []byte(k.AllowedSignersLine(p)+"\n"), 0o644))
		}
	}
	a.srv = gitsynctest.NewServer(t, "main", map[string]string{
		"gitbroker.yaml":            "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec: {}\n",
		"configurations/cam-a.yaml": trustConfiguration("cam-a", "dev-a"),
	})
	// As DEPLOYING asks of a git server of one's own: a restarted writer fetches the commit the
	// renderer accepted last by its hash when its ref is gone or moved back.
	gitsynctest.Git(t, a.srv.Bare(), "config", "uploadpack.allowAnySHA1InWant", "true")
	a.srv.CommitSigned(a.keys["alice@example.com"], map[string]string{verify.AllowedSignersPath: a.allowed}, nil, "enroll the writers")
	a.render("--first-render")
	a.start()
	a.loseNode()
	a.check(false)
	return a
}

// start runs the recorder as deploy/ does, with short waits.
func (a *recorderAdversary) start() {
	a.starts++
	a.recorder = startGitbroker(a.t, fmt.Sprintf("recorder-adversary-%d", a.starts), "recorder started", "record",
		"--git", a.srv.URL(), "--kubeconfig", cluster.Kubeconfig, "--namespace", "recorder-adversary",
		"--signing-key", a.keys[trust.PrincipalRecorder], "--renderer-key", a.pinned,
		"--batch", "200ms", "--node-loss-grace", "1s", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
}

func (a *recorderAdversary) restart(kill bool) {
	if kill {
		_ = a.recorder.cmd.Process.Kill()
	}
	a.recorder.Stop(30 * time.Second)
	a.start()
}

func (a *recorderAdversary) alive() {
	if done, err := a.recorder.Exited(); done {
		a.t.Fatalf("the recorder exited: %v; see %s", err, a.recorder.Log)
	}
}

// render runs the one-shot renderer, which must accept the recorder's ref.
func (a *recorderAdversary) render(args ...string) {
	a.t.Helper()
	out, err := exec.Command(gitbroker, append([]string{"render", "--git", a.srv.URL(), "--signing-key", a.keys[trust.PrincipalRenderer]}, args...)...).CombinedOutput()
	require.NoError(a.t, err, "the one-shot render: %s", out)
	require.NotContains(a.t, string(out), "untrusted", "the one-shot render")
}

// loseNode registers a node, lets the recorder see it, deletes it, and waits for its NodeLoss.
func (a *recorderAdversary) loseNode() {
	ctx := context.Background()
	name := fmt.Sprintf("rec-adv-%d", len(a.lost))
	require.NoError(a.t, cluster.AddNode(ctx, name))
	time.Sleep(2 * time.Second)
	require.NoError(a.t, cluster.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	a.lost = append(a.lost, name)
}

// check waits until the ref's head is the recorder's and says what it recorded, and nothing
// the attacker wrote; then the one-shot render accepts it.
func (a *recorderAdversary) check(repair bool) {
	a.t.Helper()
	status := a.srv.On(verify.StatusBranch)
	timeout := 30 * time.Second
	if repair {
		timeout = 90 * time.Second // the recorder's repair tick is a minute
	}
	eventually(a.t, timeout, "the recorder's ref to be its own again", func() (bool, string) {
		a.alive()
		head := status.Head()
		if head == "" {
			return false, "no gitbroker/status"
		}
		out, err := a.srv.VerifyCommit(head, a.allowed)
		if err != nil || !strings.Contains(out, `for recorder with`) {
			return false, fmt.Sprintf("head %s not the recorder's: %v %s", head, err, out)
		}
		files := status.Files()
		for _, n := range a.lost {
			if !slices.Contains(files, api.NodeLossPath(n)) {
				return false, "no record of " + n + " lost at " + head
			}
		}
		for _, f := range a.forged {
			if slices.Contains(files, f) {
				return false, "the forged " + f + " at " + head
			}
		}
		return true, ""
	})
	if h := status.Head(); len(a.heads) == 0 || a.heads[len(a.heads)-1] != h {
		a.heads = append(a.heads, h)
	}
	a.render()
}

// nodeSigned commits on gitbroker/status as the attacker, signing with the node's key.
func (a *recorderAdversary) nodeSigned(files map[string]string, remove []string, message string) {
	a.srv.On(verify.StatusBranch).CommitSigned(a.keys[trust.NodePrincipal("rec-adv-edge")], files, remove, message)
}

func (a *recorderAdversary) plant() {
	n := len(a.forged)
	loss := api.NodeLossPath(fmt.Sprintf("forged-%d", n))
	record := fmt.Sprintf("status/jobs/recorder-adversary/forged-%d.yaml", n)
	a.forged = append(a.forged, loss, record)
	a.nodeSigned(map[string]string{
		loss:   "apiVersion: gitbroker.dev/v1alpha1\nkind: NodeLoss\nmetadata:\n  name: forged\nspec:\n  reason: Gone\n  since: \"2026-12-01T00:00:00Z\"\n",
		record: "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\nmetadata:\n  name: forged\n  namespace: recorder-adversary\nspec:\n  phase: Failed\n",
	}, nil, "forged by the node")
}

func (a *recorderAdversary) unrecord() {
	a.nodeSigned(nil, []string{api.NodeLossPath(a.lost[a.rng.IntN(len(a.lost))])}, "a record deleted by the node")
}

func (a *recorderAdversary) deleteRef() {
	a.srv.SetRef(verify.StatusBranch, "")
}

func (a *recorderAdversary) replay() {
	if len(a.heads) < 2 {
		a.deleteRef()
		return
	}
	a.srv.SetRef(verify.StatusBranch, a.heads[a.rng.IntN(len(a.heads)-1)])
}

func (a *recorderAdversary) block() {
	head := a.srv.On(verify.StatusBranch).Head()
	a.srv.SetRef(verify.StatusBranch, "")
	a.srv.SetRef(verify.StatusBranch+"/x", head)
}
