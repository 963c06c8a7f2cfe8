package notify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// SendTimeout bounds one notification sent: a GitOps tool or renderer that does not answer
// costs the sender this long at most, and the interval does the rest.
const SendTimeout = 5 * time.Second

// post sends body to target with headers, and fails on anything but a 2xx answer.
func post(ctx context.Context, client *http.Client, target string, body []byte, headers map[string]string) error {
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(ctx, SendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s: %s", redact(target), resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// redact keeps a URL's scheme, host and first path element: a Receiver's path is derived from
// its token and is as secret.
func redact(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "the notification URL"
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	return u.Scheme + "://" + u.Host + "/" + first + "/..."
}

// Generic is a generic notification's body: the refs that moved (full names), and the
// commit the first moved to.
type Generic struct {
	Refs   []string `json:"refs"`
	Commit string   `json:"commit,omitempty"`
	// Branches are the refs' short names, and Sources the names of Flux's GitRepositories
	// that follow them, for a Flux Receiver's resourceFilter.
	Branches []string `json:"branches,omitempty"`
}

// SignedHeader is the generic form's signature header value for body.
func SignedHeader(secret, body []byte) string {
	return "sha256=" + hex.EncodeToString(Sign(sha256.New, secret, body))
}

// Nudge is an agent's notification to the renderer after it pushed its ref (agent
// --renderer-url): the generic form, signed with the nudge secret.
type Nudge struct {
	URL    string
	Secret []byte
	Client *http.Client
}

// Send tells the renderer that ref moved to commit.
func (n *Nudge) Send(ctx context.Context, ref, commit string) error {
	body, err := json.Marshal(Generic{Refs: []string{ref}, Commit: commit})
	if err != nil {
		return err
	}
	return post(ctx, n.Client, n.URL, body, map[string]string{HeaderSignature: SignedHeader(n.Secret, body)})
}

// Moved is what a render that landed moved, for the GitOps tools.
type Moved struct {
	// RepoURL is the repository as the GitOps tool knows it (its sources' URL).
	RepoURL string
	// Before and After are the rendered branch's commits.
	Before, After string
	// Branches are the branches that moved, short names: the rendered branch (when it moved)
	// and the folder sources' branches that moved with it.
	Branches []string
	// Paths are the files of the rendered branch the render changed, when it knows them and
	// they are at most MaxPaths; nil means "any": the tool refreshes everything that follows
	// the branch.
	Paths []string
}

// MaxPaths bounds the paths a notification lists (Argo CD's body stays far below its limits);
// a render that changed more lists none, which refreshes every Application of the branch.
const MaxPaths = 2000

// Target is a GitOps tool told about each render that lands.
type Target interface {
	// Notify tells the tool what moved; it returns once the tool has answered.
	Notify(ctx context.Context, m Moved) error
	String() string
}

// FluxReceiver is a Flux notification-controller Receiver of type generic-hmac: deploy/flux's
// names every gitbroker GitRepository and keeps those whose branch the body names
// (resourceFilter), so Flux fetches exactly the sources that moved.
type FluxReceiver struct {
	// URL is the notification-controller's webhook receiver (deploy/flux:
	// http://webhook-receiver.flux-system.svc); the Receiver's path is added.
	URL             string
	Name, Namespace string
	// Token is the Receiver's Secret's token.
	Token  []byte
	Client *http.Client
}

// Path is the Receiver's webhook path, as notification-controller derives it (and `flux
// trigger receiver`): /hook/ and the SHA-256 of token, name and namespace.
func (f *FluxReceiver) Path() string {
	sum := sha256.Sum256([]byte(string(f.Token) + f.Name + f.Namespace))
	return "/hook/" + hex.EncodeToString(sum[:])
}

func (f *FluxReceiver) String() string {
	return "Flux Receiver " + f.Namespace + "/" + f.Name
}

func (f *FluxReceiver) Notify(ctx context.Context, m Moved) error {
	if len(m.Branches) == 0 {
		return nil
	}
	g := Generic{Commit: m.After, Branches: m.Branches}
	for _, b := range m.Branches {
		g.Refs = append(g.Refs, "refs/heads/"+b)
	}
	body, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return post(ctx, f.Client, strings.TrimSuffix(f.URL, "/")+f.Path(), body, map[string]string{HeaderSignature: SignedHeader(f.Token, body)})
}

// ArgoCD is Argo CD's webhook (argocd-server's /api/webhook), told in GitHub's push form,
// signed with the secret argocd-secret holds as webhook.github.secret. Argo CD refreshes the
// Applications whose repoURL is RepoURL and whose targetRevision is the rendered branch.
type ArgoCD struct {
	// URL is the webhook, e.g. https://argocd-server.argocd.svc/api/webhook.
	URL string
	// Branch is the branch Argo CD's Applications follow (the rendered branch).
	Branch string
	Secret []byte
	Client *http.Client
}

func (a *ArgoCD) String() string { return "Argo CD webhook" }

func (a *ArgoCD) Notify(ctx context.Context, m Moved) error {
	moved := false
	for _, b := range m.Branches {
		moved = moved || b == a.Branch
	}
	if !moved {
		return nil
	}
	// GitHub's push event, as much of it as Argo CD reads: the repository's URL, the ref, the
	// commits before and after.
	type repository struct {
		HTMLURL       string `json:"html_url"`
		CloneURL      string `json:"clone_url"`
		DefaultBranch string `json:"default_branch"`
	}
	type commit struct {
		ID       string   `json:"id"`
		Modified []string `json:"modified,omitempty"`
	}
	body, err := json.Marshal(struct {
		Ref        string     `json:"ref"`
		Before     string     `json:"before"`
		After      string     `json:"after"`
		Repository repository `json:"repository"`
		HeadCommit commit     `json:"head_commit"`
		Commits    []commit   `json:"commits"`
	}{
		Ref: "refs/heads/" + a.Branch, Before: zeroIfEmpty(m.Before), After: m.After,
		Repository: repository{HTMLURL: strings.TrimSuffix(m.RepoURL, ".git"), CloneURL: m.RepoURL},
		HeadCommit: commit{ID: m.After}, Commits: []commit{{ID: m.After, Modified: m.Paths}},
	})
	if err != nil {
		return err
	}
	return post(ctx, a.Client, a.URL, body, map[string]string{
		HeaderGitHubEvent:        "push",
		HeaderGitHubSignature256: SignedHeader(a.Secret, body),
	})
}

func zeroIfEmpty(commit string) string {
	if commit == "" {
		return strings.Repeat("0", 40)
	}
	return commit
}

// The files of a folder of notification secrets (render and agent --notify-secrets-dir), as
// the keys of deploy/'s gitbroker-notify Secret, each optional.
const (
	SecretFileWebhook      = "webhook-secret"        // the git host's push webhook secret
	SecretFileNudge        = "nudge-secret"          // the agents' nudge
	SecretFileFluxReceiver = "flux-receiver-token"   // the Flux Receiver's token
	SecretFileArgoCD       = "argocd-webhook-secret" // argocd-secret's webhook.github.secret
	SecretFileArgoCDCA     = "argocd-webhook-ca.crt" // the CA of argocd-server's certificate
)

// SecretFiles lists them.
var SecretFiles = []string{SecretFileWebhook, SecretFileNudge, SecretFileFluxReceiver, SecretFileArgoCD, SecretFileArgoCDCA}

// ReadSecret reads a shared secret from a file (a mounted Secret's key): its trailing newline
// and spaces are not part of it, and an empty or oversized file is an error naming the file.
func ReadSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxSecret {
		return nil, fmt.Errorf("%s: a secret is at most %d bytes", path, maxSecret)
	}
	b = bytes.TrimRight(b, "\r\n\t ")
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: the secret is empty", path)
	}
	return b, nil
}

const maxSecret = 4096
