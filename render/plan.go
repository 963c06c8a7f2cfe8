package render

import (
	"fmt"
	"sort"
	"strings"
)

// Actions a plan reports.
const (
	Started = "started"
	Removed = "removed"
	Held    = "held"
	Retired = "retired"
	Kept    = "kept"
	Created = "created"
	Updated = "updated"
	// RolledOut is a changed broker Deployment: Kubernetes replaces its Pod, the old one first.
	RolledOut = "rolled out"
	// Rendered and Unrendered are for broker namespaces: a rendered Namespace may exist
	// already (Flux creates it only if missing), and one no longer rendered stays.
	Rendered   = "rendered"
	Unrendered = "no longer rendered"
)

// Plan is what a render changes, per Configuration and instance.
type Plan struct {
	Configurations []*ConfigurationPlan `json:"configurations"`
	// Namespaces are the broker namespaces rendered or no longer rendered.
	Namespaces []Change `json:"namespaces,omitempty"`
	// Warnings are true statements that need no action to render: collisions, shard moves,
	// folders too large for fast kustomize builds, devices of unknown Configurations.
	Warnings []string `json:"warnings,omitempty"`
	// Errors are the invalid inputs whose previous output was kept.
	Errors []Problem `json:"errors,omitempty"`
	// Refused explains why a safety rule refused the render; nothing was written.
	Refused string `json:"refused,omitempty"`
	// Trust is the guarantee the inputs were verified under; empty for a work tree.
	Trust string `json:"trust,omitempty"`
	// Untrusted are the inputs refused for who wrote them; each froze only its writer's part.
	Untrusted []Problem `json:"untrusted,omitempty"`
	// Clusters are, with spec.clusters, the clusters whose part changes, in the order
	// gitbroker.yaml lists them.
	Clusters []string `json:"clusters,omitempty"`
	// Rings are, with spec.clusterRollout, the rings changes roll out in, first first.
	Rings   []PlanRing `json:"rings,omitempty"`
	Summary Summary    `json:"summary"`
}

// PlanRing is one ring of a rollout across clusters.
type PlanRing struct {
	Name     string   `json:"name"`
	Clusters []string `json:"clusters"`
}

// ConfigurationPlan is one Configuration's part of the plan.
type ConfigurationPlan struct {
	// Cluster is the cluster of spec.clusters this part renders for; "" without clusters.
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Broker is "Pod" (Pod brokers, rendered as Deployments), "Job", "none", "deleted" or
	// "invalid".
	Broker    string          `json:"broker"`
	Notes     []string        `json:"notes,omitempty"`
	Changes   []Change        `json:"changes,omitempty"`
	Instances []*InstancePlan `json:"instances,omitempty"`
}

// InstancePlan is one instance's part of the plan.
type InstancePlan struct {
	Name     string   `json:"name"`
	DeviceID string   `json:"deviceID,omitempty"`
	Nodes    []string `json:"nodes,omitempty"`
	Changes  []Change `json:"changes"`
}

