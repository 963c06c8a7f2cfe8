// Package templates owns the text gitbroker writes for people: the
// renderer's commit message and the pull-request description of a review
// branch, and the files of a new repository that `gitbroker init` writes
// (init/). They are Go text/templates embedded in the binary; a repository
// replaces the first two with spec.templates in gitbroker.yaml.
package templates

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"text/template"
)

//go:embed commit-message.tmpl pull-request.md.tmpl
var files embed.FS

// Names of the templates, as gitbroker.yaml's spec.templates names them.
const (
	CommitMessageName = "commitMessage"
	PullRequestName   = "pullRequest"
)

// Render is what the templates see.
type Render struct {
	// SourceCommit is the commit the render read; ShortSourceCommit its
	// first 12 characters.
	SourceCommit      string
	ShortSourceCommit string
	// Branch is the source branch.
	Branch string
	// Summary is the plan's one-line summary.
	Summary string
	// Plan is the plan as text (commit message) or markdown (pull request).
	Plan string
	// FilesChanged counts the files under rendered/ and history/ that changed.
	FilesChanged int
	// InputsDigest digests the inputs rendered.
	InputsDigest string
}

// Default returns the embedded template of that name.
func Default(name string) string {
	file := map[string]string{CommitMessageName: "commit-message.tmpl", PullRequestName: "pull-request.md.tmpl"}[name]
	b, err := files.ReadFile(file)
	if err != nil {
		panic(fmt.Sprintf("templates: no embedded template %q", name)) // a build without the files cannot run
	}
	return string(b)
}

// Parse checks a template's text.
func Parse(name, text string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Parse(text)
}

// Execute renders the template name, using override when it is not empty.
func Execute(name, override string, data Render) (string, error) {
	text := override
	if text == "" {
		text = Default(name)
	}
	if data.ShortSourceCommit == "" {
		data.ShortSourceCommit = data.SourceCommit
		if len(data.ShortSourceCommit) > 12 {
			data.ShortSourceCommit = data.ShortSourceCommit[:12]
		}
	}
	t, err := Parse(name, text)
	if err != nil {
		return "", fmt.Errorf("template %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("template %s: %w", name, err)
	}
	return strings.TrimRight(b.String(), "\n") + "\n", nil
}

//go:embed all:init
var initFiles embed.FS

// Scaffold is what the templates of a new repository see.
type Scaffold struct {
	// Flux and ArgoCD say which GitOps tool's objects the repository gets.
	Flux, ArgoCD bool
	// FolderSourcesURL, when set, is spec.flux.folderSources.url, already quoted as a YAML
	// string: every rendered folder gets a Flux source of its own.
	FolderSourcesURL string
}

// Init returns the files of a new GitOps repository, keyed by path: the
// folders' README, gitbroker.yaml with every setting at its default, an
// example Configuration, and a .gitkeep in inventory/ and status/jobs/ so
// the folders exist before their writers do. (history/ and rendered/ are
// the renderer's: it writes every file there.) Files named *.tmpl are executed with s and lose
// the suffix.
func Init(s Scaffold) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(initFiles, "init", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := initFiles.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "init/")
		if strings.HasSuffix(name, ".tmpl") {
			t, err := Parse(name, string(data))
			if err != nil {
				return err
			}
			var b bytes.Buffer
			if err := t.Execute(&b, s); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			name, data = strings.TrimSuffix(name, ".tmpl"), b.Bytes()
		}
		out[name] = data
		return nil
	})
	return out, err
}
