// Package gitsynctest runs a real git server for tests: git's own
// http-backend speaking the smart HTTP protocol on loopback, seeded with
// files and inspected with the git command line. It can fail on purpose: go down, or apply a push and then
// drop the connection before the client hears back. Silent is a server that never answers.
package gitsynctest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// RepoPath is the repository's path on the server.
const RepoPath = "fleet.git"

// Server is git's own smart HTTP server (git http-backend, run as CGI) on
// loopback, serving one repository.
type Server struct {
	t        testing.TB
	branch   string
	root     string
	http     *httptest.Server
	user     string
	password string
	token    string
	// sign is the SSH key a person's commits are signed with; "" for none.
	sign string

	*state
}

// state is what every view of one Server (On) shares.
type state struct {
	down        atomic.Bool
	dropPushes  atomic.Int32
	receivePost atomic.Int64
	receiveRefs atomic.Int64
	onPush      atomic.Pointer[func()]
	webhook     atomic.Pointer[webhook]
	// host counts and throttles as a git host does (WithHostLimits); nil for none.
	host *host
}

// On returns a view of the server whose branch methods (Commit, Head, File, Files, Log) work
// on branch instead: a writer's own ref, such as gitbroker/rendered.
func (s *Server) On(branch string) *Server {
	c := &Server{t: s.t, branch: branch, root: s.root, http: s.http, user: s.user, password: s.password, token: s.token, state: s.state}
	return c
}

// Option configures a Server before it starts.
type Option func(*Server)

// WithAuth requires HTTP basic auth.
func WithAuth(user, password string) Option {
	return func(s *Server) { s.user, s.password = user, password }
}

// WithToken requires an "Authorization: Bearer" token.
func WithToken(token string) Option {
	return func(s *Server) { s.token = token }
}

// NewServer starts a server on loopback whose repository holds files on
// branch in one commit (no commit at all when files is nil). It stops when
// the test ends.
func NewServer(t testing.TB, branch string, files map[string]string, opts ...Option) *Server {
	t.Helper()
	s := &Server{t: t, branch: branch, root: t.TempDir(), state: &state{}}
	for _, o := range opts {
		o(s)
	}
	Init(t, s.Bare(), branch)
	if files != nil {
		s.Commit(files, nil, "seed")
	}
	backend := filepath.Join(strings.TrimSpace(Git(t, "", "--exec-path")), "git-http-backend")
	cgiHandler := &cgi.Handler{
		Path:   backend,
		Root:   "/",
		Env:    []string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
		Stderr: io.Discard,
		Logger: log.New(io.Discard, "", 0),
	}
	var served http.Handler = s.auth(cgiHandler)
	if s.host != nil {
		backend := served
		served = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serveHost(w, r, backend) })
	}
	s.http = httptest.NewServer(s.faults(served))
	t.Cleanup(s.http.Close)
	return s
}

// pushOptionsHook records the push options (git push -o) a push carried.
const pushOptionsHook = `#!/bin/sh
i=0
while [ "$i" -lt "${GIT_PUSH_OPTION_COUNT:-0}" ]; do
  eval "echo \"\$GIT_PUSH_OPTION_$i\"" >> push-options.log
  i=$((i+1))
done
`

// Init creates a bare repository that accepts pushes over HTTP, records push options and
// serves partial clone filters.
func Init(t testing.TB, bare, branch string) {
	t.Helper()
	Git(t, "", "init", "--quiet", "--bare", "--initial-branch="+branch, bare)
	Git(t, bare, "config", "http.receivepack", "true")
	Git(t, bare, "config", "receive.advertisePushOptions", "true")
	// As GitHub, GitLab and Gitea do: partial clone filters (a writer leaves out blobs too large
	// to read).
	Git(t, bare, "config", "uploadpack.allowFilter", "true")
	if err := os.WriteFile(filepath.Join(bare, "hooks", "pre-receive"), []byte(pushOptionsHook), 0o755); err != nil {
		t.Fatal(err)
	}
}