// Change is one object started, created, rolled out, updated, removed, held, retired or kept.
type Change struct {
	// Cluster is, for a namespace's change, the cluster of spec.clusters it is in.
	Cluster string `json:"cluster,omitempty"`
	Action  string `json:"action"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Reason  string `json:"reason,omitempty"`
	// History is where a retired Job went: its history/ entry, with its record.
	History string `json:"history,omitempty"`
	// Fields are the fields of a rolled out or updated object that changed, as Reason says them.
	Fields []FieldChange `json:"fields,omitempty"`
}

// Summary counts the changes.
type Summary struct {
	DeploymentsCreated   int `json:"deploymentsCreated"`
	DeploymentsRolledOut int `json:"deploymentsRolledOut"`
	DeploymentsRemoved   int `json:"deploymentsRemoved"`
	DeploymentsHeld      int `json:"deploymentsHeld"`
	// PodsRemoved are bare broker Pods of renders before Deployments, removed by the upgrade.
	PodsRemoved           int `json:"podsRemoved"`
	JobsStarted           int `json:"jobsStarted"`
	JobsHeld              int `json:"jobsHeld"`
	JobsRetired           int `json:"jobsRetired"`
	JobsKept              int `json:"jobsKept"`
	ServicesCreated       int `json:"servicesCreated"`
	ServicesUpdated       int `json:"servicesUpdated"`
	ServicesRemove        int `json:"servicesRemoved"`
	FluxCreated           int `json:"fluxKustomizationsCreated"`
	FluxUpdated           int `json:"fluxKustomizationsUpdated"`
	FluxRemoved           int `json:"fluxKustomizationsRemoved"`
	ConfigurationsAdded   int `json:"configurationsAdded"`
	ConfigurationsRemoved int `json:"configurationsRemoved"`
	NamespacesRendered    int `json:"namespacesRendered"`
	NamespacesUnrendered  int `json:"namespacesNoLongerRendered"`
	// DRA mode's objects (gitbroker.yaml spec.deviceAllocation: dra).
	ResourceSlicesCreated         int `json:"resourceSlicesCreated,omitempty"`
	ResourceSlicesUpdated         int `json:"resourceSlicesUpdated,omitempty"`
	ResourceSlicesRemoved         int `json:"resourceSlicesRemoved,omitempty"`
	ResourceClaimTemplatesChanged int `json:"resourceClaimTemplatesChanged,omitempty"`
	DeviceClassesChanged          int `json:"deviceClassesChanged,omitempty"`
}

// Empty reports whether the plan changes nothing.
func (s Summary) Empty() bool {
	return s.DeploymentsCreated+s.DeploymentsRolledOut+s.DeploymentsRemoved+s.PodsRemoved+s.JobsStarted+s.JobsRetired+
		s.ServicesCreated+s.ServicesUpdated+s.ServicesRemove+s.FluxCreated+s.FluxUpdated+s.FluxRemoved+
		s.ConfigurationsAdded+s.ConfigurationsRemoved+s.NamespacesRendered+s.NamespacesUnrendered+
		s.ResourceSlicesCreated+s.ResourceSlicesUpdated+s.ResourceSlicesRemoved+s.ResourceClaimTemplatesChanged+s.DeviceClassesChanged == 0
}

func (p *Plan) count(kind, action string) {
	s := &p.Summary
	switch kind + " " + action {
	case "Deployment " + Created:
		s.DeploymentsCreated++
	case "Deployment " + RolledOut:
		s.DeploymentsRolledOut++
	case "Deployment " + Removed:
		s.DeploymentsRemoved++
	case "Deployment " + Held:
		s.DeploymentsHeld++
	case "Pod " + Removed:
		s.PodsRemoved++
	case "Job " + Started:
		s.JobsStarted++
	case "Job " + Held:
		s.JobsHeld++
	case "Job " + Retired:
		s.JobsRetired++
	case "Job " + Kept:
		s.JobsKept++
	case "Service " + Created:
		s.ServicesCreated++
	case "Service " + Updated:
		s.ServicesUpdated++
	case "Service " + Removed:
		s.ServicesRemove++
	case "Kustomization " + Created:
		s.FluxCreated++
	case "Kustomization " + Updated:
		s.FluxUpdated++
	case "Kustomization " + Removed:
		s.FluxRemoved++
	case "Namespace " + Rendered:
		s.NamespacesRendered++
	case "Namespace " + Unrendered:
		s.NamespacesUnrendered++
	case "Configuration " + Created:
		s.ConfigurationsAdded++
	case "Configuration " + Removed:
		s.ConfigurationsRemoved++
	case "ResourceSlice " + Created:
		s.ResourceSlicesCreated++
	case "ResourceSlice " + Updated:
		s.ResourceSlicesUpdated++
	case "ResourceSlice " + Removed:
		s.ResourceSlicesRemoved++
	case "ResourceClaimTemplate " + Created, "ResourceClaimTemplate " + Updated, "ResourceClaimTemplate " + Removed:
		s.ResourceClaimTemplatesChanged++
	case "DeviceClass " + Created, "DeviceClass " + Updated, "DeviceClass " + Removed:
		s.DeviceClassesChanged++
	}
}

// planBuilder collects changes in any order and sorts them once.
type planBuilder struct {
	plan    Plan
	configs map[string]*ConfigurationPlan
	insts   map[string]*InstancePlan
}

func newPlanBuilder() *planBuilder {
	return &planBuilder{configs: map[string]*ConfigurationPlan{}, insts: map[string]*InstancePlan{}}
}

func (b *planBuilder) config(ns, name, broker string) *ConfigurationPlan {
	k := ns + "/" + name
	c := b.configs[k]
	if c == nil {
		c = &ConfigurationPlan{Namespace: ns, Name: name, Broker: broker}
		b.configs[k] = c
	}
	if c.Broker == "" {
		c.Broker = broker
	}
	return c
}

func (b *planBuilder) instance(ns, cfg, name, deviceID string, nodes []string) *InstancePlan {
	k := ns + "/" + cfg + "/" + name
	ip := b.insts[k]
	if ip == nil {
		ip = &InstancePlan{Name: name}
		b.insts[k] = ip
		c := b.config(ns, cfg, "")
		c.Instances = append(c.Instances, ip)
	}
	if ip.DeviceID == "" {
		ip.DeviceID = deviceID
	}
	if len(ip.Nodes) == 0 && len(nodes) > 0 {
		ip.Nodes = append([]string(nil), nodes...)
	}
	return ip
}

func (b *planBuilder) add(ns, cfg, inst string, ch Change) {
	b.plan.count(ch.Kind, ch.Action)
	if inst == "" {
		c := b.config(ns, cfg, "")
		c.Changes = append(c.Changes, ch)
		return
	}
	ip := b.instance(ns, cfg, inst, "", nil)
	ip.Changes = append(ip.Changes, ch)
}

func (b *planBuilder) finish() *Plan {
	p := &b.plan
	for _, c := range b.configs {
		sortChanges(c.Changes)
		sort.Slice(c.Instances, func(i, j int) bool { return c.Instances[i].Name < c.Instances[j].Name })
		keep := c.Instances[:0]
		for _, ip := range c.Instances {
			if len(ip.Changes) > 0 {
				sortChanges(ip.Changes)
				keep = append(keep, ip)
			}
		}
		c.Instances = keep
		sort.Strings(c.Notes)
		if len(c.Changes)+len(c.Instances)+len(c.Notes) > 0 {
			p.Configurations = append(p.Configurations, c)
		}
	}
	sort.Slice(p.Configurations, func(i, j int) bool {
		a, b := p.Configurations[i], p.Configurations[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	sort.Strings(p.Warnings)
	if p.Configurations == nil {
		p.Configurations = []*ConfigurationPlan{}
	}
	return p
}

var actionOrder = map[string]int{Retired: 0, Removed: 1, Started: 2, Created: 2, Updated: 3, RolledOut: 3, Held: 4, Kept: 5}
var kindOrder = map[string]int{"Configuration": -1, "Job": 0, "Pod": 1, "Deployment": 1, "Service": 2, "Kustomization": 3}

func sortChanges(cs []Change) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if kindOrder[a.Kind] != kindOrder[b.Kind] {
			return kindOrder[a.Kind] < kindOrder[b.Kind]
		}
		if actionOrder[a.Action] != actionOrder[b.Action] {
			return actionOrder[a.Action] < actionOrder[b.Action]
		}
		return a.Name < b.Name
	})
}

func (s Summary) text() string {
	type item struct {
		n          int
		kind, verb string
	}
	items := []item{
		{s.DeploymentsCreated, "Deployment", "created"}, {s.DeploymentsRolledOut, "Deployment", "rolled out"},
		{s.DeploymentsRemoved, "Deployment", "removed"}, {s.DeploymentsHeld, "Deployment", "held"},
		{s.PodsRemoved, "bare Pod", "removed"}, {s.JobsStarted, "Job", "started"}, {s.JobsHeld, "Job", "held"},
		{s.JobsRetired, "Job", "retired to history"}, {s.JobsKept, "Job", "kept until recorded"},
		{s.ServicesCreated, "Service", "created"}, {s.ServicesUpdated, "Service", "updated"},
		{s.ServicesRemove, "Service", "removed"}, {s.FluxCreated, "Flux Kustomization", "created"},
		{s.FluxUpdated, "Flux Kustomization", "updated"}, {s.FluxRemoved, "Flux Kustomization", "removed"},
		{s.ConfigurationsAdded, "Configuration", "added"}, {s.ConfigurationsRemoved, "Configuration", "removed"},
		{s.NamespacesRendered, "broker Namespace", "rendered"}, {s.NamespacesUnrendered, "broker Namespace", "no longer rendered"},
		{s.ResourceSlicesCreated, "ResourceSlice", "created"}, {s.ResourceSlicesUpdated, "ResourceSlice", "updated"},
		{s.ResourceSlicesRemoved, "ResourceSlice", "removed"}, {s.ResourceClaimTemplatesChanged, "ResourceClaimTemplate", "changed"},
		{s.DeviceClassesChanged, "DeviceClass", "changed"},
	}
	var parts []string
	for _, it := range items {
		if it.n == 1 {
			parts = append(parts, fmt.Sprintf("1 %s %s", it.kind, it.verb))
		} else if it.n > 1 {
			parts = append(parts, fmt.Sprintf("%d %ss %s", it.n, it.kind, it.verb))
		}
	}
	if len(parts) == 0 {
		return "nothing to change"
	}
	return strings.Join(parts, ", ")
}

// String is the summary as one line, such as "2 Deployments created, 1 Job held".
func (s Summary) String() string { return s.text() }
