package gitsynctest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// webhook is where the server sends push events, as a git host does.
type webhook struct {
	url    string
	secret []byte
	mu     sync.Mutex
	// read is how much of the post-receive log has been delivered.
	read int64
	sent atomic.Int64
}

// postReceiveHook records each ref a push moved ("old new ref", git's post-receive input) for
// the webhook.
const postReceiveHook = `#!/bin/sh
cat >> post-receive.log
`

// SendWebhooks makes the server behave as a git host with a push webhook: git's post-receive
// hook records every ref a push moved (over HTTP, or Commit's), and after the push the server
// posts GitHub's push event for each to url, signed with secret (X-Hub-Signature-256), one
// request per ref, in the order pushed, from the server's side (the pusher does not wait).
func (s *Server) SendWebhooks(url string, secret []byte) {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(s.Bare(), "hooks", "post-receive"), []byte(postReceiveHook), 0o755); err != nil {
		s.t.Fatal(err)
	}
	s.webhook.Store(&webhook{url: url, secret: secret})
}

// WebhooksSent counts the push events the server posted (answered or not).
func (s *Server) WebhooksSent() int64 {
	if w := s.webhook.Load(); w != nil {
		return w.sent.Load()
	}
	return 0
}

// deliver posts the push events recorded since the last delivery.
func (s *Server) deliver() {
	w := s.webhook.Load()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	f, err := os.Open(filepath.Join(s.Bare(), "post-receive.log"))
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(w.read, io.SeekStart); err != nil {
		return
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return
	}
	// Whole lines only: the hook of a push still under way may be writing.
	end := bytes.LastIndexByte(data, '\n') + 1
	w.read += int64(end)
	for _, line := range strings.Split(string(data[:end]), "\n") {
		fields := strings.Fields(line)
		if len(fields) != 3 {
			continue
		}
		body, _ := json.Marshal(map[string]any{
			"ref": fields[2], "before": fields[0], "after": fields[1],
			"repository": map[string]string{"html_url": strings.TrimSuffix(s.URL(), ".git"), "clone_url": s.URL()},
		})
		mac := hmac.New(sha256.New, w.secret)
		mac.Write(body)
		req, err := http.NewRequest(http.MethodPost, w.url, bytes.NewReader(body))
		if err != nil {
			continue
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		w.sent.Add(1)
		go func() {
			client := &http.Client{Timeout: 5 * time.Second}
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
}
