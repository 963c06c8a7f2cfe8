package render

import (
	"bytes"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
)

// planFromDiff adds the Pod, Service and Flux changes, found by comparing files. Job changes
// were added while applying the lifecycle.
func (p *pass) planFromDiff() {
	newIDs := p.outIndex()
	moved := map[string]int{}
	for _, f := range p.output.diff {
		switch {
		case f == NamespacesFluxFile:
		case strings.HasPrefix(f, NamespacesDir):
			p.planNamespace(f)
		case strings.HasPrefix(f, FolderSourcesDir):
			// Each follows its Kustomization, which the plan lists.
		case strings.HasPrefix(f, RenderedDir+"flux/"):
			p.planFluxKustomization(f)
		default:
			ref, ok := parseObjectPath(f)
			if !ok || ref.kind == "job" {
				continue
			}
			newF, inNew := newIDs[ref.key()]
			oldF, inOld := p.prevID(ref.key())
			if inNew && inOld && newF != oldF {
				if f == newF {
					moved[ref.namespace+"/"+ref.configuration]++
					p.planMovedObject(ref, oldF, newF)
				}
				continue
			}
			p.planObject(f, ref)
		}
	}
	for _, k := range sortedKeys(moved) {
		ns, name, _ := strings.Cut(k, "/")
		shards := 1
		if cfg, ok := p.loaded.configs[k]; ok {
			shards = cfg.Policy.Shards
		}
		c := p.plan.config(ns, name, "")
		c.Notes = append(c.Notes, fmt.Sprintf("%d objects move to other folders (spec.shards is now %d): they move between Flux Kustomizations, which re-apply them under a new owner", moved[k], shards))
	}
}

// planNamespace plans a changed file of the broker namespaces.
func (p *pass) planNamespace(f string) {
	name, ok := strings.CutPrefix(path.Base(f), "namespace-")
	if !ok {
		return
	}
	ch := Change{Kind: "Namespace", Name: strings.TrimSuffix(name, ".yaml")}
	switch {
	case p.prev[f] == nil:
		ch.Action, ch.Reason = Rendered, "applied with the RoleBindings that let Flux apply brokers in it and the recorder keep their Pods' ends (created if it does not exist; never pruned)"
	case p.output.files[f] == nil:
		ch.Action, ch.Reason = Unrendered, "it stays in the cluster (namespaces are never pruned: deleting one deletes everything in it)"
	default:
		ch.Action = Updated
	}
	p.plan.plan.count(ch.Kind, ch.Action)
	p.plan.plan.Namespaces = append(p.plan.plan.Namespaces, ch)
}

// planFluxKustomization plans a changed Flux Kustomization under rendered/flux/.
func (p *pass) planFluxKustomization(f string) {
	ns, cfg := "", ""
	data := p.output.files[f]
	if data == nil {
		data = p.prev[f]
	}
	h := p.head(f, data)
	parts := strings.Split(strings.TrimPrefix(p.ownFolder(h.Spec.Path), RenderedDir), "/")
	if len(parts) >= 2 {
		ns, cfg = parts[0], parts[1]
	}
	action := Updated
	switch {
	case p.prev[f] == nil:
		action = Created
	case p.output.files[f] == nil:
		action = Removed
	}
	p.plan.add(ns, cfg, "", Change{Action: action, Kind: "Kustomization", Name: h.Metadata.Name, Reason: "Flux applies " + h.Spec.Path})
}

// planMovedObject plans an object that moved to another folder: a change only when its content
// changed too.
func (p *pass) planMovedObject(ref objectRef, oldF, newF string) {
	if bytes.Equal(p.prev[oldF], p.output.files[newF]) {
		return
	}
	kind := objectKinds[ref.kind]
	m := p.output.meta[newF]
	p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
	fields := fieldChanges(p.prev[oldF], p.output.files[newF])
	p.plan.add(m.ns, m.cfg, m.inst, Change{Action: replacedVerb(kind), Kind: kind, Name: ref.name, Reason: fieldDiff(fields), Fields: fields})
}

// objectKinds are the kinds of a broker's objects, by the kind in their file name.
var objectKinds = map[string]string{"deployment": "Deployment", "pod": "Pod", "service": "Service",
	"resourceslice": "ResourceSlice", "resourceclaimtemplate": "ResourceClaimTemplate", "deviceclass": "DeviceClass"}

