package render

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// Metadata is the file rendered/.gitbroker-render.yaml.
type Metadata struct {
	APIVersion   string `json:"apiVersion"`
	Kind         string `json:"kind"`
	SourceCommit string `json:"sourceCommit,omitempty"`
	// InputsDigest is the digest of the inputs of the last render that changed rendered/.
	InputsDigest string `json:"inputsDigest"`
	// ConfigurationFiles maps each Configuration file to the Configurations it defined, so an
	// invalid file can keep exactly what it rendered before.
	ConfigurationFiles map[string][]string `json:"configurationFiles,omitempty"`
	// Discovery digests what each Configuration asks the agents to discover, so the next plan
	// can say a change to it replaces brokers once the agents rediscover.
	Discovery map[string]string `json:"discovery,omitempty"`
	// Writers are the writer refs' tips the inputs were accepted from, by ref; a later tip must
	// descend from its ref's entry here.
	Writers map[string]string `json:"writers,omitempty"`
	// InstanceDigests lists, by Configuration, the devices whose instances do not use Akri's
	// 3-byte digest (a digest collision): names are sticky, so the next render and the agents
	// name them the same.
	InstanceDigests map[string][]InstanceDigest `json:"instanceDigests,omitempty"`
}

// WriterTip is api.WriterTip: the tip the metadata (or an accepted-tips shard) records for one
// writer ref, found without parsing the file.
func WriterTip(data []byte, ref string) string { return api.WriterTip(data, ref) }

// lastMetadata is the metadata file last written or read. A daemon reads the one it wrote, once
// to verify its inputs and once to render, and a fleet's names every node's ref.
var lastMetadata struct {
	sync.Mutex
	data []byte
	m    Metadata
}

// ParseMetadata reads rendered/.gitbroker-render.yaml; a missing or unreadable file gives the
// zero Metadata. Its maps may be shared with other callers: they must not be changed.
func ParseMetadata(data []byte) Metadata {
	lastMetadata.Lock()
	defer lastMetadata.Unlock()
	if data == nil || !sameContent(lastMetadata.data, data) {
		lastMetadata.data, lastMetadata.m = data, parseMetadata(data)
	}
	return lastMetadata.m
}

// wroteMetadata records the metadata file a render wrote, as parsing it gives it back (empty
// maps are omitted, so they read back as nil).
func wroteMetadata(data []byte, m Metadata) {
	if len(m.ConfigurationFiles) == 0 {
		m.ConfigurationFiles = nil
	}
	if len(m.Writers) == 0 {
		m.Writers = nil
	}
	if len(m.Discovery) == 0 {
		m.Discovery = nil
	}
	if len(m.InstanceDigests) == 0 {
		m.InstanceDigests = nil
	}
	lastMetadata.Lock()
	defer lastMetadata.Unlock()
	lastMetadata.data, lastMetadata.m = data, m
}

func parseMetadata(data []byte) Metadata {
	var m Metadata
	_ = yaml.Unmarshal(data, &m)
	return m
}

// InputsDigest digests the inputs of a render: gitbroker.yaml, configurations/, inventory/ and
// status/jobs/.
func InputsDigest(files Tree) string {
	// Only the inputs are sorted: a rendered fleet's tree holds ten times as many other files.
	var inputs []string
	for p := range files {
		if IsInput(p) {
			inputs = append(inputs, p)
		}
	}
	sort.Strings(inputs)
	return digestOf(files, inputs)
}

// digestOf is InputsDigest of the files at inputs, the sorted input paths.
func digestOf(files Tree, inputs []string) string {
	h := sha256.New()
	var head []byte
	for _, p := range inputs {
		// What fmt.Fprintf(h, "%s\x00%d\x00", p, len) wrote, without its formatting.
		head = append(append(head[:0], p...), 0)
		head = append(strconv.AppendInt(head, int64(len(files[p])), 10), 0)
		h.Write(head)
		h.Write(files[p])
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil))
}

