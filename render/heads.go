package render

import (
	"encoding/json"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

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
	js, err := yamlcodec.ToJSON(data)
	if err == nil {
		err = json.Unmarshal(js, &h)
	}
	if err != nil {
		h.err = err
	}
	return &h
}
