package recorder

import (
	"context"
	"strings"
	"time"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
)

// ForCluster is store as the recorder of one cluster of several (gitbroker.yaml spec.clusters)
// writes it: the records a recorder of one cluster keeps at status/<kind>/... are at
// status/<cluster>/<kind>/... (api.ClusterStatusPath), on the cluster's own ref, so the renderer
// takes each cluster's records from that cluster's recorder only. The recorder itself reads and
// writes the paths it always did.
func ForCluster(store gitsync.Store, cluster string) gitsync.Store {
	c := clusterStore{store: store, cluster: cluster}
	if _, ok := store.(restorer); ok {
		return restoringClusterStore{c}
	}
	return c
}

type clusterStore struct {
	store   gitsync.Store
	cluster string
}

// restoringClusterStore is a clusterStore over a Store that can put its ref back.
type restoringClusterStore struct{ clusterStore }

func (s restoringClusterStore) Restore(ctx context.Context) (gitsync.Result, error) {
	return s.store.(restorer).Restore(ctx)
}

func (s clusterStore) outer(p string) string { return api.ClusterStatusPath(s.cluster, p) }

// inner is the path a recorder of one cluster has for p, and whether p is this cluster's.
func (s clusterStore) inner(p string) (string, bool) {
	c, in, ok := api.SplitClusterStatusPath(p)
	if !ok || c != s.cluster {
		// A folder (status/<cluster>/jobs/) is not a record's path: map it by its prefix.
		rest, ok := strings.CutPrefix(p, "status/"+s.cluster+"/")
		return "status/" + rest, ok
	}
	return in, true
}

func (s clusterStore) Snapshot(ctx context.Context) (gitsync.Snapshot, error) {
	snap, err := s.store.Snapshot(ctx)
	if err != nil || snap == nil {
		return snap, err
	}
	return clusterSnapshot{snap, s}, nil
}

func (s clusterStore) Update(ctx context.Context, fn gitsync.UpdateFunc) (gitsync.Result, error) {
	return s.store.Update(ctx, func(ctx context.Context, head gitsync.Snapshot) (*gitsync.Change, error) {
		ch, err := fn(ctx, clusterSnapshot{head, s})
		if err != nil || ch == nil {
			return ch, err
		}
		out := *ch
		out.Owned = make([]string, len(ch.Owned))
		for i, p := range ch.Owned {
			out.Owned[i] = s.outer(p)
		}
		out.Files = s.outerFiles(ch.Files)
		out.Edits = s.outerFiles(ch.Edits)
		return &out, nil
	})
}

func (s clusterStore) outerFiles(files map[string][]byte) map[string][]byte {
	if files == nil {
		return nil
	}
	out := make(map[string][]byte, len(files))
	for p, b := range files {
		out[s.outer(p)] = b
	}
	return out
}

// clusterSnapshot is a head of the cluster's ref as a recorder of one cluster reads it.
type clusterSnapshot struct {
	snap gitsync.Snapshot
	s    clusterStore
}

func (c clusterSnapshot) Commit() string        { return c.snap.Commit() }
func (c clusterSnapshot) CommitTime() time.Time { return c.snap.CommitTime() }

func (c clusterSnapshot) ReadFile(name string) ([]byte, error) {
	return c.snap.ReadFile(c.s.outer(name))
}

func (c clusterSnapshot) Files(dir string) (map[string][]byte, error) {
	outerDir := ""
	if dir != "" {
		outerDir = c.s.outer(dir)
	}
	files, err := c.snap.Files(outerDir)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(files))
	for p, b := range files {
		if in, ok := c.s.inner(p); ok {
			out[in] = b
		}
	}
	return out, nil
}
