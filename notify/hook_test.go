package notify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

var (
	hostSecret  = []byte("host-secret")
	nudgeSecret = []byte("nudge-secret")
)

type hookFixture struct {
	srv   *httptest.Server
	wakes atomic.Int64
	forms []string
	m     *Metrics
}

func newHook(t *testing.T, limiter *rate.Limiter, log logr.Logger) *hookFixture {
	t.Helper()
	f := &hookFixture{m: NewMetrics(prometheus.NewRegistry())}
	h := &Hook{HostSecret: hostSecret, NudgeSecret: nudgeSecret, Limiter: limiter, Log: log, Metrics: f.m,
		Own: func(ref string) bool { return strings.HasPrefix(ref, "refs/heads/gitbroker/rendered") },
		Wake: func(form string) {
			f.wakes.Add(1)
			f.forms = append(f.forms, form)
		}}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *hookFixture) post(t *testing.T, body string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func (f *hookFixture) count(result string) float64 {
	return testutil.ToFloat64(f.m.notifications.WithLabelValues(result))
}

func hexMAC(secret []byte, body string) string {
	return hex.EncodeToString(Sign(sha256.New, secret, []byte(body)))
}

const push = `{"ref":"refs/heads/gitbroker/inventory/edge-a","after":"abc"}`

// Each git host's form, signed as that host signs, wakes the renderer once.
func TestHookAcceptsEachHostsForm(t *testing.T) {
	f := newHook(t, nil, logr.Discard())
	for name, headers := range map[string]map[string]string{
		"github":  {HeaderGitHubEvent: "push", HeaderGitHubSignature256: "sha256=" + hexMAC(hostSecret, push)},
		"gitea":   {HeaderGiteaEvent: "push", HeaderGiteaSignature: hexMAC(hostSecret, push), HeaderGitHubEvent: "push"},
		"forgejo": {HeaderForgejoEvent: "push", HeaderForgejoSignature: hexMAC(hostSecret, push)},
		"gitlab":  {HeaderGitLabEvent: "Push Hook", HeaderGitLabToken: string(hostSecret)},
		"generic": {HeaderSignature: "sha256=" + hexMAC(hostSecret, push)},
		"nudge":   {HeaderSignature: "sha256=" + hexMAC(nudgeSecret, push)},
	} {
		before := f.wakes.Load()
		require.Equal(t, http.StatusAccepted, f.post(t, push, headers), name)
		require.Equal(t, before+1, f.wakes.Load(), name)
	}
	require.Equal(t, []string{"github", "gitea", "forgejo", "gitlab", "generic", "generic"}, sortedLike(f.forms))
	require.Equal(t, 6.0, f.count(ResultAccepted))
}

// sortedLike puts forms in the order the test lists them (map iteration is random).
func sortedLike(forms []string) []string {
	order := []string{"github", "gitea", "forgejo", "gitlab", "generic"}
	var out []string
	for _, o := range order {
		for _, f := range forms {
			if f == o {
				out = append(out, f)
			}
		}
	}
	return out
}

// A forged notification (no signature, a wrong one, the nudge secret in a host's form, a body
// changed after signing) wakes nothing.
func TestHookRefusesForgedNotifications(t *testing.T) {
	f := newHook(t, nil, logr.Discard())
	for name, c := range map[string]struct {
		body    string
		headers map[string]string
	}{
		"unsigned":               {push, nil},
		"wrong secret":           {push, map[string]string{HeaderSignature: "sha256=" + hexMAC([]byte("guess"), push)}},
		"body changed":           {push + " ", map[string]string{HeaderSignature: "sha256=" + hexMAC(hostSecret, push)}},
		"unknown algorithm":      {push, map[string]string{HeaderSignature: "md5=" + hexMAC(hostSecret, push)}},
		"not hex":                {push, map[string]string{HeaderSignature: "sha256=zz"}},
		"github without sig":     {push, map[string]string{HeaderGitHubEvent: "push"}},
		"github, nudge secret":   {push, map[string]string{HeaderGitHubEvent: "push", HeaderGitHubSignature256: "sha256=" + hexMAC(nudgeSecret, push)}},
		"gitlab, nudge secret":   {push, map[string]string{HeaderGitLabEvent: "Push Hook", HeaderGitLabToken: string(nudgeSecret)}},
		"gitlab, wrong token":    {push, map[string]string{HeaderGitLabEvent: "Push Hook", HeaderGitLabToken: "host-secreT"}},
		"gitea, wrong signature": {push, map[string]string{HeaderGiteaEvent: "push", HeaderGiteaSignature: hexMAC(nudgeSecret, push)}},
	} {
		require.Equal(t, http.StatusUnauthorized, f.post(t, c.body, c.headers), name)
	}
	require.Zero(t, f.wakes.Load())
	require.Equal(t, 10.0, f.count(ResultUnauthorized))
}

// A secret that is not configured authenticates nothing, not even an empty signature of it.
func TestHookWithoutASecretAcceptsNothing(t *testing.T) {
	var woken atomic.Bool
	srv := httptest.NewServer(&Hook{NudgeSecret: nudgeSecret, Wake: func(string) { woken.Store(true) }, Log: logr.Discard()})
	defer srv.Close()
	for _, h := range []map[string]string{
		{HeaderGitHubEvent: "push", HeaderGitHubSignature256: "sha256=" + hexMAC(nil, push)},
		{HeaderGitLabEvent: "Push Hook", HeaderGitLabToken: ""},
		{HeaderSignature: "sha256=" + hexMAC(nil, push)},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(push))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	require.False(t, woken.Load())
}

// A replayed notification is authentic: it costs one wake, which the daemon coalesces with any
// other into one fetch (TestDaemonCoalescesNotifications in package renderer).
func TestHookReplayCostsOneWake(t *testing.T) {
	f := newHook(t, nil, logr.Discard())
	h := map[string]string{HeaderGitHubEvent: "push", HeaderGitHubSignature256: "sha256=" + hexMAC(hostSecret, push)}
	require.Equal(t, http.StatusAccepted, f.post(t, push, h))
	require.Equal(t, http.StatusAccepted, f.post(t, push, h))
	require.EqualValues(t, 2, f.wakes.Load())
}

// Pings, other events and pushes of the renderer's own branch are authenticated but wake
// nothing: the renderer's own push would otherwise wake it again.
func TestHookIgnoresWhatIsNotAPushToRender(t *testing.T) {
	f := newHook(t, nil, logr.Discard())
	own := `{"ref":"refs/heads/gitbroker/rendered"}`
	require.Equal(t, http.StatusOK, f.post(t, own, map[string]string{HeaderSignature: "sha256=" + hexMAC(hostSecret, own)}))
	ping := `{"zen":"hi"}`
	require.Equal(t, http.StatusOK, f.post(t, ping, map[string]string{HeaderGitHubEvent: "ping", HeaderGitHubSignature256: "sha256=" + hexMAC(hostSecret, ping)}))
	require.Equal(t, http.StatusOK, f.post(t, ping, map[string]string{HeaderGitLabEvent: "Tag Push Hook", HeaderGitLabToken: string(hostSecret)}))
	require.Zero(t, f.wakes.Load())
	// A push naming the renderer's branch and another wakes it.
	mixed := `{"refs":["refs/heads/gitbroker/rendered","refs/heads/main"]}`
	require.Equal(t, http.StatusAccepted, f.post(t, mixed, map[string]string{HeaderSignature: "sha256=" + hexMAC(hostSecret, mixed)}))
	require.EqualValues(t, 1, f.wakes.Load())
	require.Equal(t, 3.0, f.count(ResultIgnored))
}

// A flood is refused over the rate limit before its body is read, counted, and logged in one
// line per period with how many were refused, not one line each.
func TestHookFloodIsLimitedAndLogged(t *testing.T) {
	var lines atomic.Int64
	var last atomic.Value
	log := funcr.New(func(prefix, args string) { lines.Add(1); last.Store(args) }, funcr.Options{})
	f := newHook(t, rate.NewLimiter(rate.Limit(1), 5), log)
	h := map[string]string{HeaderSignature: "sha256=" + hexMAC(nudgeSecret, push)}
	codes := map[int]int{}
	for range 200 {
		codes[f.post(t, push, h)]++
	}
	require.LessOrEqual(t, codes[http.StatusAccepted], 6, "the burst, and one more if a second passed")
	require.GreaterOrEqual(t, codes[http.StatusTooManyRequests], 194)
	require.Equal(t, float64(codes[http.StatusTooManyRequests]), f.count(ResultLimited))
	require.EqualValues(t, codes[http.StatusAccepted], f.wakes.Load())
	require.EqualValues(t, 1, lines.Load(), "one log line for the flood within the period")
	require.Contains(t, last.Load(), `"limited"=1`)
}

// A body over MaxBody is refused, and a GET is not a notification.
func TestHookBoundsTheBody(t *testing.T) {
	f := newHook(t, nil, logr.Discard())
	big := `{"ref":"` + strings.Repeat("x", MaxBody) + `"}`
	require.Equal(t, http.StatusRequestEntityTooLarge, f.post(t, big, map[string]string{HeaderSignature: "sha256=" + hexMAC(hostSecret, big)}))
	resp, err := http.Get(f.srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Zero(t, f.wakes.Load())
	require.Equal(t, 2.0, f.count(ResultMalformed))
}

// What the senders send is what Hook accepts: an agent's nudge.
func TestNudgeIsAcceptedByTheHook(t *testing.T) {
	f := newHook(t, nil, logr.Discard())
	n := &Nudge{URL: f.srv.URL, Secret: nudgeSecret}
	require.NoError(t, n.Send(context.Background(), "refs/heads/gitbroker/inventory/edge-a", "abc"))
	require.EqualValues(t, 1, f.wakes.Load())
	bad := &Nudge{URL: f.srv.URL, Secret: []byte("stolen-but-wrong")}
	err := bad.Send(context.Background(), "refs/heads/gitbroker/inventory/edge-a", "abc")
	require.ErrorContains(t, err, "401")
	require.EqualValues(t, 1, f.wakes.Load())
}

// The Flux Receiver's path is notification-controller's: /hook/ and sha256(token+name+namespace),
// and its body is signed in the generic-hmac form.
func TestFluxReceiverPathAndSignature(t *testing.T) {
	var got *http.Request
	var body bytes.Buffer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		_, _ = body.ReadFrom(r.Body)
	}))
	defer srv.Close()
	f := &FluxReceiver{URL: srv.URL, Name: "gitbroker", Namespace: "flux-system", Token: []byte("token")}
	sum := sha256.Sum256([]byte("tokengitbrokerflux-system"))
	require.Equal(t, "/hook/"+hex.EncodeToString(sum[:]), f.Path())
	require.NoError(t, f.Notify(context.Background(), Moved{After: "c1", Branches: []string{"gitbroker/rendered", "gitbroker/folders/cam"}}))
	require.Equal(t, f.Path(), got.URL.Path)
	require.Equal(t, "sha256="+hexMAC([]byte("token"), body.String()), got.Header.Get(HeaderSignature))
	require.JSONEq(t, `{"refs":["refs/heads/gitbroker/rendered","refs/heads/gitbroker/folders/cam"],"commit":"c1","branches":["gitbroker/rendered","gitbroker/folders/cam"]}`, body.String())
}

