package render

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gitbroker/gitbroker/api"
)

// renderBrokers writes the broker Deployments and Services of every valid Configuration.
func (p *pass) renderBrokers() {
	for _, k := range sortedKeys(p.loaded.configs) {
		cfg := p.loaded.configs[k]
		broker := "none"
		switch {
		case cfg.IsPodBroker():
			broker = "Pod"
		case cfg.IsJobBroker():
			broker = "Job"
		}
		p.plan.config(cfg.Namespace, cfg.Name, broker)
		p.warnBrokerSettings(k, cfg)
		if p.scoping.scope != nil && !p.scoping.scope[k] {
			// Carried over with its plan entries (mergeScope).
			continue
		}
		if p.dra() {
			p.renderDRA(k, cfg)
		}
		withBrokers := 0
		if cfg.IsPodBroker() {
			withBrokers = p.renderPodBrokers(k, cfg)
		}
		withBrokers += p.keepFrozenBrokers(k, cfg)
		if spec := cfg.Spec.ConfigurationServiceSpec; spec != nil && cfg.IsPodBroker() && withBrokers > 0 {
			cshash := serviceHash(cfg, "configuration-service", spec)
			ih := hashHex(16, cshash, []byte("configuration-service"))
			name := configurationServiceName(cfg.Name)
			p.build("svc/"+ih, p.commonFolder(cfg)+"/service-"+name+".yaml", objMeta{ns: cfg.Namespace, cfg: cfg.Name}, func() []byte {
				labels := map[string]string{api.LabelConfiguration: cfg.Name, api.LabelController: api.ControllerAkri, api.LabelManagedBy: api.ManagedByGitbroker}
				sel := map[string]string{api.LabelConfiguration: cfg.Name, api.LabelController: api.ControllerAkri}
				return buildService(cfg, spec, name, labels, sel, ih)
			})
		}
	}
	p.flushBuilds()
}

// warnBrokerSettings warns about settings of a Configuration that render nothing. (An after: that
// names nothing to wait for is an input error: loadConfigurations refuses it.)
func (p *pass) warnBrokerSettings(k string, cfg *api.ParsedConfiguration) {
	if cfg.IsJobBroker() && (cfg.Spec.InstanceServiceSpec != nil || cfg.Spec.ConfigurationServiceSpec != nil) {
		p.warn("Configuration %s: Services are rendered for Pod brokers only; the service specs of this Job broker are ignored", k)
	}
}

// renderPodBrokers writes the broker Deployments and instance Services of a Pod broker Configuration
// and counts the instances that have brokers.
func (p *pass) renderPodBrokers(k string, cfg *api.ParsedConfiguration) int {
	ci := p.clusterInputs()
	dhash := deploymentHash(cfg, ci.env)
	ishash := serviceHash(cfg, "instance-service", cfg.Spec.InstanceServiceSpec)
	// What each instance's objects are keyed and named by, worked out on every CPU: the
	// loop after it only looks them up.
	list := p.placement.instances[k]
	var todo []*instance
	for _, in := range list {
		if in.broker == nil || in.broker.lost != lostKey(in, p.loaded.lost) || in.broker.dra != p.dra() || in.broker.staged != ci.staged {
			todo = append(todo, in)
		}
	}
	parallel(len(todo), func(i int) {
		pi := podInputs(cfg, todo[i], dhash, ishash, p.prev, p.loaded.lost, p.dra(), ci)
		todo[i].broker = &pi
	})
	staged := p.stageRollout(cfg, list)
	withBrokers := 0
	for _, in := range list {
		if _, frozen := p.frozen.files[k+"/"+in.name]; frozen {
			continue
		}
		p.plan.instance(cfg.Namespace, cfg.Name, in.name, in.deviceID, in.nodes)
		pre := in.broker
		if reason := p.afterHeld(cfg, in); reason != "" {
			for _, n := range pre.nodes {
				p.plan.add(cfg.Namespace, cfg.Name, in.name, Change{Action: Held, Kind: "Deployment", Name: brokerName(in.name, n, in.shared), Reason: reason})
			}
			continue
		}
		env, replicas, dra := pre.env, pre.replicas, p.dra()
		m := objMeta{ns: cfg.Namespace, cfg: cfg.Name, inst: in.name, deviceID: in.deviceID, nodes: in.nodes}
		for j, n := range pre.nodes {
			if why, held := staged[pre.paths[j]]; held {
				p.keepBroker(cfg, in, n, pre.paths[j], m, why)
				continue
			}
			ih := pre.hashes[j]
			p.build(pre.keys[j], pre.paths[j], m, func() []byte {
				return buildDeployment(in, deploymentOptions{Node: n, Env: env, InputsHash: ih, DRA: dra, Replicas: replicas, Staged: ci.staged})
			})
		}
		withBrokers++
		if spec := cfg.Spec.InstanceServiceSpec; spec != nil {
			ih := pre.serviceHash
			name := instanceServiceName(in.name)
			p.build("svc/"+ih, in.folder+"/service-"+name+".yaml", m, func() []byte {
				labels := in.labels()
				labels[api.LabelManagedBy] = api.ManagedByGitbroker
				sel := map[string]string{api.LabelInstance: in.name, api.LabelController: api.ControllerAkri}
				return buildService(cfg, spec, name, labels, sel, ih)
			})
		}
	}
	return withBrokers
}

