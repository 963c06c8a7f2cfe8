package render

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gitbroker/gitbroker/api"
)

// loadRollouts reads the recorder's RolloutRecords (docs/FORMATS.md, "Staged rollouts"), by
// namespace/deployment. An invalid record is an error naming its file and counts for nothing:
// its Deployment is not known to be Available, so no wave starts on a record the renderer
// cannot read.
func (p *pass) loadRollouts() map[string]*api.RolloutRecord {
	rollouts := map[string]*api.RolloutRecord{}
	loadStatus(p, api.IsRolloutPath, api.ParseRolloutFile, func(f string, r *api.ParsedRolloutRecord) {
		if r == nil {
			ns, name, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(f, api.RolloutDir+"/"), ".yaml"), "/")
			rollouts[ns+"/"+name] = &api.RolloutRecord{Spec: api.RolloutRecordSpec{Message: "its record " + f + " is invalid"}}
			return
		}
		rollouts[r.Namespace+"/"+r.Name] = r.RolloutRecord
	})
	return rollouts
}

// stagedBroker is a broker Deployment of the previous render that a staged rollout looks at.
type stagedBroker struct {
	name, path string
	// available says the recorder recorded it Available with the inputs it was rendered with.
	available bool
}

// stageRollout decides which broker Deployments of a Configuration with a staged rollout change
// in this render, and returns the paths of those that keep their previous render, with why.
//
// A broker changes when its inputs hash differs from the previous render's. A wave starts only
// when every broker already rendered with its new inputs is recorded Available with them (a
// broker just created, or changed in the last wave, counts until it is); it changes at most
// maxChanged of the brokers left, those that were not Available first (the change may be what
// mends them), then by name. New brokers are created and gone ones removed at once: there is
// nothing to roll from or to. The renderer stays a function of git: the previous render and the
// recorder's signed records are all it reads.
func (p *pass) stageRollout(cfg *api.ParsedConfiguration, list []*instance) map[string]string {
	maxChanged := cfg.Policy.RolloutMaxChanged
	ringHold := p.req.holdRollout[cfg.Namespace+"/"+cfg.Name]
	if maxChanged == "" && ringHold == "" || len(p.prev) == 0 {
		return nil
	}
	var changed, unsettled, passed []stagedBroker
	total := 0
	for _, in := range list {
		if _, frozen := p.frozen.files[cfg.Namespace+"/"+cfg.Name+"/"+in.name]; frozen || p.afterHeld(cfg, in) != "" {
			continue
		}
		for j, n := range in.broker.nodes {
			total++
			name := brokerName(in.name, n, in.shared)
			f, ok := p.prevID(objectKey{"deployment", cfg.Namespace, name})
			if !ok {
				continue
			}
			was := p.head(f, p.prev[f]).Metadata.Annotations[api.AnnotationInputsHash]
			rec := p.loaded.rollouts[cfg.Namespace+"/"+name]
			b := stagedBroker{name: name, path: in.broker.paths[j],
				available: rec != nil && rec.Spec.Available && rec.Spec.InputsHash == was}
			switch {
			case was != in.broker.hashes[j]:
				changed = append(changed, b)
			case !b.available && rec != nil && rec.Spec.ProgressDeadlineExceeded && rec.Spec.InputsHash == was:
				// Its controller gave up on it: one node (a device that does not work, or one a
				// node made up) never stalls the rollout for good.
				passed = append(passed, b)
			case !b.available:
				unsettled = append(unsettled, b)
			}
		}
	}
	if len(changed) == 0 {
		return nil
	}
	// What this Configuration renders next depends on this render's output too, not only on
	// its inputs: the next pass renders it again, scoped or not.
	p.output.rolling[cfg.Namespace+"/"+cfg.Name] = true
	hold := map[string]string{}
	cp := p.plan.config(cfg.Namespace, cfg.Name, "")
	if ringHold != "" {
		// A ring before this cluster's has not settled: every changed broker waits.
		for _, b := range changed {
			hold[b.path] = "cluster rollout: " + ringHold
		}
		p.note(cfg, cp, fmt.Sprintf("cluster rollout: %d changed brokers wait; %s", len(changed), ringHold))
		return hold
	}
	if maxChanged == "" {
		return nil // the ring may change every broker: no wave within the cluster
	}
	wave, _ := api.RolloutWave(maxChanged, total)
	if len(passed) > 0 {
		p.note(cfg, cp, fmt.Sprintf("staged rollout: passed over %s not Available within its progress deadline", strings.TrimSuffix(strings.TrimSuffix(brokerList(passed, p.loaded.rollouts, cfg.Namespace), " is"), " are")))
	}
	if len(unsettled) > 0 {
		waiting := fmt.Sprintf("the next wave starts once %s recorded Available with the new spec", brokerList(unsettled, p.loaded.rollouts, cfg.Namespace))
		for _, b := range changed {
			hold[b.path] = fmt.Sprintf("staged rollout (at most %s of %d brokers per wave): %s", maxChanged, total, waiting)
		}
		p.note(cfg, cp, fmt.Sprintf("staged rollout: %d changed brokers wait; %s", len(changed), waiting))
		return hold
	}
	sort.SliceStable(changed, func(i, j int) bool {
		if changed[i].available != changed[j].available {
			return !changed[i].available
		}
		return changed[i].name < changed[j].name
	})
	now := min(wave, len(changed))
	for _, b := range changed[now:] {
		hold[b.path] = fmt.Sprintf("staged rollout (at most %s of %d brokers per wave): in a later wave", maxChanged, total)
	}
	p.note(cfg, cp, fmt.Sprintf("staged rollout: %d of %d changed brokers roll out in this wave, %d wait for the next ones (each starts once the brokers before it are recorded Available)",
		now, len(changed), len(changed)-now))
	return hold
}