// Argo CD is told in GitHub's push form, only when its branch moved.
func TestArgoCDNotificationIsGitHubsPushForm(t *testing.T) {
	var calls atomic.Int64
	var body bytes.Buffer
	var sig string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		require.Equal(t, "push", r.Header.Get(HeaderGitHubEvent))
		sig = r.Header.Get(HeaderGitHubSignature256)
		_, _ = body.ReadFrom(r.Body)
	}))
	defer srv.Close()
	a := &ArgoCD{URL: srv.URL + "/api/webhook", Branch: "gitbroker/rendered", Secret: []byte("s")}
	require.NoError(t, a.Notify(context.Background(), Moved{After: "c2", Branches: []string{"gitbroker/folders/cam"}}))
	require.Zero(t, calls.Load())
	require.NoError(t, a.Notify(context.Background(), Moved{RepoURL: "http://git.example/fleet.git", After: "c2", Branches: []string{"gitbroker/rendered"}, Paths: []string{"rendered/cam/a.yaml"}}))
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, "sha256="+hexMAC([]byte("s"), body.String()), sig)
	require.Contains(t, body.String(), `"html_url":"http://git.example/fleet"`)
	require.Contains(t, body.String(), `"ref":"refs/heads/gitbroker/rendered"`)
	require.Contains(t, body.String(), `"modified":["rendered/cam/a.yaml"]`)
}

