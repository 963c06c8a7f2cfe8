package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
)

// memo keeps parse results by path and content, so unchanged files are parsed once per Renderer.
// Each render keeps only what it used, so the memo never outgrows the repository. An entry
// keeps the content it was parsed from: a daemon's next tree shares most of its files' bytes
// with the last one, and comparing a slice with itself costs nothing, where hashing every file
// of a large fleet on every render did.
type memo[T any] struct {
	old, cur map[string]memoEntry[T]
}

type memoEntry[T any] struct {
	data []byte
	val  T
}

func sameContent(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b) || bytes.Equal(a, b))
}

func (m *memo[T]) get(p string, data []byte, parse func() T) T {
	if m.has(p, data) {
		return m.cur[p].val
	}
	v := parse()
	m.set(p, data, v)
	return v
}

// has reports whether the memo holds a value for p with this content, keeping it for this pass.
func (m *memo[T]) has(p string, data []byte) bool {
	if m.cur == nil {
		m.cur = make(map[string]memoEntry[T], len(m.old))
	}
	if e, ok := m.cur[p]; ok && sameContent(e.data, data) {
		return true
	}
	if e, ok := m.old[p]; ok && sameContent(e.data, data) {
		m.cur[p] = e
		return true
	}
	return false
}

// set records what get would have parsed from p with this content.
func (m *memo[T]) set(p string, data []byte, v T) {
	if m.cur == nil {
		m.cur = make(map[string]memoEntry[T], len(m.old))
	}
	m.cur[p] = memoEntry[T]{data: data, val: v}
}

// getMany is get for many files, parsing the ones not in the memo in parallel. scope is part of
// the key: what else the parse depends on.
func (m *memo[T]) getMany(scope string, paths []string, files Tree, parse func(p string, data []byte) T) []T {
	if m.cur == nil {
		m.cur = make(map[string]memoEntry[T], len(m.old))
	}
	out := make([]T, len(paths))
	var miss []int
	for i, p := range paths {
		key := scope + "\x00" + p
		if e, ok := m.cur[key]; ok && sameContent(e.data, files[p]) {
			out[i] = e.val
		} else if e, ok := m.old[key]; ok && sameContent(e.data, files[p]) {
			out[i] = e.val
			m.cur[key] = e
		} else {
			miss = append(miss, i)
		}
	}
	parallel(len(miss), func(j int) {
		i := miss[j]
		out[i] = parse(paths[i], files[paths[i]])
	})
	for _, i := range miss {
		m.cur[scope+"\x00"+paths[i]] = memoEntry[T]{data: files[paths[i]], val: out[i]}
	}
	return out
}

// lookup finds a value stored under a key that has no content of its own (built objects, keyed
// by the hash of their inputs).
func (m *memo[T]) lookup(key string) (T, bool) {
	if e, ok := m.cur[key]; ok {
		return e.val, true
	}
	if e, ok := m.old[key]; ok {
		m.store(key, e.val)
		return e.val, true
	}
	var zero T
	return zero, false
}

func (m *memo[T]) store(key string, v T) {
	if m.cur == nil {
		m.cur = make(map[string]memoEntry[T], len(m.old))
	}
	m.cur[key] = memoEntry[T]{val: v}
}

func (m *memo[T]) rotate() { m.old, m.cur = m.cur, nil }

// grown reports whether the memo took in half as much again as it kept at its last rotation.
func (m *memo[T]) grown() bool { return len(m.cur) > len(m.old)/2+1024 }

// parallel runs f(0..n-1) on every CPU. f must only touch its own index.
func parallel(n int, f func(i int)) {
	workers := runtime.GOMAXPROCS(0)
	if workers > n {
		workers = n
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

type parsedConfigFile struct {
	configs []*api.ParsedConfiguration
	errs    api.ErrorList
}

type parsedInventoryFile struct {
	inv  *api.ParsedInventory
	errs api.ErrorList
}

type parsedRecordFile struct {
	rec  *api.ParsedJobRecord
	errs api.ErrorList
}

// objectHead is what the renderer needs to know about a rendered object it reads back.
type objectHead struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		// Pods and Job templates: the nodes they are pinned to.
		Template struct {
			Spec struct {
				Affinity *affinityHead `json:"affinity"`
			} `json:"spec"`
		} `json:"template"`
		Affinity *affinityHead `json:"affinity"`
		// Flux Kustomizations: the folder they apply.
		Path string `json:"path"`
	} `json:"spec"`
	err error
}

type affinityHead struct {
	NodeAffinity struct {
		Required struct {
			Terms []affinityTerm `json:"nodeSelectorTerms"`
		} `json:"requiredDuringSchedulingIgnoredDuringExecution"`
	} `json:"nodeAffinity"`
}

type affinityTerm struct {
	MatchFields []affinityField `json:"matchFields"`
}

type affinityField struct {
	Key    string   `json:"key"`
	Values []string `json:"values"`
}

// nodes are the nodes the object is pinned to, sorted, each once (a node appears in one term per
// term of the Configuration's own affinity).
func (o *objectHead) nodes() []string {
	seen := map[string]bool{}
	if n := o.Metadata.Labels[api.LabelTargetNode]; n != "" {
		seen[n] = true
	}
	o.eachPin(func(values []string) {
		for _, v := range values {
			seen[v] = true
		}
	})
	return sortedKeys(seen)
}

