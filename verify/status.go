package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/trust"
)

// recorderRef is one recorder's ref: the recorder of a repository of one cluster
// (StatusBranch, status/<kind>/...), or of one cluster of several (gitbroker.yaml
// spec.clusters: gitbroker/status/<cluster>, status/<cluster>/<kind>/..., principal
// recorder:<cluster>).
type recorderRef struct {
	ref, principal, cluster string
}

func oneRecorder() recorderRef {
	return recorderRef{ref: StatusBranch, principal: trust.PrincipalRecorder}
}

func clusterRecorder(cluster string) recorderRef {
	return recorderRef{ref: api.ClusterStatusBranch(cluster), principal: trust.RecorderPrincipal(cluster), cluster: cluster}
}

// holds reports whether p is a path this recorder's ref may hold: its own records.
func (r recorderRef) holds(p string) bool {
	if r.cluster == "" {
		return api.IsStatusPath(p)
	}
	c, _, ok := api.SplitClusterStatusPath(p)
	return ok && c == r.cluster
}

// layouts says, for messages, what the ref may hold.
func (r recorderRef) layouts() string {
	if r.cluster == "" {
		return api.StatusLayouts()
	}
	return "status/" + r.cluster + "/ and, under it, " + api.StatusLayouts() + " as one cluster's recorder writes them"
}

// clusterStatus takes each cluster's records from its own recorder's ref, for the clusters the
// people's branch declares (gitbroker.yaml spec.clusters): a ref of a cluster it does not
// declare is not read, and a recorder's records of another cluster are refused with its ref.
func (w *writers) clusterStatus(ctx context.Context, refs refsRead) error {
	settings, errs := api.ParseSettings(api.SettingsPath, w.in.Inputs[api.SettingsPath])
	if len(errs) > 0 {
		// Invalid settings render nothing: the records the last render took are kept.
		for p, b := range w.prev {
			if _, _, ok := api.SplitClusterStatusPath(p); ok {
				w.in.put(p, b)
			}
		}
		for ref, tip := range w.meta.Writers {
			if strings.HasPrefix(ref, StatusBranch+"/") {
				w.in.Writers[ref] = tip
			}
		}
		return nil
	}
	for _, c := range settings.Clusters.List {
		r := clusterRecorder(c.Name)
		if err := w.status(ctx, r, refs.main[r.ref], refs.oversized[r.ref]); err != nil {
			return err
		}
	}
	return nil
}

// status takes the JobRecords, NodeLoss and RolloutRecords from a recorder's ref.
func (w *writers) status(ctx context.Context, r recorderRef, snap gitsync.Snapshot, oversized error) error {
	s, m, meta, prev, now, in := w.s, w.trust, w.meta, w.prev, w.now, w.in
	keep := func() {
		for p, b := range prev {
			if r.holds(p) {
				in.put(p, b)
			}
		}
		if t := meta.Writers[r.ref]; t != "" {
			in.Writers[r.ref] = t
		}
	}
	if oversized != nil {
		in.reject(Rejection{Writer: r.principal, Ref: r.ref,
			Reason: fmt.Sprintf("too large to read (%v); the records verified before are kept", oversized)})
		keep()
		return nil
	}
	if snap == nil {
		if m.allowed != nil {
			keep()
		}
		return nil
	}
	why := ""
	// What the ref holds is checked before any of it is read.
	paths, other, err := gitsync.Paths(snap)
	if err != nil {
		why = fmt.Sprintf("cannot be read (%v)", err)
	}
	if len(other) > 0 && why == "" {
		slices.Sort(other)
		why = fmt.Sprintf("holds %s, which is not a file (a symbolic link or a submodule); the recorder's ref may hold only %s", other[0], r.layouts())
	}
	for _, p := range paths {
		if !r.holds(p) && why == "" {
			why = fmt.Sprintf("holds %s; the recorder's ref may hold only %s", p, r.layouts())
		}
	}
	var files map[string][]byte
	if why == "" {
		if files, err = snap.Files(""); err != nil {
			why = fmt.Sprintf("cannot be read (%v)", err)
		}
	}
	if why == "" && m.allowed != nil {
		if why, err = signedSince(ctx, s.Main, s.Signatures, m.allowed, r.ref, r.principal, meta.Writers[r.ref], snap.Commit(), now); err != nil {
			return err
		}
	}
	if why != "" {
		in.reject(Rejection{Writer: r.principal, Ref: r.ref, Commit: snap.Commit(),
			Reason: fmt.Sprintf("commit %s %s; the records verified before are kept", short(snap.Commit()), why)})
		keep()
		return nil
	}
	for p, b := range files {
		in.put(p, b)
	}
	in.Writers[r.ref] = snap.Commit()
	return nil
}
