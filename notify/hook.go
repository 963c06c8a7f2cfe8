package notify

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // GitHub's legacy signature header, verified beside the SHA-256 one
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// MaxBody bounds a notification's body: a push webhook of GitHub, GitLab or Gitea is a few
// kilobytes to a few hundred (they cap the commits they list); a larger one is refused unread
// and the interval picks the push up.
const MaxBody = 1 << 20

// Rate limits of Hook by default: DefaultRate notifications a second, DefaultBurst at once.
// Each accepted one costs at most a fetch, and a burst coalesces into one render, so these
// bound the work a flood (forged or not) can cause rather than shape the renders.
const (
	DefaultRate  = 20
	DefaultBurst = 200
)

// Headers of the notification forms Hook accepts.
const (
	// HeaderSignature is the generic form's HMAC (Flux's generic-hmac Receiver form):
	// "sha256=<hex>" of the body, keyed by the shared secret; sha1= and sha512= are accepted.
	HeaderSignature = "X-Signature"
	// GitHub's, keyed by the webhook's secret.
	HeaderGitHubEvent        = "X-GitHub-Event"
	HeaderGitHubSignature256 = "X-Hub-Signature-256"
	HeaderGitHubSignature    = "X-Hub-Signature"
	// Gitea's and Forgejo's: the body's HMAC-SHA256 in hex, without prefix.
	HeaderGiteaEvent       = "X-Gitea-Event"
	HeaderGiteaSignature   = "X-Gitea-Signature"
	HeaderForgejoEvent     = "X-Forgejo-Event"
	HeaderForgejoSignature = "X-Forgejo-Signature"
	// GitLab's: the webhook's secret token itself.
	HeaderGitLabEvent = "X-Gitlab-Event"
	HeaderGitLabToken = "X-Gitlab-Token"
)

// Results of a notification, the label of gitbroker_renderer_notifications_total.
const (
	ResultAccepted     = "accepted"     // authenticated; the renderer was woken
	ResultIgnored      = "ignored"      // authenticated, but not a push the renderer needs (a ping, its own branches)
	ResultUnauthorized = "unauthorized" // no valid signature or token
	ResultLimited      = "limited"      // over the rate limit, refused unread
	ResultMalformed    = "malformed"    // not a POST, or a body over MaxBody
)

// Metrics are Hook's Prometheus metrics.
type Metrics struct {
	notifications *prometheus.CounterVec
}

func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gitbroker_renderer_notifications_total",
		Help: "Push notifications received, by result: accepted (the renderer was woken), ignored, unauthorized, limited (over the rate limit) or malformed.",
	}, []string{"result"})}
	for _, r := range []string{ResultAccepted, ResultIgnored, ResultUnauthorized, ResultLimited, ResultMalformed} {
		m.notifications.WithLabelValues(r)
	}
	reg.MustRegister(m.notifications)
	return m
}

// Counter is the count of notifications with result.
func (m *Metrics) Counter(result string) prometheus.Counter {
	return m.notifications.WithLabelValues(result)
}

// Hook is the render daemon's endpoint for push notifications. It authenticates a
// notification by any one of its forms, with HostSecret (the git host's webhook secret: GitHub,
// Gitea/Forgejo, GitLab, generic) or NudgeSecret (the agents' and hooks' generic form), then
// calls Wake. The body is read only to check its signature and, when it names the pushed ref,
// to skip a push of the renderer's own branches (Own); it is never trusted for more: a
// notification forged with a stolen secret, or replayed, costs one fetch at most, and a flood
// is refused over the rate limit, unread.
type Hook struct {
	// HostSecret and NudgeSecret authenticate notifications; an empty one accepts nothing.
	HostSecret, NudgeSecret []byte
	// Wake wakes the renderer; it must not block (a channel of one, sent to with select).
	Wake func(form string)
	// Own reports whether a ref (refs/heads/...) is one the renderer writes itself; a push of
	// those alone wakes nothing. Nil wakes for every push.
	Own func(ref string) bool
	// Limiter bounds notifications; nil means DefaultRate and DefaultBurst.
	Limiter *rate.Limiter
	Log     logr.Logger
	Metrics *Metrics

	once sync.Once
	// refused counts the notifications refused since the last log line about them, which is
	// written at most every logEvery: a flood is logged, not echoed.
	mu         sync.Mutex
	refused    map[string]int
	lastLogged time.Time
}

// logEvery is how often refused notifications are summed up in the log.
const logEvery = 10 * time.Second

func (h *Hook) init() {
	h.once.Do(func() {
		if h.Limiter == nil {
			h.Limiter = rate.NewLimiter(DefaultRate, DefaultBurst)
		}
		h.refused = map[string]int{}
	})
}

