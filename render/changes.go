package render

import (
	"bytes"
	"fmt"
	"path"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// planFromDiff adds the Pod, Service and Flux changes, found by comparing files. Job changes
// were added while applying the lifecycle.
func (p *pass) planFromDiff() {
	newIDs := p.outIndex()
	moved := map[string]int{}
	for _, f := range p.diff {
		if f == NamespacesFluxFile {
			continue
		}
		if strings.HasPrefix(f, NamespacesDir) {
			name, ok := strings.CutPrefix(path.Base(f), "namespace-")
			if !ok {
				continue
			}
			ch := Change{Kind: "Namespace", Name: strings.TrimSuffix(name, ".yaml")}
			switch {
			case p.prev[f] == nil:
				ch.Action, ch.Reason = Created, "with the RoleBindings that let Flux apply brokers in it and the recorder keep their Pods' ends; never pruned"
			case p.out[f] == nil:
				ch.Action, ch.Reason = Removed, "no longer rendered; it stays in the cluster (namespaces are never pruned: deleting one deletes everything in it)"
			default:
				ch.Action = Updated
			}
			p.plan.plan.Namespaces = append(p.plan.plan.Namespaces, ch)
			continue
		}
		if strings.HasPrefix(f, FolderSourcesDir) {
			// Each follows its Kustomization, which the plan lists.
			continue
		}
		if strings.HasPrefix(f, RenderedDir+"flux/") {
			ns, cfg := "", ""
			data := p.out[f]
			if data == nil {
				data = p.prev[f]
			}
			h := p.head(f, data)
			parts := strings.Split(strings.TrimPrefix(path.Clean(h.Spec.Path), RenderedDir), "/")
			if len(parts) >= 2 {
				ns, cfg = parts[0], parts[1]
			}
			action := Updated
			switch {
			case p.prev[f] == nil:
				action = Created
			case p.out[f] == nil:
				action = Removed
			}
			p.plan.add(ns, cfg, "", Change{Action: action, Kind: "Kustomization", Name: h.Metadata.Name, Reason: "Flux applies " + h.Spec.Path})
			continue
		}
		ref, ok := parseObjectPath(f)
		if !ok || ref.kind == "job" {
			continue
		}
		kind := map[string]string{"pod": "Pod", "service": "Service"}[ref.kind]
		newF, inNew := newIDs[ref.key()]
		oldF, inOld := p.prevID(ref.key())
		if inNew && inOld && newF != oldF {
			if f == newF {
				moved[ref.namespace+"/"+ref.configuration]++
			}
			if !bytes.Equal(p.prev[oldF], p.out[newF]) && f == newF {
				m := p.meta[f]
				p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
				p.plan.add(m.ns, m.cfg, m.inst, Change{Action: replacedVerb(kind), Kind: kind, Name: ref.name, Reason: fieldDiff(p.prev[oldF], p.out[newF])})
			}
			continue
		}
		switch {
		case p.out[f] != nil && p.prev[f] == nil:
			m := p.meta[f]
			p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
			p.plan.add(m.ns, m.cfg, m.inst, Change{Action: startedVerb(kind), Kind: kind, Name: ref.name})
		case p.out[f] != nil:
			m := p.meta[f]
			if m.cfg == "" { // carried over from a frozen Configuration: not a change
				continue
			}
			p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
			p.plan.add(m.ns, m.cfg, m.inst, Change{Action: replacedVerb(kind), Kind: kind, Name: ref.name, Reason: fieldDiff(p.prev[f], p.out[f])})
		default:
			h := p.head(f, p.prev[f])
			inst := h.Metadata.Labels[api.LabelInstance]
			reason := ""
			if _, ok := p.configs[ref.namespace+"/"+ref.configuration]; !ok {
				p.plan.config(ref.namespace, ref.configuration, "deleted")
				reason = "its Configuration was deleted"
			} else if inst != "" && p.instance(ref.namespace+"/"+ref.configuration+"/"+inst) == nil {
				reason = "its device is no longer reported"
			}
			if inst != "" {
				p.plan.instance(ref.namespace, ref.configuration, inst, h.Metadata.Annotations[api.AnnotationDeviceID], nil)
			}
			p.plan.add(ref.namespace, ref.configuration, inst, Change{Action: Removed, Kind: kind, Name: ref.name, Reason: reason})
		}
	}
	for _, k := range sortedKeys(moved) {
		ns, name, _ := strings.Cut(k, "/")
		shards := 1
		if cfg, ok := p.configs[k]; ok {
			shards = cfg.Policy.Shards
		}
		c := p.plan.config(ns, name, "")
		c.Notes = append(c.Notes, fmt.Sprintf("%d objects move to other folders (spec.shards is now %d): they move between Flux Kustomizations, which re-apply them under a new owner", moved[k], shards))
	}
}

func startedVerb(kind string) string {
	if kind == "Pod" {
		return Started
	}
	return Created
}

func replacedVerb(kind string) string {
	if kind == "Pod" {
		return Replaced
	}
	return Updated
}