// A target that fails is an error naming it, with the token-derived path left out.
func TestSendFailureRedactsTheReceiverPath(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusNotFound)
	}))
	defer srv.Close()
	f := &FluxReceiver{URL: srv.URL, Name: "gitbroker", Namespace: "flux-system", Token: []byte("token")}
	err := f.Notify(context.Background(), Moved{Branches: []string{"gitbroker/rendered"}})
	require.ErrorContains(t, err, "404")
	require.NotContains(t, err.Error(), f.Path()[len("/hook/"):])
}

// countingReader counts the bytes read from a body and blocks on unblock when set.
type countingReader struct {
	r       io.Reader
	n       atomic.Int64
	unblock chan struct{}
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.unblock != nil {
		<-c.unblock
	}
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Forged notifications never spend the genuine ones' rate limit: it is checked after
// authentication.
func TestHookForgedNotificationsSpendNoRateLimit(t *testing.T) {
	f := newHook(t, rate.NewLimiter(rate.Limit(0.001), 1), logr.Discard())
	for range 20 {
		require.Equal(t, http.StatusUnauthorized, f.post(t, push, map[string]string{HeaderSignature: "sha256=" + hexMAC([]byte("guess"), push)}))
	}
	signed := map[string]string{HeaderSignature: "sha256=" + hexMAC(nudgeSecret, push)}
	require.Equal(t, http.StatusAccepted, f.post(t, push, signed), "the burst is the genuine one's")
	require.Equal(t, http.StatusTooManyRequests, f.post(t, push, signed))
}

// A request with no header that could authenticate it, or a malformed signature, is refused
// before a byte of its body is read; so is one that declares a body over MaxBody.
func TestHookReadsNoBodyItCannotAuthenticate(t *testing.T) {
	h := &Hook{HostSecret: hostSecret, NudgeSecret: nudgeSecret, Wake: func(string) {}, Log: logr.Discard()}
	for name, tc := range map[string]struct {
		headers map[string]string
		length  int64
		code    int
	}{
		"no header":           {nil, int64(len(push)), http.StatusUnauthorized},
		"an event, no secret": {map[string]string{HeaderGitHubEvent: "push"}, int64(len(push)), http.StatusUnauthorized},
		"malformed signature": {map[string]string{HeaderSignature: "sha256=zz"}, int64(len(push)), http.StatusUnauthorized},
		"short signature":     {map[string]string{HeaderSignature: "sha256=00"}, int64(len(push)), http.StatusUnauthorized},
		"wrong token":         {map[string]string{HeaderGitLabEvent: "Push Hook", HeaderGitLabToken: "guess"}, int64(len(push)), http.StatusUnauthorized},
		"declared too large":  {map[string]string{HeaderSignature: "sha256=" + hexMAC(nudgeSecret, push)}, MaxBody + 1, http.StatusRequestEntityTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			body := &countingReader{r: strings.NewReader(push)}
			req := httptest.NewRequest(http.MethodPost, "/hook", body)
			req.ContentLength = tc.length
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, tc.code, rec.Code)
			require.Zero(t, body.n.Load(), "nothing of the body is read")
		})
	}
}