// keepFrozenBrokers keeps as they were the instances a node with an invalid inventory took part
// in (their Jobs follow the Job lifecycle like every other Job), and counts those kept with
// brokers.
func (p *pass) keepFrozenBrokers(k string, cfg *api.ParsedConfiguration) int {
	withBrokers := 0
	for _, ik := range sortedKeys(p.frozen.files) {
		if !strings.HasPrefix(ik, k+"/") {
			continue
		}
		inst := strings.TrimPrefix(ik, k+"/")
		folder := p.instanceFolder(cfg, inst)
		kept := false
		for _, f := range p.frozen.files[ik] {
			if ref, _ := parseObjectPath(f); ref.kind == "job" {
				continue
			}
			p.put(folder+"/"+path.Base(f), p.prev[f], objMeta{ns: cfg.Namespace, cfg: cfg.Name, inst: inst})
			kept = true
		}
		note := p.frozen.why[ik]
		if note == "" && kept {
			note = fmt.Sprintf("instance %s kept as it was: a node that sees it has an invalid inventory", inst)
		}
		if kept {
			withBrokers++
		}
		if note != "" {
			cp := p.plan.config(cfg.Namespace, cfg.Name, "")
			cp.Notes = append(cp.Notes, note)
			p.output.configNotes[k] = append(p.output.configNotes[k], note)
		}
	}
	return withBrokers
}

// podBrokerInputs is what a Pod broker instance's objects are keyed and named by.
type podBrokerInputs struct {
	nodes []string // the nodes that get a broker, at most the capacity; in DRA mode, "" for a shared device's one Deployment
	// replicas is, in DRA mode, how many Pods a shared device's one Deployment runs (the most
	// brokers device-plugin mode would place), each with a claim of its own; else 1.
	replicas      int32
	env           []corev1.EnvVar
	hashes, paths []string // of the Deployments, by node
	// keys are the Deployments' keys in the memo of built objects: the inputs hash and what the
	// builder reads besides that the hash does not name.
	keys        []string
	serviceHash string
	// lost names the lost nodes among the instance's that the placement left out (lostKey).
	lost string
	// dra says the inputs are DRA mode's.
	dra bool
	// staged says a rollout across clusters stages every broker (clusterInputs).
	staged bool
}

// Placement is sticky: of the nodes that report a shared instance, those that held its broker in
// the previous render keep it (a Deployment, or the bare Pod of renders before Deployments), and
// free places go to the others in name order, so a node that newly reports a device (or claims
// another node's) never displaces a broker. A lost node holds no broker of a shared device that
// another node reports (liveNodes).
//
// In DRA mode a shared device's brokers are not pinned: one Deployment runs as many Pods as
// device-plugin mode would place brokers, and the scheduler puts each where it allocates a device
// (a node that reaches it), moving it when that node is lost.
func podInputs(cfg *api.ParsedConfiguration, in *instance, dhash, ishash []byte, prev Tree, lost map[string]*api.NodeLoss, dra bool, ci clusterInputs) podBrokerInputs {
	cluster, staged := ci.env, cfg.Policy.RolloutMaxChanged != "" || ci.staged
	if dra && in.shared {
		replicas := int32(min(len(liveNodes(in, lost)), cfg.Policy.Capacity))
		pi := podBrokerInputs{nodes: []string{""}, env: withClusterEnv(in.env(), cluster), replicas: replicas, lost: lostKey(in, lost), dra: true, staged: ci.staged}
		ih := hashHex(16, dhash, []byte(in.name), []byte(in.digest), []byte("dra"), []byte(strconv.Itoa(int(replicas))), []byte(in.deviceID), propsJSON(in.properties))
		pi.hashes = []string{ih}
		pi.keys = []string{deploymentKey(ih, in.shared, staged, cfg.Policy.RolloutProgressDeadline)}
		pi.paths = []string{in.folder + "/deployment-" + brokerName(in.name, "", true) + ".yaml"}
		if cfg.Spec.InstanceServiceSpec != nil {
			pi.serviceHash = hashHex(16, ishash, []byte(in.name), []byte("instance-service"))
		}
		return pi
	}
	nodes := liveNodes(in, lost)
	if len(nodes) > cfg.Policy.Capacity {
		var holders, others []string
		for _, n := range nodes {
			_, held := prev[in.folder+"/deployment-"+brokerName(in.name, n, in.shared)+".yaml"]
			_, heldPod := prev[in.folder+"/pod-"+legacyPodName(in.name, n, in.shared)+".yaml"]
			if held || heldPod {
				holders = append(holders, n)
			} else {
				others = append(others, n)
			}
		}
		nodes = append(holders, others...)[:cfg.Policy.Capacity]
		sort.Strings(nodes)
	}
	pi := podBrokerInputs{nodes: nodes, env: withClusterEnv(in.env(), cluster), lost: lostKey(in, lost), replicas: 1, dra: dra, staged: ci.staged}
	props := propsJSON(in.properties)
	for _, n := range nodes {
		ih := hashHex(16, dhash, []byte(in.name), []byte(in.digest), []byte(n), []byte(in.deviceID), props)
		if dra {
			// The same broker claims its device otherwise: a new object, rolled out.
			ih = hashHex(16, []byte(ih), []byte("dra"))
		}
		pi.hashes = append(pi.hashes, ih)
		pi.keys = append(pi.keys, deploymentKey(ih, in.shared, staged, cfg.Policy.RolloutProgressDeadline))
		pi.paths = append(pi.paths, in.folder+"/deployment-"+brokerName(in.name, n, in.shared)+".yaml")
	}
	if cfg.Spec.InstanceServiceSpec != nil {
		pi.serviceHash = hashHex(16, ishash, []byte(in.name), []byte("instance-service"))
	}
	return pi
}

