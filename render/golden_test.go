package render_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/render"
)

var update = flag.Bool("update", false, "rewrite the golden files under fixtures/*/want")

// goldenCommit stands in for the source commit in golden renders.
const goldenCommit = "0123456789abcdef0123456789abcdef01234567"

// TestGolden renders every repository under fixtures/*/repo and compares rendered/, history/,
// the plan and the errors with fixtures/*/want.
func TestGolden(t *testing.T) {
	repos, err := filepath.Glob("../fixtures/*/repo")
	require.NoError(t, err)
	require.NotEmpty(t, repos)
	for _, dir := range repos {
		name := filepath.Base(filepath.Dir(dir))
		t.Run(name, func(t *testing.T) {
			res := render.Render(render.Request{Files: readDir(t, dir), SourceCommit: goldenCommit})
			got := render.Tree{}
			for p, b := range res.Files {
				got[p] = b
			}
			got["plan.txt"] = []byte(planText(res.Plan))
			var errs strings.Builder
			for _, e := range res.Errors {
				errs.WriteString(e.Error() + "\n")
			}
			if res.Refused != nil {
				errs.WriteString(res.Refused.Error() + "\n")
			}
			got["errors.txt"] = []byte(errs.String())

			wantDir := filepath.Join(filepath.Dir(dir), "want")
			if *update {
				require.NoError(t, os.RemoveAll(wantDir))
				for _, p := range got.Paths() {
					full := filepath.Join(wantDir, filepath.FromSlash(p))
					require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
					require.NoError(t, os.WriteFile(full, got[p], 0o644))
				}
			}
			want := render.Tree{}
			err := filepath.WalkDir(wantDir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(wantDir, p)
				b, err := os.ReadFile(p)
				want[filepath.ToSlash(rel)] = b
				return err
			})
			require.NoError(t, err, "run go test ./render -run TestGolden -update to create %s", wantDir)
			require.Equal(t, want.Paths(), got.Paths())
			for _, p := range want.Paths() {
				require.Equal(t, string(want[p]), string(got[p]), p)
			}
		})
	}
}