// With every slot for large bodies taken, another large one is refused unread; a small one
// (an agent's nudge) has slots of its own and is accepted.
func TestHookLargeBodiesNeverHoldUpANudge(t *testing.T) {
	var wakes atomic.Int64
	h := &Hook{NudgeSecret: nudgeSecret, InFlight: 1, Wake: func(string) { wakes.Add(1) }, Log: logr.Discard()}
	big := `{"ref":"refs/heads/main","pad":"` + strings.Repeat("x", 2*SmallBody) + `"}`
	sig := map[string]string{HeaderSignature: "sha256=" + hexMAC(nudgeSecret, big)}
	serve := func(body io.Reader, length int64, headers map[string]string) int {
		req := httptest.NewRequest(http.MethodPost, "/hook", body)
		req.ContentLength = length
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	h.init()
	held := &countingReader{r: strings.NewReader(big), unblock: make(chan struct{})}
	done := make(chan int)
	go func() { done <- serve(held, int64(len(big)), sig) }()
	require.Eventually(t, func() bool { return len(h.slots) == 1 }, 5*time.Second, time.Millisecond)

	other := &countingReader{r: strings.NewReader(big)}
	require.Equal(t, http.StatusServiceUnavailable, serve(other, int64(len(big)), sig))
	require.Zero(t, other.n.Load(), "refused unread")
	require.Equal(t, http.StatusAccepted, serve(strings.NewReader(push), int64(len(push)), map[string]string{HeaderSignature: "sha256=" + hexMAC(nudgeSecret, push)}))

	close(held.unblock)
	require.Equal(t, http.StatusAccepted, <-done, "the large body, signed, is authenticated streaming")
	require.EqualValues(t, 2, wakes.Load())
}
