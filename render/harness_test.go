package render_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/render"
)

// readDir loads a repository directory the way the CLI does.
func readDir(t testing.TB, dir string) render.Tree {
	t.Helper()
	tree := render.Tree{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if render.IsInput(rel) || render.IsOwned(rel) {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tree[rel] = b
		}
		return nil
	})
	require.NoError(t, err)
	return tree
}

// repo builds a tree from path -> content.
func repo(files map[string]string) render.Tree {
	t := render.Tree{}
	for p, c := range files {
		t[p] = []byte(c)
	}
	return t
}

// apply replaces the owned part of tree with the render result, like a commit would. It checks
// on the way that the result's Diff, which the daemon commits from, is what changed.
func apply(tree render.Tree, res *render.Result) render.Tree {
	if want := render.Diff(res.Previous, res.Files); !slices.Equal(want, res.Diff) {
		panic(fmt.Sprintf("Result.Diff is %q, but the files that changed are %q", res.Diff, want))
	}
	out := render.Tree{}
	for p, b := range tree {
		if !render.IsOwned(p) {
			out[p] = b
		}
	}
	for p, b := range res.Files {
		out[p] = b
	}
	return out
}

func renderOK(t *testing.T, tree render.Tree) *render.Result {
	t.Helper()
	res := render.Render(render.Request{Files: tree})
	require.Equal(t, render.InputsDigest(tree), res.InputsDigest)
	require.Empty(t, res.Errors, "unexpected input errors")
	require.Nil(t, res.Refused)
	return res
}

func planText(p *render.Plan) string {
	var b strings.Builder
	p.WriteText(&b)
	return b.String()
}

// filesUnder lists the paths of a tree under a prefix that contain a substring.
func filesUnder(tree render.Tree, prefix, contains string) []string {
	var out []string
	for _, p := range tree.Paths() {
		if strings.HasPrefix(p, prefix) && strings.Contains(p, contains) {
			out = append(out, p)
		}
	}
	return out
}

// podConfig and jobConfig are the shared fixtures' camera and firmware Configurations.
var podConfig = fixtures.PodConfiguration("akri.sh/v0", "cam", 1)

func jobConfig(name, extra string) string { return fixtures.JobConfiguration(name, extra) }

func inventory(node string, entries ...string) string {
	return `apiVersion: gitbroker.dev/v1alpha1
kind: NodeInventory
metadata:
  name: ` + node + `
spec:
  configurations:
` + strings.Join(entries, "")
}

// deviceProperty is the property entry gives each device: named as the Configuration's
// discovery handler names them (api.DeviceMaySet): the harness's Job Configurations discover
// with debugEcho, the others with onvif.
func deviceProperty(cfg string) string {
	switch cfg {
	case "fw", "fmt":
		return "DEBUG_ECHO_DEVICE"
	}
	return "ONVIF_DEVICE"
}

func entry(cfg string, devices ...string) string {
	s := "  - name: " + cfg + "\n    devices:\n"
	for _, d := range devices {
		shared := "false"
		id := d
		if strings.HasPrefix(d, "shared:") {
			shared, id = "true", strings.TrimPrefix(d, "shared:")
		}
		s += "    - id: " + id + "\n      shared: " + shared + "\n      properties:\n        " + deviceProperty(cfg) + ": " + id + "\n"
	}
	return s
}

func record(ns, job, cfg, inst, device, outcome string) string {
	return `apiVersion: gitbroker.dev/v1alpha1
kind: JobRecord
metadata:
  name: ` + job + `
  namespace: ` + ns + `
spec:
  configuration: ` + cfg + `
  instance: ` + inst + `
  deviceID: ` + device + `
  outcome: ` + outcome + `
  startTime: "2026-11-30T10:00:00Z"
  completionTime: "2026-11-30T10:01:00Z"
  succeeded: 1
  failed: 0
`
}
