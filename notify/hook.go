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

// MaxBody bounds a notification's body on the wire: a push webhook of GitHub, GitLab or Gitea
// is a few kilobytes to a few hundred (they cap the commits they list); a larger one is refused
// (unread when it declares its length) and the interval picks the push up.
const MaxBody = 1 << 20

// MaxPrefix is how much of a body Hook holds in memory: the rest only passes through the
// HMACs that authenticate it. The refs a push names come first in every form's body; a body
// longer than this simply wakes the renderer.
const MaxPrefix = 16 << 10

// DefaultInFlight bounds the notifications whose bodies are read at once; one more is refused
// unread (503, Retry-After). With MaxPrefix and a 4 KiB buffer each, they hold at most 2.5 MiB
// whoever sends them.
// Notifications that declare a body of at most SmallBody (an agent's nudge, a hook's ping)
// are read in slots of their own, as many again, so large bodies trickled to fill the slots
// never hold up a nudge.
const DefaultInFlight = 128

// SmallBody is the largest declared body read in the small notifications' slots.
const SmallBody = 8 << 10

// BodyTimeout bounds the time a notification's body takes to arrive: a host or an agent sends
// it at once, so a body trickled to hold a slot is cut off.
const BodyTimeout = 5 * time.Second

// Rate limits of Hook by default: DefaultRate authenticated notifications a second,
// DefaultBurst at once. Each accepted one costs at most a fetch, and a burst coalesces into
// one render, so these bound the work that notifications made with a secret can cause rather
// than shape the renders. Unauthenticated requests never spend them: they are bounded by
// DefaultInFlight, MaxPrefix and BodyTimeout instead.
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
	ResultLimited      = "limited"      // authenticated but over the rate limit, or no free slot to read it in (refused unread)
	ResultMalformed    = "malformed"    // not a POST, or a body over MaxBody
)

// Metrics are Hook's Prometheus metrics.
type Metrics struct {
	notifications *prometheus.CounterVec
}

func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gitbroker_renderer_notifications_total",
		Help: "Push notifications received, by result: accepted (the renderer was woken), ignored, unauthorized, limited (authenticated over the rate limit, or refused unread while too many were being read) or malformed.",
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
// notification forged with a stolen secret, or replayed, costs one fetch at most. A request
// without a secret costs what ServeHTTP bounds before it reads a byte of the body.
type Hook struct {
	// HostSecret and NudgeSecret authenticate notifications; an empty one accepts nothing.
	HostSecret, NudgeSecret []byte
	// Wake wakes the renderer; it must not block (a channel of one, sent to with select).
	Wake func(form string)
	// Own reports whether a ref (refs/heads/...) is one the renderer writes itself; a push of
	// those alone wakes nothing. Nil wakes for every push.
	Own func(ref string) bool
	// Limiter bounds authenticated notifications; nil means DefaultRate and DefaultBurst.
	Limiter *rate.Limiter
	// InFlight bounds the notifications read at once; 0 means DefaultInFlight.
	InFlight int
	Log      logr.Logger
	Metrics  *Metrics

	once         sync.Once
	slots, small chan struct{}
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
		if h.InFlight <= 0 {
			h.InFlight = DefaultInFlight
		}
		h.slots, h.small = make(chan struct{}, h.InFlight), make(chan struct{}, h.InFlight)
		h.refused = map[string]int{}
	})
}

// ServeHTTP implements http.Handler. What a request may cost is decided before its body is
// read: it must carry a header that could authenticate it, declare no body over MaxBody and
// find a free slot of InFlight. Its body then streams through the HMACs its header names with
// MaxPrefix of it kept, within BodyTimeout. Only an authenticated notification spends the rate
// limit, so a flood of forged ones never refuses a genuine one for being late.
func (h *Hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.init()
	if r.Method != http.MethodPost {
		h.refuse(w, ResultMalformed, http.StatusMethodNotAllowed, "a notification is a POST", r)
		return
	}
	c, ok := h.challenge(r.Header)
	if !ok {
		h.refuse(w, ResultUnauthorized, http.StatusUnauthorized, "no valid signature or token", r)
		return
	}
	if r.ContentLength > MaxBody {
		h.refuse(w, ResultMalformed, http.StatusRequestEntityTooLarge, "the body is over 1 MiB; the renderer's interval picks up the push", r)
		return
	}
	slots, limit := h.slots, int64(MaxBody)
	if r.ContentLength >= 0 && r.ContentLength <= SmallBody {
		slots, limit = h.small, SmallBody
	}
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		w.Header().Set("Retry-After", "1")
		h.refuse(w, ResultLimited, http.StatusServiceUnavailable, "too many notifications being read; the renderer's interval picks up the push", r)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyTimeout))
	prefix := &prefixWriter{max: MaxPrefix}
	_, err := io.CopyBuffer(io.MultiWriter(append(c.macs(), prefix)...), http.MaxBytesReader(w, r.Body, limit), make([]byte, 4<<10))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, ResultMalformed, http.StatusRequestEntityTooLarge, "the body is over 1 MiB; the renderer's interval picks up the push", r)
			return
		}
		h.refuse(w, ResultMalformed, http.StatusBadRequest, "reading the body failed", r)
		return
	}
	if !c.valid() {
		h.refuse(w, ResultUnauthorized, http.StatusUnauthorized, "no valid signature or token", r)
		return
	}
	if !h.Limiter.Allow() {
		w.Header().Set("Retry-After", "1")
		h.refuse(w, ResultLimited, http.StatusTooManyRequests, "too many notifications; the renderer's interval picks up the push", r)
		return
	}
	if reason := h.ignore(r.Header, prefix.b); reason != "" {
		h.count(ResultIgnored)
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ignored: "+reason+"\n")
		return
	}
	h.count(ResultAccepted)
	h.Wake(c.form)
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, "accepted: the renderer fetches\n")
}

