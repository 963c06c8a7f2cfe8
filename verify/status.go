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

// status takes the JobRecords, NodeLoss and RolloutRecords from the recorder's ref.
func (w *writers) status(ctx context.Context, snap gitsync.Snapshot, oversized error) error {
	s, m, meta, prev, now, in := w.s, w.trust, w.meta, w.prev, w.now, w.in
	keep := func() {
		for p, b := range prev {
			if strings.HasPrefix(p, "status/") {
				in.put(p, b)
			}
		}
		if t := meta.Writers[StatusBranch]; t != "" {
			in.Writers[StatusBranch] = t
		}
	}
	if oversized != nil {
		in.reject(Rejection{Writer: WriterRecorder, Ref: StatusBranch,
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
		why = fmt.Sprintf("holds %s, which is not a file (a symbolic link or a submodule); the recorder's ref may hold only %s", other[0], api.StatusLayouts())
	}
	for _, p := range paths {
		if !api.IsStatusPath(p) && why == "" {
			why = fmt.Sprintf("holds %s; the recorder's ref may hold only %s", p, api.StatusLayouts())
		}
	}
	var files map[string][]byte
	if why == "" {
		if files, err = snap.Files(""); err != nil {
			why = fmt.Sprintf("cannot be read (%v)", err)
		}
	}
	if why == "" && m.allowed != nil {
		if why, err = signedSince(ctx, s.Main, s.Signatures, m.allowed, StatusBranch, trust.PrincipalRecorder, meta.Writers[StatusBranch], snap.Commit(), now); err != nil {
			return err
		}
	}
	if why != "" {
		in.reject(Rejection{Writer: WriterRecorder, Ref: StatusBranch, Commit: snap.Commit(),
			Reason: fmt.Sprintf("commit %s %s; the records verified before are kept", short(snap.Commit()), why)})
		keep()
		return nil
	}
	for p, b := range files {
		in.put(p, b)
	}
	in.Writers[StatusBranch] = snap.Commit()
	return nil
}