// PushOptions lists the push options the server received, in order.
func (s *Server) PushOptions() []string {
	b, err := os.ReadFile(filepath.Join(s.Bare(), "push-options.log"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// Branches lists the repository's branches.
func (s *Server) Branches() []string {
	return strings.Fields(Git(s.t, s.Bare(), "for-each-ref", "--format=%(refname:short)", "refs/heads/"))
}

// Heads maps each branch to its commit, read in one git process (Head runs one per branch).
func (s *Server) Heads() map[string]string {
	heads := map[string]string{}
	out := Git(s.t, s.Bare(), "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if commit, ref, ok := strings.Cut(line, " "); ok {
			heads[strings.TrimPrefix(ref, "refs/heads/")] = commit
		}
	}
	return heads
}

// FileAt is a file's content at a revision.
func (s *Server) FileAt(rev, name string) (string, bool) {
	out, err := exec.Command("git", "-C", s.Bare(), "show", rev+":"+name).Output()
	if err != nil {
		return "", false
	}
	return string(out), true
}

// Stop closes the server; a stopped server refuses connections.
func (s *Server) Stop() { s.http.Close() }

func (s *Server) auth(next http.Handler) http.Handler {
	if s.user == "" && s.password == "" && s.token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, basic := r.BasicAuth()
		bearer, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		okBasic := basic && (s.user != "" || s.password != "") && u == s.user && p == s.password
		okBearer := hasBearer && s.token != "" && bearer == s.token
		if !okBasic && !okBearer {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			s.deliver()
		}
	})
}

// URL is the repository's HTTP URL, without credentials.
func (s *Server) URL() string { return s.http.URL + "/" + RepoPath }

// Bare is the repository's folder on disk.
func (s *Server) Bare() string { return filepath.Join(s.root, RepoPath) }

// SetDown makes every request fail by closing its connection, as if the
// server were gone, or brings the server back.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// DropNextPushes makes the next n pushes be applied by the server and then
// lose their connection before the client reads the result.
func (s *Server) DropNextPushes(n int) { s.dropPushes.Store(int32(n)) }

// BeforeNextPush runs f once, when the next push reaches the server and
// before the server reads it: after the client saw the refs, before its
// update is applied.
func (s *Server) BeforeNextPush(f func()) { s.onPush.Store(&f) }

// Pushes counts the pushes the server received.
func (s *Server) Pushes() int64 { return s.receivePost.Load() }

// PushSessions counts the push sessions opened (receive-pack ref advertisements), including those
// that then pushed nothing.
func (s *Server) PushSessions() int64 { return s.receiveRefs.Load() }

func (s *Server) faults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			hangUp(w)
			return
		}
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs") && r.URL.Query().Get("service") == "git-receive-pack" {
			s.receiveRefs.Add(1)
		}
		if r.Method == http.MethodPost {
			// The whole request body first: git http-backend (2.39) given a body shorter than
			// its CONTENT_LENGTH, from a client killed mid-request, spins for ever, and the
			// server waits on it at Close. A request whose body does not arrive whole is
			// dropped here, as a host drops it.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				hangUp(w)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			r.Header.Set("Content-Length", strconv.Itoa(len(body)))
			r.TransferEncoding = nil
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			s.receivePost.Add(1)
			if f := s.onPush.Swap(nil); f != nil {
				(*f)()
			}
			if s.dropPushes.Load() > 0 && s.dropPushes.Add(-1) >= 0 {
				rec := httptest.NewRecorder()
				next.ServeHTTP(rec, r)
				hangUp(w)
				return
			}
		}
		next.ServeHTTP(w, r)
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			s.deliver()
		}
	})
}