// writeMetadata writes rendered/.gitbroker-render.yaml only when something else in rendered/
// changed (or which file defines which Configuration changed), so a render from the renderer's
// own commit, or from a commit that changes no output, commits nothing.
func (p *pass) writeMetadata() {
	if len(p.output.files) == 0 && len(p.prev) == 0 {
		return
	}
	// The one pass over every file that compares the output with the previous one; a scoped
	// pass compared its Configurations' files only (mergeScope).
	if !p.output.diffed {
		p.output.diff, p.output.diffed = Diff(p.prev, p.output.files), true
	}
	defer p.diffMetadata()
	prevData, hadPrev := p.prev[MetadataPath]
	sameFiles := fmt.Sprint(p.loaded.prevMeta.ConfigurationFiles) == fmt.Sprint(p.loaded.configFiles) ||
		(len(p.loaded.prevMeta.ConfigurationFiles) == 0 && len(p.loaded.configFiles) == 0)
	// A render without writers (a work tree, a check of a clone of the rendered branch) keeps
	// the tips the last verified render recorded.
	writers := p.req.Writers
	if writers == nil {
		writers = p.loaded.prevMeta.Writers
	}
	sameWriters := maps.Equal(p.loaded.prevMeta.Writers, writers)
	if p.r.cluster == nil {
		// One cluster's of several: the repository's shards are written once, from every
		// cluster's (clusters.go).
		p.writeAccepted(writers)
	}
	p.writeShares(p.shares())
	sameDiscovery := maps.Equal(p.loaded.prevMeta.Discovery, p.loaded.discovery)
	digests := p.instanceDigests()
	sameDigests := fmt.Sprint(p.loaded.prevMeta.InstanceDigests) == fmt.Sprint(digests) || len(p.loaded.prevMeta.InstanceDigests) == 0 && len(digests) == 0
	others := slices.DeleteFunc(slices.Clone(p.output.diff), func(f string) bool { return f == MetadataPath || strings.HasPrefix(f, api.AcceptedDir) })
	if hadPrev && sameFiles && sameWriters && sameDiscovery && sameDigests && len(others) == 0 {
		p.output.files[MetadataPath] = prevData
		return
	}
	m := Metadata{
		APIVersion:         api.APIVersion,
		Kind:               "RenderMetadata",
		SourceCommit:       p.req.SourceCommit,
		InputsDigest:       p.output.digest,
		ConfigurationFiles: p.loaded.configFiles,
		Discovery:          p.loaded.discovery,
		Writers:            writers,
		InstanceDigests:    digests,
	}
	p.output.files[MetadataPath] = yamlcodec.Marshal(m)
	wroteMetadata(p.output.files[MetadataPath], m)
}

// diffMetadata brings the diff up to date with the metadata file just written.
func (p *pass) diffMetadata() { p.rediff(MetadataPath) }

// rediff brings the diff up to date with the files at paths, just written or deleted.
func (p *pass) rediff(paths ...string) {
	for _, f := range paths {
		i, listed := slices.BinarySearch(p.output.diff, f)
		before, had := p.prev[f]
		after, has := p.output.files[f]
		switch changed := had != has || !bytes.Equal(before, after); {
		case changed && !listed:
			p.output.diff = slices.Insert(p.output.diff, i, f)
		case !changed && listed:
			p.output.diff = slices.Delete(p.output.diff, i, i+1)
		}
	}
}

// AcceptedTips is a shard of the accepted tips (api.AcceptedFile): the tips of the writer refs
// in that shard as the render metadata records them (Metadata.Writers), which a restarted
// writer reads with WriterTip from the shard's branch.
type AcceptedTips struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Writers    map[string]string `json:"writers"`
}

// writeAccepted writes the accepted-tips shards of writers: a shard whose writers are those of
// the last render keeps its file, any other is written again, and a shard with no writer has
// no file. The diff is brought up to date with them.
func (p *pass) writeAccepted(writers map[string]string) {
	p.rediff(writeAcceptedFiles(p.output.files, p.prev, p.loaded.prevMeta.Writers, writers)...)
}

// writeAcceptedFiles writes into out the accepted-tips shards of writers, given the previous
// output prev and the writers its metadata recorded, and returns every shard's path.
func writeAcceptedFiles(out, prev Tree, prevWriters, writers map[string]string) []string {
	changed := map[string]bool{}
	for ref, tip := range writers {
		if old, ok := prevWriters[ref]; !ok || old != tip {
			changed[api.AcceptedShard(ref)] = true
		}
	}
	for ref := range prevWriters {
		if _, ok := writers[ref]; !ok {
			changed[api.AcceptedShard(ref)] = true
		}
	}
	paths := make([]string, 0, api.AcceptedShards)
	for i := range api.AcceptedShards {
		shard := api.AcceptedShardName(i)
		f := api.AcceptedFile(shard)
		paths = append(paths, f)
		if old, ok := prev[f]; ok && !changed[shard] {
			out[f] = old
			continue
		}
		changed[shard] = true // written anew (or a file the last render lacked)
		delete(out, f)
	}
	shards := map[string]map[string]string{}
	for ref, tip := range writers {
		if shard := api.AcceptedShard(ref); changed[shard] {
			if shards[shard] == nil {
				shards[shard] = map[string]string{}
			}
			shards[shard][ref] = tip
		}
	}
	for shard, tips := range shards {
		out[api.AcceptedFile(shard)] = yamlcodec.Marshal(AcceptedTips{APIVersion: api.APIVersion, Kind: "AcceptedTips", Writers: tips})
	}
	return paths
}
