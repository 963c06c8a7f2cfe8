package templates_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/templates"
)

var data = templates.Render{
	SourceCommit: "0123456789abcdef0123456789abcdef01234567",
	Branch:       "main",
	Summary:      "1 Pod started",
	Plan:         "Configuration default/cam (Pod broker)\n  + Pod cam-1 started",
	FilesChanged: 3,
	InputsDigest: "sha256:00",
}

func TestDefaults(t *testing.T) {
	msg, err := templates.Execute(templates.CommitMessageName, "", data)
	require.NoError(t, err)
	require.Equal(t, `render: 1 Pod started

Rendered from 0123456789abcdef0123456789abcdef01234567 on main; 3 file(s) under rendered/ and history/ changed.

Configuration default/cam (Pod broker)
  + Pod cam-1 started
`, msg)
	pr, err := templates.Execute(templates.PullRequestName, "", data)
	require.NoError(t, err)
	require.Equal(t, "## gitbroker render of 0123456789ab\n\nRendered from `0123456789abcdef0123456789abcdef01234567` on `main`.\n\nConfiguration default/cam (Pod broker)\n  + Pod cam-1 started\n", pr)
}

func TestOverride(t *testing.T) {
	msg, err := templates.Execute(templates.CommitMessageName, "chore: {{.Summary}} ({{.ShortSourceCommit}})", data)
	require.NoError(t, err)
	require.Equal(t, "chore: 1 Pod started (0123456789ab)\n", msg)

	_, err = templates.Execute(templates.CommitMessageName, "{{.Summary", data)
	require.ErrorContains(t, err, "template commitMessage")
	_, err = templates.Execute(templates.CommitMessageName, "{{.NoSuchField}}", data)
	require.ErrorContains(t, err, "NoSuchField")
}