// deploymentKey is a broker Deployment's key in the memo of built objects. Whether its device is
// shared names the Deployment; the digest in the inputs hash differs with it too, but the key
// does not rely on that. Whether its rollout is staged labels the Deployment without changing
// what it runs, so it is not in the inputs hash: turning staging on or off is not a change to
// roll out in waves. Nor is the progress deadline, which only says how long a rollout waits.
func deploymentKey(inputsHash string, shared, staged bool, deadline int32) string {
	key := "deployment/" + inputsHash
	if shared {
		key += "/shared"
	}
	if staged {
		key += "/staged"
	}
	if deadline > 0 {
		key += "/deadline-" + strconv.Itoa(int(deadline))
	}
	return key
}

// keepBroker keeps a broker Deployment of the previous render as it was, for why (a staged
// rollout's later wave).
func (p *pass) keepBroker(cfg *api.ParsedConfiguration, in *instance, node, f string, m objMeta, why string) {
	name := brokerName(in.name, node, in.shared)
	was, _ := p.prevID(objectKey{"deployment", cfg.Namespace, name})
	p.put(f, p.prev[was], m)
	p.plan.add(cfg.Namespace, cfg.Name, in.name, Change{Action: Held, Kind: "Deployment", Name: name, Reason: why})
}

// pendingBuild is an object whose inputs are new to the Renderer's memo.
type pendingBuild struct {
	key, path string
	m         objMeta
	build     func() []byte
	data      []byte
}

// build writes an object, from the memo when its inputs were seen before, else later in parallel.
func (p *pass) build(key, path string, m objMeta, f func() []byte) {
	if data, ok := p.r.objs.lookup(key); ok {
		p.put(path, data, m)
		return
	}
	p.output.pending = append(p.output.pending, &pendingBuild{key: key, path: path, m: m, build: f})
}

func (p *pass) flushBuilds() {
	parallel(len(p.output.pending), func(i int) { p.output.pending[i].data = p.output.pending[i].build() })
	for _, b := range p.output.pending {
		p.r.objs.store(b.key, b.data)
		p.put(b.path, b.data, b.m)
	}
	p.output.pending = nil
}

// afterHeld says why an instance's brokers must wait for a Job, or "" when they may start.
func (p *pass) afterHeld(cfg *api.ParsedConfiguration, in *instance) string {
	after := cfg.Policy.After
	if after == "" {
		return ""
	}
	candidates := map[string]bool{}
	for _, size := range []int{3, 6, 16} {
		candidates[instanceName(after, akriDigest(in.deviceID, "", true, size))] = true
		for _, n := range in.nodes {
			candidates[instanceName(after, akriDigest(in.deviceID, n, false, size))] = true
		}
	}
	var failed *api.JobRecord
	for _, rec := range p.loaded.byDevice[cfg.Namespace+"/"+after+"/"+in.deviceID] {
		if !candidates[rec.Spec.Instance] {
			continue
		}
		if rec.Spec.Outcome == api.OutcomeSucceeded {
			return ""
		}
		failed = rec
	}
	if failed != nil {
		why := "failed"
		if failed.Spec.Reason != "" {
			why += " (" + failed.Spec.Reason + ")"
		}
		if failed.Spec.Message != "" {
			why += ": " + failed.Spec.Message
		}
		return fmt.Sprintf("after: Job %s of Configuration %s %s; the broker starts only after a Job of %s on this device succeeds (change its runID to run it again)", failed.Name, after, why, after)
	}
	return fmt.Sprintf("after: waiting for a Job of Configuration %s on device %q to be recorded Succeeded", after, in.deviceID)
}
