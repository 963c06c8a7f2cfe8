package gitsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// A fetch in git's protocol v0, which go-git speaks, starts with the server advertising every
// ref of the repository: a quiet writer's cycle read 2.6 MB at 10,000 refs to learn that one
// branch had not moved. Protocol v2's ls-refs names the refs it asks for (ref-prefix), so the
// answer is as small at 10,000 refs as at 10. A writer asks that first, over HTTP(S), and
// fetches (in v0, as before) only when its branch moved; a server that does not speak v2 is
// fetched from as before.

// maxLsRefsAnswer bounds what ls-refs may answer: one branch, and the branches under it.
const maxLsRefsAnswer = 1 << 20

// errNoProtocolV2 is a server that answers in protocol v0 when asked for v2.
var errNoProtocolV2 = errors.New("the server does not speak git protocol v2")

// httpClient is the client of every request gitsync makes itself (go-git's use the same
// transport): throttled, watched, bounded.
var httpClient *http.Client

// lsRef returns the commit branch points at on the server, and whether it exists, asking for
// that branch alone (protocol v2 ls-refs). errNoProtocolV2 says the server cannot be asked so.
func (r *Repository) lsRef(ctx context.Context, branch plumbing.ReferenceName) (plumbing.Hash, bool, error) {
	if !strings.HasPrefix(r.url, "http://") && !strings.HasPrefix(r.url, "https://") {
		return plumbing.ZeroHash, false, errNoProtocolV2
	}
	ctx = r.netContext(ctx, false)
	base := strings.TrimSuffix(r.url, "/")
	adv, err := r.v2Request(ctx, http.MethodGet, base+"/info/refs?service=git-upload-pack", nil)
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	if !speaksV2(adv) {
		return plumbing.ZeroHash, false, errNoProtocolV2
	}
	var body bytes.Buffer
	enc := pktline.NewEncoder(&body)
	if err := enc.EncodeString("command=ls-refs\n", "agent=gitbroker\n"); err != nil {
		return plumbing.ZeroHash, false, err
	}
	body.WriteString("0001") // delimiter: the arguments follow
	if err := enc.EncodeString("ref-prefix " + branch.String() + "\n"); err != nil {
		return plumbing.ZeroHash, false, err
	}
	if err := enc.Flush(); err != nil {
		return plumbing.ZeroHash, false, err
	}
	answer, err := r.v2Request(ctx, http.MethodPost, base+"/git-upload-pack", body.Bytes())
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	sc := pktline.NewScanner(bytes.NewReader(answer))
	for sc.Scan() {
		line := strings.TrimSuffix(string(sc.Bytes()), "\n")
		if line == "" {
			break // flush: the list ended
		}
		hash, rest, ok := strings.Cut(line, " ")
		name, _, _ := strings.Cut(rest, " ") // attributes (symref-target, peeled) follow
		h := plumbing.NewHash(hash)
		if !ok || len(hash) != 40 || h.String() != hash {
			return plumbing.ZeroHash, false, fmt.Errorf("ls-refs of %s: a line that names no ref: %q", r.URL(), line)
		}
		if name == branch.String() {
			return h, true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("ls-refs of %s: %w", r.URL(), err)
	}
	return plumbing.ZeroHash, false, nil
}

// speaksV2 reports whether a ref advertisement is protocol v2's capability advertisement
// (after the "# service" line smart HTTP may put first).
func speaksV2(adv []byte) bool {
	sc := pktline.NewScanner(bytes.NewReader(adv))
	for sc.Scan() {
		line := strings.TrimSuffix(string(sc.Bytes()), "\n")
		switch {
		case line == "", strings.HasPrefix(line, "# service="):
			continue
		default:
			return line == "version 2"
		}
	}
	return false
}

// v2Request makes one request of protocol v2 with r's credentials and returns the body of the
// answer, at most maxLsRefsAnswer bytes.
func (r *Repository) v2Request(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Git-Protocol", "version=2")
	req.Header.Set("User-Agent", "git/gitbroker")
	if body != nil {
		req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
		req.Header.Set("Accept", "application/x-git-upload-pack-result")
	}
	if a, ok := r.auth.(githttp.AuthMethod); ok && a != nil {
		a.SetAuth(req)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, r.redact.wrap(err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return nil, fmt.Errorf("%s %s: %s", method, r.URL(), resp.Status) // the host's trouble, for now
	case resp.StatusCode != http.StatusOK:
		// A server that does not take protocol v2's requests.
		return nil, fmt.Errorf("%w: %s %s: %s", errNoProtocolV2, method, r.URL(), resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLsRefsAnswer+1))
	if err != nil {
		return nil, r.redact.wrap(err)
	}
	if len(b) > maxLsRefsAnswer {
		return nil, fmt.Errorf("%s %s: answers more than %d bytes", method, r.URL(), maxLsRefsAnswer)
	}
	return b, nil
}

// quietFetch answers a fetch of a branch the store already holds without fetching, when the
// server says (ls-refs) that the branch has not moved or is gone: quiet is then true, and c the
// head (nil when gone). Otherwise the caller fetches as before, and always from a server that
// does not speak protocol v2. A host that throttles, stalls or is down is an error.
func (r *Repository) quietFetch(ctx context.Context, depth int) (c *object.Commit, quiet bool, err error) {
	if depth != 0 || r.deepen || r.refetching || r.noV2 {
		return nil, false, nil
	}
	known, err := r.repo.Reference(r.remoteRef(), true)
	if err != nil {
		return nil, false, nil // the first fetch into the store
	}
	tip, exists, err := r.lsRef(ctx, r.branch)
	switch {
	case errors.Is(err, errNoProtocolV2):
		r.log.Info("the server does not list a branch alone (git protocol v2); every read fetches its whole ref advertisement", "branch", r.branch.Short(), "error", err.Error())
		r.noV2 = true
		return nil, false, nil
	case err != nil:
		// The host throttles, stalls or is down: fetching in v0 would only cost it more.
		return nil, false, fmt.Errorf("listing %s on %s: %w", r.branch.Short(), r.URL(), err)
	case !exists:
		_ = r.repo.Storer.RemoveReference(r.remoteRef())
		r.unreadable = plumbing.ZeroHash
		r.quiet.Add(1)
		return nil, true, nil
	case tip != known.Hash():
		return nil, false, nil // moved: fetch it
	}
	c, err = r.repo.CommitObject(tip)
	if err != nil {
		return nil, false, nil
	}
	r.unreadable = plumbing.ZeroHash
	r.quiet.Add(1)
	return c, true, nil
}

// QuietFetches counts the fetches r answered from its store because the server said its branch
// had not moved (or was gone): each cost one small ref listing, whatever the repository's size.
func (r *Repository) QuietFetches() int64 { return r.quiet.Load() }
