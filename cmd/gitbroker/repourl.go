package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// scpLike is git's scp-like syntax, [user@]host:path, which has no scheme and whose host part
// holds no slash before the colon.
var scpLike = regexp.MustCompile(`^(?:([^@/:]+)@)?([^@/:]+):([^/].*|/.*)$`)

// clusterRepoURL is the repository URL written into objects that Flux or Argo CD fetch from
// inside the cluster: http(s):// or ssh:// (Flux's GitRepository refuses any other scheme), with
// git's scp-like form written as the ssh:// URL it means. A file:// URL names a path on this
// machine, which nothing in the cluster can reach; a password would be committed with the file.
func clusterRepoURL(flag, raw string) (string, error) {
	if strings.TrimSpace(raw) == "" {
		return "", fmt.Errorf("--%s is required: the URL Flux or Argo CD fetches the repository from, such as https://git.example.org/plant/edge.git or git@github.com:acme/edge.git", flag)
	}
	if !strings.Contains(raw, "://") {
		m := scpLike.FindStringSubmatch(raw)
		if m == nil {
			return "", fmt.Errorf("--%s %q: not a URL; give https://host/path, ssh://[user@]host/path or git's user@host:path", flag, raw)
		}
		user := ""
		if m[1] != "" {
			user = m[1] + "@"
		}
		raw = "ssh://" + user + m[2] + "/" + strings.TrimPrefix(m[3], "/")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--%s %q: %w", flag, raw, err)
	}
	switch u.Scheme {
	case "http", "https", "ssh":
	case "file":
		return "", fmt.Errorf("--%s %q: a file:// URL names a path on this machine, which Flux and Argo CD, fetching in the cluster, cannot reach; give the https:// or ssh:// URL they reach the repository at (the agents and the renderer may still use file:// with --git)", flag, raw)
	default:
		return "", fmt.Errorf("--%s %q: scheme %q; Flux and Argo CD fetch over https://, http:// or ssh://", flag, raw, u.Scheme)
	}
	if u.Host == "" || u.Path == "" || u.Path == "/" {
		return "", fmt.Errorf("--%s %q: a URL needs a host and a repository path", flag, raw)
	}
	if _, ok := u.User.Password(); ok {
		return "", fmt.Errorf("--%s holds a password, which init would write into the repository (flux/, argocd/); give it the URL alone, and the credentials to Flux in the Secret its GitRepository's spec.secretRef names, or to Argo CD as repository credentials", flag)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--%s %q: a repository URL has no query or fragment", flag, raw)
	}
	return u.String(), nil
}

// validBranch refuses a branch name git refuses (git check-ref-format: "..", a leading "-",
// control characters, "@{", a trailing ".lock" and the others).
func validBranch(flag, name string) error {
	if name == "" {
		return fmt.Errorf("--%s is empty", flag)
	}
	if strings.HasPrefix(name, "-") || strings.HasPrefix(name, "refs/") {
		return fmt.Errorf("--%s %q: give the branch's short name, not beginning with - or refs/", flag, name)
	}
	if err := plumbing.NewBranchReferenceName(name).Validate(); err != nil {
		return fmt.Errorf("--%s %q: not a valid branch name (%v)", flag, name, err)
	}
	return nil
}