// brokerList names the brokers a wave waits for, a few of them, with what the recorder said.
func brokerList(bs []stagedBroker, recs map[string]*api.RolloutRecord, ns string) string {
	const shown = 3
	var parts []string
	for _, b := range bs[:min(shown, len(bs))] {
		switch rec := recs[ns+"/"+b.name]; {
		case rec == nil:
			parts = append(parts, b.name+" (no record yet: is the recorder running and watching namespace "+ns+"?)")
		case rec.Spec.Message != "":
			parts = append(parts, fmt.Sprintf("%s (%s)", b.name, rec.Spec.Message))
		default:
			parts = append(parts, b.name)
		}
	}
	s := strings.Join(parts, ", ")
	if len(bs) > shown {
		s += fmt.Sprintf(" and %d more", len(bs)-shown)
	}
	if len(bs) == 1 {
		return "Deployment " + s + " is"
	}
	return "Deployments " + s + " are"
}

// note adds a note about a Configuration to the plan, carried over by a scoped pass.
func (p *pass) note(cfg *api.ParsedConfiguration, cp *ConfigurationPlan, text string) {
	cp.Notes = append(cp.Notes, text)
	k := cfg.Namespace + "/" + cfg.Name
	p.output.configNotes[k] = append(p.output.configNotes[k], text)
}

// rolloutsReach adds to scope the Configurations whose broker Deployments' RolloutRecords
// changed since the last pass. A record of a Deployment the last render did not hold changes
// nothing: a staged rollout reads only the records of the Deployments it rendered.
func (p *pass) rolloutsReach(scope map[string]bool, last map[string]*api.RolloutRecord, idx map[objectKey]string) {
	for k := range p.r.scope.rolling {
		scope[k] = true
	}
	reach := func(id string) {
		ns, name, _ := strings.Cut(id, "/")
		if f, ok := idx[objectKey{kind: "deployment", namespace: ns, name: name}]; ok {
			scope[configKeyOf(f)] = true
		}
	}
	for id, rec := range p.loaded.rollouts {
		if old := last[id]; old == nil || old.Spec != rec.Spec {
			reach(id)
		}
	}
	for id := range last {
		if _, ok := p.loaded.rollouts[id]; !ok {
			reach(id)
		}
	}
}
