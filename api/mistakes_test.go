package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/mistakes"
)

// TestMistakesAreRefused: every mistake of the corpus is an input error naming its file, the
// marked line and the field. e2e's TestMistakesCorpus checks the API server refuses each too.
func TestMistakesAreRefused(t *testing.T) {
	corpus, err := mistakes.Load("testdata/mistakes")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(corpus), 50)
	for _, m := range corpus {
		t.Run(m.File, func(t *testing.T) {
			file := "configurations/" + m.File
			cfgs, errs := api.ParseConfigurations(file, m.Data, "default")
			require.Empty(t, cfgs, "%s is accepted", m.About)
			for _, e := range errs {
				if e.File == file && e.Line == m.Line && e.Field == m.Field {
					return
				}
			}
			require.Failf(t, "the mistake is not named", "%s: want %s:%d: %s, got:\n%s", m.About, file, m.Line, m.Field, errs.Error())
		})
	}
}
