package verify

import "github.com/gitbroker/gitbroker/gitsync"

// treeSnapshot is a Snapshot of the people's files among prev, held in memory: the source
// inputs the renderer mirrored.
func treeSnapshot(commit string, prev map[string][]byte) gitsync.Snapshot {
	files := map[string][]byte{}
	for p, b := range prev {
		if IsPeoplePath(p) {
			files[p] = b
		}
	}
	return gitsync.MemorySnapshot(commit, files)
}

func modeOfTree(prev map[string][]byte) mode { return modeAt(treeSnapshot("", prev)) }
