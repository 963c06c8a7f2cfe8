package gitsync

import (
	"context"
	"fmt"
	"testing"
	"time"

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