// refusedPin says whether the object was pinned the way renders before one-term-per-node did it:
// one metadata.name requirement listing several nodes, which the API server refuses, so an object
// pinned so was never created in the cluster.
func (o *objectHead) refusedPin() bool {
	refused := false
	o.eachPin(func(values []string) { refused = refused || len(values) > 1 })
	return refused
}

func (o *objectHead) eachPin(fn func(values []string)) {
	for _, a := range []*affinityHead{o.Spec.Affinity, o.Spec.Template.Spec.Affinity} {
		if a == nil {
			continue
		}
		for _, t := range a.NodeAffinity.Required.Terms {
			for _, f := range t.MatchFields {
				if f.Key == "metadata.name" {
					fn(f.Values)
				}
			}
		}
	}
}

// jobHead is the head parseHead reads back from a Job this renderer writes, taken from the Job
// before it is written: the render after the one that started a fleet's Jobs then reads none of
// them again.
func jobHead(m manifest) *objectHead {
	h := &objectHead{Kind: m.Kind}
	h.Metadata.Name, h.Metadata.Namespace = m.Metadata.Name, m.Metadata.Namespace
	h.Metadata.Labels, h.Metadata.Annotations = m.Metadata.Labels, m.Metadata.Annotations
	js, ok := m.Spec.(*batchv1.JobSpec)
	if !ok || js.Template.Spec.Affinity == nil || js.Template.Spec.Affinity.NodeAffinity == nil {
		return h
	}
	a := &affinityHead{}
	if r := js.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
		for _, t := range r.NodeSelectorTerms {
			var term affinityTerm
			for _, f := range t.MatchFields {
				term.MatchFields = append(term.MatchFields, affinityField{Key: f.Key, Values: f.Values})
			}
			a.NodeAffinity.Required.Terms = append(a.NodeAffinity.Required.Terms, term)
		}
	}
	h.Spec.Template.Spec.Affinity = a
	return h
}

// prefetchHeads reads the heads of the previous files among paths that the memo does not hold
// yet, on every CPU: after a daemon starts, every rendered Job is new to it.
func (p *pass) prefetchHeads(paths []string) {
	var miss []string
	for _, f := range paths {
		if !p.r.heads.has(f, p.prev[f]) {
			miss = append(miss, f)
		}
	}
	heads := make([]*objectHead, len(miss))
	parallel(len(miss), func(i int) { heads[i] = parseHead(p.prev[miss[i]]) })
	for i, f := range miss {
		p.r.heads.set(f, p.prev[f], heads[i])
	}
}

// parseHead reads a rendered file as sigs.k8s.io/yaml's Unmarshal would.
func parseHead(data []byte) *objectHead {
	var h objectHead
	js, err := api.YAMLToJSON(data)
	if err == nil {
		err = json.Unmarshal(js, &h)
	}
	if err != nil {
		h.err = err
	}
	return &h
}

// historyEntry is one finished Job kept under history/jobs/<ns>/<cfg>/<instance>/<job>.yaml.
type historyEntry struct {
	path                        string
	namespace, config, instance string
	job                         string
	completion                  time.Time
	record                      *api.JobRecord
}

func historyPath(ns, cfg, inst, job string) string {
	return path.Join("history/jobs", ns, cfg, inst, job+".yaml")
}

func parseHistory(p string, data []byte) (*historyEntry, error) {
	parts := strings.Split(strings.TrimPrefix(p, "history/jobs/"), "/")
	if len(parts) != 4 || !strings.HasSuffix(parts[3], ".yaml") {
		return nil, fmt.Errorf("not a history/jobs/<namespace>/<configuration>/<instance>/<job>.yaml path")
	}
	e := &historyEntry{path: p, namespace: parts[0], config: parts[1], instance: parts[2], job: strings.TrimSuffix(parts[3], ".yaml")}
	docs, err := api.SplitDocuments(p, data)
	if err != nil {
		return e, err
	}
	for _, d := range docs {
		if _, kind := d.TypeMeta(); kind == api.KindJobRecord {
			rec, errs := api.ParseJobRecord("", d)
			if len(errs) > 0 {
				return e, errs
			}
			e.record = rec.JobRecord
			if t := rec.Spec.CompletionTime; t != nil {
				e.completion = t.Time
			}
		}
	}
	if e.record == nil {
		return e, fmt.Errorf("no JobRecord in history file")
	}
	return e, nil
}

// historyFile is a retired Job followed by its record.
func historyFile(job, record []byte) []byte {
	out := make([]byte, 0, len(job)+len(record)+4)
	out = append(out, job...)
	out = append(out, "---\n"...)
	out = append(out, record...)
	return out
}

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
	// Writers are the writer refs' tips the inputs were accepted from, by ref; a later tip must
	// descend from its ref's entry here.
	Writers map[string]string `json:"writers,omitempty"`
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

// lastMetadata is the metadata file last written or read. A daemon reads the one it wrote, once
// to verify its inputs and once to render, and a fleet's names every node's ref.
var lastMetadata struct {
	sync.Mutex
	data []byte
	m    Metadata
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

// IsInput reports whether a path is an input of the renderer.
func IsInput(p string) bool {
	return p == "gitbroker.yaml" || isConfigurationPath(p) || isInventoryPath(p) || isRecordPath(p)
}

func isConfigurationPath(p string) bool { return api.IsConfigurationPath(p) }

func isInventoryPath(p string) bool { return api.IsInventoryPath(p) }

func isRecordPath(p string) bool {
	return strings.HasPrefix(p, "status/jobs/") && strings.HasSuffix(p, ".yaml")
}

func sortedStrings(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