// hangUp closes the connection without a response.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "down", http.StatusBadGateway)
		return
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// Commit commits files (and removes the paths in remove) on the branch
// directly in the server's repository, the way a person's push would land.
// Like a person, it fetches and tries again when another push got there
// first.
func (s *Server) Commit(files map[string]string, remove []string, message string) string {
	s.t.Helper()
	for attempt := 0; ; attempt++ {
		err := s.tryCommit(files, remove, message)
		if err == nil {
			return s.Head()
		}
		if attempt == 20 {
			s.t.Fatalf("committing %q: %v", message, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CommitSigned is Commit by a person who signs with an SSH key (git's gpg.format=ssh), as a
// reviewed merge would be.
func (s *Server) CommitSigned(signingKey string, files map[string]string, remove []string, message string) string {
	s.t.Helper()
	c := *s
	c.sign = signingKey
	return c.Commit(files, remove, message)
}

func (s *Server) tryCommit(files map[string]string, remove []string, message string) error {
	work := s.t.TempDir()
	if s.Head() == "" {
		Git(s.t, "", "init", "--quiet", "--initial-branch="+s.branch, work)
	} else {
		Git(s.t, "", "clone", "--quiet", "--depth=1", "--branch", s.branch, "file://"+s.Bare(), work)
	}
	for name, content := range files {
		full := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	for _, name := range remove {
		Git(s.t, work, "rm", "-r", "--quiet", name)
	}
	Git(s.t, work, "add", "-A")
	args := []string{"-c", "user.name=A Person", "-c", "user.email=person@example.com"}
	if s.sign != "" {
		args = append(args, "-c", "gpg.format=ssh", "-c", "user.signingkey="+s.sign, "-c", "commit.gpgsign=true")
	}
	Git(s.t, work, append(args, "commit", "--quiet", "--allow-empty", "-m", message)...)
	cmd := exec.Command("git", "push", "--quiet", "file://"+s.Bare(), "HEAD:refs/heads/"+s.branch)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	s.deliver()
	return nil
}

// Head is the branch's commit, or "" when the branch does not exist.
func (s *Server) Head() string {
	out, err := exec.Command("git", "-C", s.Bare(), "rev-parse", "--verify", "--quiet", "refs/heads/"+s.branch).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// File is a file's content at the branch head, and whether it exists.
func (s *Server) File(name string) (string, bool) {
	out, err := exec.Command("git", "-C", s.Bare(), "show", s.branch+":"+name).Output()
	if err != nil {
		return "", false
	}
	return string(out), true
}

// Files lists the paths at the branch head.
func (s *Server) Files() []string {
	if s.Head() == "" {
		return nil
	}
	out := Git(s.t, s.Bare(), "ls-tree", "-r", "--name-only", s.branch)
	return strings.Fields(out)
}

// LogEntry is one commit on the branch with the paths it changed.
type LogEntry struct {
	Hash    string
	Author  string
	Subject string
	Body    string
	Paths   []string
}

// Log lists the branch's commits, newest first, with the paths each
// changed relative to its first parent.
func (s *Server) Log() []LogEntry {
	s.t.Helper()
	if s.Head() == "" {
		return nil
	}
	out := Git(s.t, s.Bare(), "log", "--first-parent", "--name-only", "--format=%x00%H%x01%an <%ae>%x01%s%x01%b%x01", s.branch)
	var log []LogEntry
	for _, rec := range strings.Split(out, "\x00")[1:] {
		parts := strings.SplitN(rec, "\x01", 5)
		if len(parts) != 5 {
			s.t.Fatalf("unexpected log record %q", rec)
		}
		e := LogEntry{Hash: parts[0], Author: parts[1], Subject: parts[2], Body: parts[3]}
		sc := bufio.NewScanner(strings.NewReader(parts[4]))
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				e.Paths = append(e.Paths, line)
			}
		}
		log = append(log, e)
	}
	return log
}

// Git runs git in dir and returns its output, failing the test on error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// String describes the server for failure messages.
func (s *Server) String() string { return fmt.Sprintf("git server %s", s.URL()) }

// VerifyCommit runs git's own `git verify-commit -v` on commit in the server's repository, with
// allowedSigners (git's allowed_signers format) as gpg.ssh.allowedSignersFile, and returns what
// git said and whether it verified.
func (s *Server) VerifyCommit(commit, allowedSigners string) (string, error) {
	return s.VerifyCommitRevoked(commit, allowedSigners, "")
}

// VerifyCommitRevoked is VerifyCommit with revoked (public keys, one a line) as git's
// gpg.ssh.revocationFile when it is not empty.
func (s *Server) VerifyCommitRevoked(commit, allowedSigners, revoked string) (string, error) {
	s.t.Helper()
	dir := s.t.TempDir()
	f := filepath.Join(dir, "allowed_signers")
	if err := os.WriteFile(f, []byte(allowedSigners), 0o644); err != nil {
		s.t.Fatal(err)
	}
	args := []string{"-c", "gpg.ssh.allowedSignersFile=" + f}
	if revoked != "" {
		r := filepath.Join(dir, "revoked_keys")
		if err := os.WriteFile(r, []byte(revoked), 0o644); err != nil {
			s.t.Fatal(err)
		}
		args = append(args, "-c", "gpg.ssh.revocationFile="+r)
	}
	cmd := exec.Command("git", append(args, "verify-commit", "-v", commit)...)
	cmd.Dir = s.Bare()
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+s.t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Hook installs a server-side hook (git's hooks: update, post-receive, ...; not pre-receive,
// which records push options) as a shell script body.
func (s *Server) Hook(name, script string) {
	s.t.Helper()
	if name == "pre-receive" {
		s.t.Fatal("gitsynctest: the pre-receive hook records push options")
	}
	if err := os.WriteFile(filepath.Join(s.Bare(), "hooks", name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		s.t.Fatal(err)
	}
}
