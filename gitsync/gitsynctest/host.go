package gitsynctest

import (
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HostLimits are a git host's limits for one repository, as it enforces them: past a limit the
// server answers 429 Too Many Requests with a Retry-After header (whole seconds, as hosts send
// it), the request unserved. A zero count is no limit.
type HostLimits struct {
	// Reads git reads (a fetch or a ref listing: one upload-pack session, counted at its ref
	// advertisement) within ReadWindow.
	Reads      int
	ReadWindow time.Duration
	// Pushes pushes (receive-pack requests that send commands) within PushWindow.
	Pushes     int
	PushWindow time.Duration
}

// GitHubLimits are GitHub's published guidance for one repository: at most 15 git reads a
// second and 6 pushes a minute (docs.github.com, "Repository limits").
var GitHubLimits = HostLimits{Reads: 15, ReadWindow: time.Second, Pushes: 6, PushWindow: time.Minute}

// WithHostLimits makes the server a git host that counts every read and push of its repository
// and throttles past limits (HostCounts says what it counted).
func WithHostLimits(l HostLimits) Option {
	return func(s *Server) { s.host = &host{limits: l} }
}

// WithHostCounts makes the server count as WithHostLimits does, without throttling.
func WithHostCounts() Option { return WithHostLimits(HostLimits{}) }

// HostCounts are what the server, as a git host, counted of its repository.
type HostCounts struct {
	Reads, Pushes int64
	// ThrottledReads and ThrottledPushes count the requests answered 429.
	ThrottledReads, ThrottledPushes int64
	// BytesServed are the bytes of every response body the server sent.
	BytesServed int64
	// PeakReads and PeakPushes are the most served within any read and push window.
	PeakReads, PeakPushes int
	// Branches are the repository's branches after the last push, and MaxBranches the most it
	// ever had.
	Branches, MaxBranches int
	// WidestDirectory is the most entries one directory held in a tree a push made a branch
	// tip, and WidestPath that directory ("" for the root).
	WidestDirectory int
	WidestPath      string
}

// host is a Server's counting and throttling, in front of git http-backend.
type host struct {
	limits HostLimits
	mu     sync.Mutex
	counts HostCounts
	reads  []time.Time // within the read window
	pushes []time.Time // within the push window
}

// HostCounts returns what the server counted; zero without WithHostLimits or WithHostCounts.
func (s *Server) HostCounts() HostCounts {
	if s.host == nil {
		return HostCounts{}
	}
	s.host.mu.Lock()
	defer s.host.mu.Unlock()
	return s.host.counts
}

// admit counts a request of kind ("read" or "push") at now, or says how long to wait when a
// limit is reached.
func (h *host) admit(kind string, now time.Time) (retryAfter time.Duration, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	window, limit, seen := h.limits.ReadWindow, h.limits.Reads, &h.reads
	if kind == "push" {
		window, limit, seen = h.limits.PushWindow, h.limits.Pushes, &h.pushes
	}
	kept := (*seen)[:0]
	for _, at := range *seen {
		if now.Sub(at) < window {
			kept = append(kept, at)
		}
	}
	*seen = kept
	if limit > 0 && len(kept) >= limit {
		if kind == "push" {
			h.counts.ThrottledPushes++
		} else {
			h.counts.ThrottledReads++
		}
		return window - now.Sub(kept[0]), false
	}
	*seen = append(*seen, now)
	if kind == "push" {
		h.counts.Pushes++
		h.counts.PeakPushes = max(h.counts.PeakPushes, len(*seen))
	} else {
		h.counts.Reads++
		h.counts.PeakReads = max(h.counts.PeakReads, len(*seen))
	}
	return 0, true
}

// countingWriter counts the bytes of a response.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// serve counts and throttles r as a host would, and has next serve what it admits.
func (s *Server) serveHost(w http.ResponseWriter, r *http.Request, next http.Handler) {
	h := s.host
	kind := ""
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs") && r.URL.Query().Get("service") == "git-upload-pack":
		kind = "read"
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
		kind = "push"
	}
	if kind != "" {
		if wait, ok := h.admit(kind, time.Now()); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			http.Error(w, fmt.Sprintf("too many %ss: at most %d within %s", kind, map[string]int{"read": h.limits.Reads, "push": h.limits.Pushes}[kind],
				map[string]time.Duration{"read": h.limits.ReadWindow, "push": h.limits.PushWindow}[kind]), http.StatusTooManyRequests)
			return
		}
	}
	var before map[string]string
	if kind == "push" {
		before = s.tips()
	}
	cw := &countingWriter{ResponseWriter: w}
	next.ServeHTTP(cw, r)
	h.mu.Lock()
	h.counts.BytesServed += cw.n
	h.mu.Unlock()
	if kind == "push" {
		s.measurePush(before)
	}
}

// tips are the repository's branches and their commits.
func (s *Server) tips() map[string]string {
	out, err := exec.Command("git", "-C", s.Bare(), "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/").Output()
	if err != nil {
		return nil
	}
	tips := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if name, commit, ok := strings.Cut(line, " "); ok {
			tips[name] = commit
		}
	}
	return tips
}

// measurePush counts the branches after a push and the widest directory of each tip it moved.
func (s *Server) measurePush(before map[string]string) {
	after := s.tips()
	widest, where := 0, ""
	for name, tip := range after {
		if before[name] == tip {
			continue
		}
		out, err := exec.Command("git", "-C", s.Bare(), "ls-tree", "-r", "-t", "--name-only", tip).Output()
		if err != nil {
			continue
		}
		entries := map[string]int{}
		for _, p := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if p == "" {
				continue
			}
			dir := path.Dir(p)
			if dir == "." {
				dir = ""
			}
			entries[dir]++
		}
		for dir, n := range entries {
			if n > widest || n == widest && dir < where {
				widest, where = n, dir
			}
		}
	}
	h := s.host
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts.Branches = len(after)
	h.counts.MaxBranches = max(h.counts.MaxBranches, len(after))
	if widest > h.counts.WidestDirectory {
		h.counts.WidestDirectory, h.counts.WidestPath = widest, where
	}
}
