package gitsync

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// The object store starts over once it has grown past its limit, and
// reading and writing go on as before.
func TestObjectStoreResetsAfterGrowth(t *testing.T) {
	srv := gitsynctest.NewServer(t, "main", map[string]string{"configurations/a.yaml": "a\n"})
	r, err := New(srv.URL(), "main", WithResetAfterGrowth(1))
	require.NoError(t, err)
	ctx := context.Background()
	change := func(n int, gen string) UpdateFunc {
		return func(context.Context, Snapshot) (*Change, error) {
			files := map[string][]byte{}
			for i := 0; i < n; i++ {
				files[fmt.Sprintf("rendered/f-%04d.yaml", i)] = []byte(gen + fmt.Sprint(i))
			}
			return &Change{Owned: []string{"rendered/"}, Files: files, Message: "render",
				Author: Signature{Name: "r", Email: "r@example.com", When: time.Unix(0, 0)}}, nil
		}
	}
	_, err = r.Update(ctx, change(1200, "one"))
	require.NoError(t, err)
	grown := len(r.storage.Objects)
	require.Greater(t, grown, 1200)

	// Each write replaces every file; without a reset the store would
	// hold all three generations.
	_, err = r.Update(ctx, change(1200, "two"))
	require.NoError(t, err)
	_, err = r.Update(ctx, change(1200, "three"))
	require.NoError(t, err)
	require.Less(t, len(r.storage.Objects), 2*grown+100, "the store was started over: it holds two generations, not three")

	snap, err := r.Snapshot(ctx)
	require.NoError(t, err)
	b, err := snap.ReadFile("rendered/f-0042.yaml")
	require.NoError(t, err)
	require.Equal(t, "three42", string(b))
}

// A writer that cannot read the accepted tip (the rendered branch's head not the renderer's, or
// above its limits, as at a large fleet) reads it again less and less often, never more rarely
// than hourly, and at the interval again once a read succeeds.
func TestAcceptedRecheckBacksOffOnFailures(t *testing.T) {
	r := &Repository{recheck: DefaultAcceptedRecheck}
	var got []time.Duration
	for failures := range 8 {
		r.accepted.failures = failures
		got = append(got, r.recheckDelay())
	}
	require.Equal(t, []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour, time.Hour}, got)
	r.recheck = 0
	r.accepted.failures = 5
	require.Zero(t, r.recheckDelay(), "0 reads at every Update, as tests ask")

	// The count is of failures in a row: a read that answers resets it.
	r = &Repository{recheck: DefaultAcceptedRecheck, log: logr.Discard()}
	answers := []error{errors.New("not the renderer's"), ErrTooLarge, nil}
	r.recoverFrom = func(context.Context) (string, error) {
		err := answers[0]
		answers = answers[1:]
		return "", err
	}
	found := &object.Commit{Hash: plumbing.NewHash("1111111111111111111111111111111111111111")}
	for want := 1; want <= 2; want++ {
		require.Equal(t, found, r.recheckAccepted(t.Context(), found))
		require.Equal(t, want, r.accepted.failures)
	}
	require.Equal(t, 8*time.Minute, r.recheckDelay())
	require.Equal(t, found, r.recheckAccepted(t.Context(), found))
	require.Zero(t, r.accepted.failures)
	require.Equal(t, DefaultAcceptedRecheck, r.recheckDelay())
}