// planObject plans a broker object created, changed or removed in place.
func (p *pass) planObject(f string, ref objectRef) {
	kind := objectKinds[ref.kind]
	switch {
	case p.output.files[f] != nil && p.prev[f] == nil:
		m := p.output.meta[f]
		p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
		p.plan.add(m.ns, m.cfg, m.inst, Change{Action: Created, Kind: kind, Name: ref.name, Reason: p.sliceReason(ref, f, p.output.files[f])})
	case p.output.files[f] != nil:
		m := p.output.meta[f]
		if m.cfg == "" { // carried over from a frozen Configuration: not a change
			return
		}
		p.plan.instance(m.ns, m.cfg, m.inst, m.deviceID, m.nodes)
		fields := fieldChanges(p.prev[f], p.output.files[f])
		reason := fieldDiff(fields)
		if r := p.sliceReason(ref, f, p.output.files[f]); r != "" {
			reason = r + "; " + reason
		}
		p.plan.add(m.ns, m.cfg, m.inst, Change{Action: replacedVerb(kind), Kind: kind, Name: ref.name, Reason: reason, Fields: fields})
	default:
		h := p.head(f, p.prev[f])
		inst := h.Metadata.Labels[api.LabelInstance]
		reason := ""
		if _, ok := p.loaded.configs[ref.namespace+"/"+ref.configuration]; !ok {
			p.plan.config(ref.namespace, ref.configuration, "deleted")
			reason = "its Configuration was deleted"
		} else if p.movedBroker(ref.key()) {
			reason = p.lostReason(h)
		} else if nf := p.upgradedPod(ref.key()); nf != "" {
			r, _ := parseObjectPath(nf)
			reason = "replaced by Deployment " + r.name + ": Pod brokers are Deployments now, which Kubernetes heals and rolls"
		} else if inst != "" && p.instance(ref.namespace+"/"+ref.configuration+"/"+inst) == nil {
			reason = "its device is no longer reported"
		}
		if inst != "" {
			p.plan.instance(ref.namespace, ref.configuration, inst, h.Metadata.Annotations[api.AnnotationDeviceID], nil)
		}
		if r := p.sliceReason(ref, f, p.prev[f]); r != "" && reason != "" {
			reason = r + "; " + reason
		} else if r != "" {
			reason = r
		}
		p.plan.add(ref.namespace, ref.configuration, inst, Change{Action: Removed, Kind: kind, Name: ref.name, Reason: reason})
	}
}

// sliceReason says, for a ResourceSlice, which nodes its devices are on: the plan's view of a
// change per node. "" for any other object. A slice this pass built says it without being read.
func (p *pass) sliceReason(ref objectRef, f string, data []byte) string {
	if ref.kind != "resourceslice" {
		return ""
	}
	if r, ok := p.output.sliceReasons[f]; ok && bytes.Equal(data, p.output.files[f]) {
		return sliceText(r.devices, r.node, r.shared)
	}
	var s struct {
		Spec struct {
			NodeName     string `json:"nodeName"`
			NodeSelector struct {
				Terms []struct {
					Expressions []struct {
						Values []string `json:"values"`
					} `json:"matchExpressions"`
				} `json:"nodeSelectorTerms"`
			} `json:"nodeSelector"`
			Devices []struct{} `json:"devices"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &s); err != nil {
		return ""
	}
	var nodes []string
	for _, t := range s.Spec.NodeSelector.Terms {
		for _, e := range t.Expressions {
			nodes = append(nodes, e.Values...)
		}
	}
	return sliceText(len(s.Spec.Devices), s.Spec.NodeName, nodes)
}

// sliceNodes is what sliceReason says of a ResourceSlice: its devices, and its node or the nodes
// that share it.
type sliceNodes struct {
	devices int
	node    string
	shared  []string
}

// sliceText is sliceReason's text: "1 device on node edge-a", "2 devices shared by nodes edge-a,
// edge-b".
func sliceText(devices int, node string, shared []string) string {
	text := fmt.Sprintf("%d devices", devices)
	if devices == 1 {
		text = "1 device"
	}
	if node != "" {
		return text + " on node " + node
	}
	return text + " shared by nodes " + strings.Join(shared, ", ")
}

// replacedVerb is what Kubernetes does with a changed object: a Deployment rolls out its new
// Pod (the old one gone first), a Service is updated in place.
func replacedVerb(kind string) string {
	if kind == "Deployment" {
		return RolledOut
	}
	return Updated
}