// ServeHTTP implements http.Handler.
func (h *Hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.init()
	if r.Method != http.MethodPost {
		h.refuse(w, ResultMalformed, http.StatusMethodNotAllowed, "a notification is a POST", r)
		return
	}
	// The limit comes before anything is read, so a flood costs no more than its headers.
	if !h.Limiter.Allow() {
		w.Header().Set("Retry-After", "1")
		h.refuse(w, ResultLimited, http.StatusTooManyRequests, "too many notifications; the renderer's interval picks up the push", r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, ResultMalformed, http.StatusRequestEntityTooLarge, "the body is over 1 MiB; the renderer's interval picks up the push", r)
			return
		}
		h.refuse(w, ResultMalformed, http.StatusBadRequest, "reading the body failed", r)
		return
	}
	form, ok := h.authenticate(r.Header, body)
	if !ok {
		h.refuse(w, ResultUnauthorized, http.StatusUnauthorized, "no valid signature or token", r)
		return
	}
	if reason := h.ignore(r.Header, body); reason != "" {
		h.count(ResultIgnored)
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ignored: "+reason+"\n")
		return
	}
	h.count(ResultAccepted)
	h.Wake(form)
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, "accepted: the renderer fetches\n")
}

// authenticate returns the form that authenticated the notification.
func (h *Hook) authenticate(hd http.Header, body []byte) (string, bool) {
	host, nudge := h.HostSecret, h.NudgeSecret
	if v := hd.Get(HeaderSignature); v != "" {
		if validPrefixed(v, body, host) || validPrefixed(v, body, nudge) {
			return "generic", true
		}
		return "", false
	}
	if len(host) == 0 {
		return "", false
	}
	if v := hd.Get(HeaderGiteaSignature); v != "" && hd.Get(HeaderGiteaEvent) != "" {
		return "gitea", validHex(v, body, host, sha256.New)
	}
	if v := hd.Get(HeaderForgejoSignature); v != "" && hd.Get(HeaderForgejoEvent) != "" {
		return "forgejo", validHex(v, body, host, sha256.New)
	}
	if hd.Get(HeaderGitHubEvent) != "" {
		if v := hd.Get(HeaderGitHubSignature256); v != "" {
			return "github", validPrefixed(v, body, host)
		}
		if v := hd.Get(HeaderGitHubSignature); v != "" {
			return "github", validPrefixed(v, body, host)
		}
		return "", false
	}
	if v := hd.Get(HeaderGitLabToken); v != "" && hd.Get(HeaderGitLabEvent) != "" {
		return "gitlab", subtle.ConstantTimeCompare([]byte(v), host) == 1
	}
	return "", false
}

// ignore says why an authenticated notification wakes nothing: an event that is not a push,
// or a push of the renderer's own branches only.
func (h *Hook) ignore(hd http.Header, body []byte) string {
	for _, k := range []string{HeaderGitHubEvent, HeaderGiteaEvent, HeaderForgejoEvent} {
		if e := hd.Get(k); e != "" && e != "push" {
			return "a " + e + " event, not a push"
		}
	}
	if e := hd.Get(HeaderGitLabEvent); e != "" && e != "Push Hook" {
		return "a " + e + ", not a Push Hook"
	}
	if h.Own == nil {
		return ""
	}
	// Every form names the pushed ref in "ref" (a generic notification may name several in
	// "refs"); an unreadable body simply wakes the renderer.
	var p struct {
		Ref  string   `json:"ref"`
		Refs []string `json:"refs"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	refs := p.Refs
	if p.Ref != "" {
		refs = append(refs, p.Ref)
	}
	if len(refs) == 0 {
		return ""
	}
	for _, ref := range refs {
		if !h.Own(ref) {
			return ""
		}
	}
	return "a push of the renderer's own branches"
}

func (h *Hook) count(result string) {
	if h.Metrics != nil {
		h.Metrics.notifications.WithLabelValues(result).Inc()
	}
}

// refuse answers a refused notification and logs the refusals at most every logEvery, with
// how many of each kind there were.
func (h *Hook) refuse(w http.ResponseWriter, result string, code int, msg string, r *http.Request) {
	h.count(result)
	http.Error(w, msg, code)
	h.mu.Lock()
	h.refused[result]++
	if time.Since(h.lastLogged) < logEvery {
		h.mu.Unlock()
		return
	}
	counts := h.refused
	h.refused, h.lastLogged = map[string]int{}, time.Now()
	h.mu.Unlock()
	kv := []any{"last", msg, "remote", r.RemoteAddr}
	for _, k := range []string{ResultUnauthorized, ResultLimited, ResultMalformed} {
		if counts[k] > 0 {
			kv = append(kv, k, counts[k])
		}
	}
	h.Log.Info("push notifications refused (counted since the last such line)", kv...)
}

// validPrefixed checks a "<algorithm>=<hex>" HMAC of body (GitHub's and Flux's form).
func validPrefixed(v string, body, secret []byte) bool {
	algo, sum, ok := strings.Cut(v, "=")
	if !ok {
		return false
	}
	var h func() hash.Hash
	switch algo {
	case "sha256":
		h = sha256.New
	case "sha512":
		h = sha512.New
	case "sha1":
		h = sha1.New
	default:
		return false
	}
	return validHex(sum, body, secret, h)
}

// validHex checks a hex HMAC of body, in constant time.
func validHex(sum string, body, secret []byte, h func() hash.Hash) bool {
	if len(secret) == 0 {
		return false
	}
	got, err := hex.DecodeString(sum)
	if err != nil {
		return false
	}
	return hmac.Equal(got, Sign(h, secret, body))
}

// Sign is the HMAC of body keyed by secret.
func Sign(h func() hash.Hash, secret, body []byte) []byte {
	m := hmac.New(h, secret)
	m.Write(body)
	return m.Sum(nil)
}