// challenge is what would authenticate a notification, read from its headers alone: the
// form, and either a token already checked or the HMACs its body must match.
type challenge struct {
	form  string
	token bool // the form authenticates by a token in a header, checked already
	want  []byte
	sums  []hash.Hash // one per secret the form may be keyed by
}

func (c *challenge) macs() []io.Writer {
	ws := make([]io.Writer, len(c.sums))
	for i, m := range c.sums {
		ws[i] = m
	}
	return ws
}

func (c *challenge) valid() bool {
	if c.token {
		return true
	}
	for _, m := range c.sums {
		if hmac.Equal(c.want, m.Sum(nil)) {
			return true
		}
	}
	return false
}

// challenge returns what authenticates a notification by its headers, or false when nothing
// could: no header of any form, a malformed signature, or a wrong token.
func (h *Hook) challenge(hd http.Header) (*challenge, bool) {
	host, nudge := h.HostSecret, h.NudgeSecret
	if v := hd.Get(HeaderSignature); v != "" {
		return prefixed("generic", v, host, nudge)
	}
	if len(host) == 0 {
		return nil, false
	}
	if v := hd.Get(HeaderGiteaSignature); v != "" && hd.Get(HeaderGiteaEvent) != "" {
		return hexed("gitea", v, sha256.New, host)
	}
	if v := hd.Get(HeaderForgejoSignature); v != "" && hd.Get(HeaderForgejoEvent) != "" {
		return hexed("forgejo", v, sha256.New, host)
	}
	if hd.Get(HeaderGitHubEvent) != "" {
		if v := hd.Get(HeaderGitHubSignature256); v != "" {
			return prefixed("github", v, host)
		}
		if v := hd.Get(HeaderGitHubSignature); v != "" {
			return prefixed("github", v, host)
		}
		return nil, false
	}
	if v := hd.Get(HeaderGitLabToken); v != "" && hd.Get(HeaderGitLabEvent) != "" {
		return &challenge{form: "gitlab", token: true}, subtle.ConstantTimeCompare([]byte(v), host) == 1
	}
	return nil, false
}

// prefixed is the challenge of a "<algorithm>=<hex>" HMAC (GitHub's and Flux's form).
func prefixed(form, v string, secrets ...[]byte) (*challenge, bool) {
	algo, sum, ok := strings.Cut(v, "=")
	if !ok {
		return nil, false
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
		return nil, false
	}
	return hexed(form, sum, h, secrets...)
}

// hexed is the challenge of a hex HMAC keyed by any of secrets (an empty one keys nothing).
func hexed(form, sum string, h func() hash.Hash, secrets ...[]byte) (*challenge, bool) {
	want, err := hex.DecodeString(sum)
	if err != nil || len(want) != h().Size() {
		return nil, false
	}
	c := &challenge{form: form, want: want}
	for _, s := range secrets {
		if len(s) > 0 {
			c.sums = append(c.sums, hmac.New(h, s))
		}
	}
	return c, len(c.sums) > 0
}

// prefixWriter keeps the first max bytes written to it and drops the rest.
type prefixWriter struct {
	b   []byte
	max int
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if room := p.max - len(p.b); room > 0 {
		p.b = append(p.b, b[:min(room, len(b))]...)
	}
	return len(b), nil
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

// Sign is the HMAC of body keyed by secret.
func Sign(h func() hash.Hash, secret, body []byte) []byte {
	m := hmac.New(h, secret)
	m.Write(body)
	return m.Sum(nil)
}
