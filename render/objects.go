package render

import (
	"encoding/json"
	"maps"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// akriPlaceholder is the resource name Akri's controller replaces with the instance's device
// plugin resource, akri.sh/<instance>, which the node's agent serves; so does the renderer.
const akriPlaceholder = api.AkriPlaceholder

// jobAnnotations keep Flux and Argo CD from patching a rendered Job or deleting a finished one:
// not when it leaves rendered/ (prune), and not when Argo CD deletes the Application of a folder
// that no longer exists (Delete=false; deploy/argocd's Applications delete what they synced).
var jobAnnotations = map[string]string{
	"kustomize.toolkit.fluxcd.io/prune":  "disabled",
	"kustomize.toolkit.fluxcd.io/ssa":    "IfNotPresent",
	AnnotationArgoSyncOptions:            "Prune=false,Delete=false",
	"argocd.argoproj.io/compare-options": "IgnoreExtraneous",
}

// AnnotationArgoSyncOptions is Argo CD's sync options annotation.
const AnnotationArgoSyncOptions = "argocd.argoproj.io/sync-options"

// brokerRevisionHistory is how many old ReplicaSets a broker Deployment keeps: enough to see
// what the last rollout replaced, few enough that a fleet of brokers does not fill etcd.
const brokerRevisionHistory = 2

// manifest is how every object is written: no status, no server-side fields.
type manifest struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       any               `json:"spec"`
}

// instance is one device of one Configuration, as Akri would name it.
type instance struct {
	cfg        *api.ParsedConfiguration
	name       string
	digest     string
	deviceID   string
	shared     bool
	nodes      []string // sorted; the nodes that see the device
	properties map[string]string
	collided   bool
	folder     string
	// What its objects are keyed and named by, worked out once: an instance is made again only
	// when its Configuration or a reporting inventory changes (instanceSet).
	broker  *podBrokerInputs
	jobHash string
	// disputed, for a shared device whose reporting nodes disagree on its properties, says so;
	// the instance is then held as it was.
	disputed string
}

func (in *instance) labels() map[string]string {
	return map[string]string{
		api.LabelConfiguration: in.cfg.Name,
		api.LabelInstance:      in.name,
		api.LabelController:    api.ControllerAkri,
		api.LabelManagedBy:     api.ManagedByGitbroker,
	}
}

// env is Akri's broker environment: every device and broker property as KEY and KEY_<DIGEST>.
// Broker properties win over device properties of the same name, as in Akri: the reviewed
// Configuration decides, never the device. Every name appears once, whichever way it was made
// (a device's MODE_<DIGEST> is the digest form of the Configuration's MODE, which wins; between
// a device's own property and the digest form of another, the property as reported wins), so
// the same inputs give the same bytes. A device's value is escaped for the kubelet, which
// expands $(NAME) in env values: "$$" is a literal "$", so device text stays text.
func (in *instance) env() []corev1.EnvVar {
	suffix := "_" + strings.ToUpper(in.digest)
	type entry struct {
		value string
		rank  int // the higher wins a name
	}
	names := map[string]entry{}
	set := func(name, value string, rank int) {
		if e, ok := names[name]; !ok || rank > e.rank {
			names[name] = entry{value, rank}
		}
	}
	for k, v := range in.properties {
		v = strings.ReplaceAll(v, "$", "$$")
		set(k+suffix, v, 0)
		set(k, v, 1)
	}
	for k, v := range in.cfg.Spec.BrokerProperties {
		set(k+suffix, v, 2)
		set(k, v, 3)
	}
	env := make([]corev1.EnvVar, 0, len(names))
	for k, e := range names {
		env = append(env, corev1.EnvVar{Name: k, Value: e.value})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	return env
}

// applyDevice turns Akri's placeholder into the instance's resource, akri.sh/<instance>, in the
// limits and requests of every container and init container that names it, as Akri's controller
// does: the node's agent serves that resource as its device plugin, so the container gets the
// device node and its cgroup rule, and the node runs no more brokers than the device's capacity.
// The device's environment goes to the containers and init containers that asked for the device,
// or to every container when none did. Variables a container defines itself are left to it.
func applyDevice(ps *corev1.PodSpec, env []corev1.EnvVar, instance string) {
	resource := corev1.ResourceName(api.AkriResourcePrefix + instance)
	rename := func(list corev1.ResourceList) bool {
		q, ok := list[akriPlaceholder]
		if ok {
			delete(list, akriPlaceholder)
			list[resource] = q
		}
		return ok
	}
	claims := func(c *corev1.Container) bool {
		inLimits := rename(c.Resources.Limits)
		inRequests := rename(c.Resources.Requests)
		return inLimits || inRequests
	}
	var targets []*corev1.Container
	for i := range ps.InitContainers {
		if claims(&ps.InitContainers[i]) {
			targets = append(targets, &ps.InitContainers[i])
		}
	}
	claimed := false
	for i := range ps.Containers {
		if claims(&ps.Containers[i]) {
			targets = append(targets, &ps.Containers[i])
			claimed = true
		}
	}
	if !claimed {
		for i := range ps.Containers {
			targets = append(targets, &ps.Containers[i])
		}
	}
	for _, c := range targets {
		own := map[string]bool{}
		for _, e := range c.Env {
			own[e.Name] = true
		}
		merged := make([]corev1.EnvVar, 0, len(env)+len(c.Env))
		for _, e := range env {
			if !own[e.Name] {
				merged = append(merged, e)
			}
		}
		// Device variables come first so the container's own variables may refer to them as $(KEY).
		c.Env = append(merged, c.Env...)
	}
}

// pin restricts the Pod to the nodes that see the device with required node affinity on
// metadata.name, one node per node selector term: the API server accepts exactly one value for a
// metadata.name field selector, and terms are ORed, so several nodes need several terms. The
// Configuration's own required terms stay meaningful: each of them is combined with each node
// (user terms in their order, nodes sorted), so the Pod runs only where both hold.
func pin(ps *corev1.PodSpec, nodes []string) {
	if ps.Affinity == nil {
		ps.Affinity = &corev1.Affinity{}
	}
	if ps.Affinity.NodeAffinity == nil {
		ps.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := ps.Affinity.NodeAffinity
	user := []corev1.NodeSelectorTerm{{}}
	if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil && len(r.NodeSelectorTerms) > 0 {
		user = r.NodeSelectorTerms
	}
	terms := make([]corev1.NodeSelectorTerm, 0, len(user)*len(nodes))
	for _, t := range user {
		for _, n := range nodes {
			term := *t.DeepCopy()
			term.MatchFields = append(term.MatchFields, corev1.NodeSelectorRequirement{
				Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n},
			})
			terms = append(terms, term)
		}
	}
	na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: terms}
}

// deploymentOptions say how buildDeployment builds an instance's Pod broker.
type deploymentOptions struct {
	// Node is the node its Pod is pinned to; "" for a shared device's Deployment in DRA mode.
	Node string
	// Env is what the device gives the broker's containers (the instance's environment).
	Env []corev1.EnvVar
	// InputsHash is the gitbroker.dev/inputs-hash annotation: what the broker was built from.
	InputsHash string
	// DRA claims the device through the instance's ResourceClaimTemplate instead of
	// akri.sh/<instance>.
	DRA bool
	// Replicas are its Pods: 1 pinned, a shared device's capacity in DRA mode.
	Replicas int32
	// Staged labels it for a staged rollout across clusters (besides the Configuration's own
	// rollout policy).
	Staged bool
}

// buildDeployment writes a Pod broker: a Deployment of one Pod pinned to node, rolled out by
// Recreate so that the old Pod is gone before the new one starts and a device never has two
// brokers. Kubernetes' own controller recreates a Pod that is evicted, fails or is deleted.
//
// In DRA mode the Pod claims its device through the instance's ResourceClaimTemplate instead of
// akri.sh/<instance>; a shared device's Deployment (node "") is not pinned and runs replicas
// Pods, each allocated a device by the scheduler where one is reachable.
func buildDeployment(in *instance, o deploymentOptions) []byte {
	node, replicas := o.Node, o.Replicas
	ps := in.cfg.Spec.BrokerSpec.BrokerPodSpec.DeepCopy()
	applyDevice(ps, o.Env, in.name)
	if o.DRA {
		toClaim(ps, in.name)
	}
	labels := in.labels()
	selector := map[string]string{api.LabelInstance: in.name, api.LabelController: api.ControllerAkri}
	if node != "" {
		pin(ps, []string{node})
		labels[api.LabelTargetNode] = node
		selector[api.LabelTargetNode] = node
	} else {
		spread(ps, in.name)
	}
	own := labels // the Deployment's; the template's never carry the rollout label
	if in.cfg.Policy.RolloutMaxChanged != "" || o.Staged {
		own = maps.Clone(labels)
		own[api.LabelRollout] = api.RolloutStaged
	}
	history := int32(brokerRevisionHistory)
	var deadline *int32
	if d := in.cfg.Policy.RolloutProgressDeadline; d > 0 {
		deadline = &d
	}
	return yamlcodec.Marshal(manifest{
		APIVersion: "apps/v1",
		Kind:       "Deployment",
		Metadata: metav1.ObjectMeta{
			Name:        brokerName(in.name, node, in.shared),
			Namespace:   in.cfg.Namespace,
			Labels:      own,
			Annotations: map[string]string{api.AnnotationInputsHash: o.InputsHash, api.AnnotationDeviceID: in.deviceID},
		},
		Spec: &appsv1.DeploymentSpec{
			Replicas: &replicas,
			// The selector is immutable: it names only what never changes for this Deployment.
			Selector:                &metav1.LabelSelector{MatchLabels: selector},
			Strategy:                appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			RevisionHistoryLimit:    &history,
			ProgressDeadlineSeconds: deadline,
			// The device the Pod serves, for whoever looks at the Pod (kubectl describe).
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{api.AnnotationDeviceID: in.deviceID}},
				Spec:       *ps,
			},
		},
	})
}

// builtJob is a Job before it is written: its name is known without serializing it, and only a
// Job that is started gets the source commit and is marshalled.
type builtJob struct {
	name string
	m    manifest
}

// jobSpec is the Configuration's JobSpec given the instance's device, env and labels.
func jobSpec(in *instance, env []corev1.EnvVar) *batchv1.JobSpec {
	js := in.cfg.Spec.BrokerSpec.BrokerJobSpec.DeepCopy()
	applyDevice(&js.Template.Spec, env, in.name)
	if js.Template.Labels == nil {
		js.Template.Labels = map[string]string{}
	}
	for k, v := range in.labels() {
		js.Template.Labels[k] = v
	}
	return js
}

// buildJob builds the Job of an instance; cluster, with spec.clusters, is the cluster's
// variables (clusterEnv), which its broker is given.
func buildJob(in *instance, cluster map[string]string, inputsHash string, dra bool) builtJob {
	js := jobSpec(in, in.env())
	pol := in.cfg.Policy
	var runHash string
	if pol.RunPolicy == api.RunPolicyOnce {
		runHash = hashHex(10, []byte("once"), []byte(pol.RunID))
	} else {
		// The hash is taken before pinning: a node starting or stopping to see the device is
		// not a new run of the Job. Nor before the cluster's variables: they say where the Job
		// runs, not what it does to the device, so turning spec.clusters on or relabelling a
		// cluster starts no firmware Job again.
		spec, _ := json.Marshal(js)
		runHash = hashHex(10, spec, []byte(pol.RunID))
	}
	if cluster != nil {
		js = jobSpec(in, withClusterEnv(in.env(), cluster))
	}
	if dra {
		// After the run hash: a Job run on the device is the same run whichever way it claims it.
		toClaim(&js.Template.Spec, in.name)
	}
	if !dra || !in.shared {
		// In DRA mode a shared device's Job runs where the scheduler allocates the device.
		pin(&js.Template.Spec, in.nodes)
	}
	ann := map[string]string{api.AnnotationInputsHash: inputsHash, api.AnnotationDeviceID: in.deviceID}
	for k, v := range jobAnnotations {
		ann[k] = v
	}
	// The log capture the recorder applies; not part of the run hash, so turning it on or off
	// does not start a new run.
	for k, v := range pol.Logs.Annotations() {
		ann[k] = v
	}
	name := jobName(in.name, runHash)
	return builtJob{name: name, m: manifest{
		APIVersion: "batch/v1",
		Kind:       "Job",
		Metadata:   metav1.ObjectMeta{Name: name, Namespace: in.cfg.Namespace, Labels: in.labels(), Annotations: ann},
		Spec:       js,
	}}
}

// bytes writes the Job started by sourceCommit, and the head parseHead would read back from it.
func (j builtJob) bytes(sourceCommit string) ([]byte, *objectHead) {
	m := j.m
	if sourceCommit != "" {
		ann := make(map[string]string, len(m.Metadata.Annotations)+1)
		for k, v := range m.Metadata.Annotations {
			ann[k] = v
		}
		ann[api.AnnotationRenderedFrom] = sourceCommit
		m.Metadata.Annotations = ann
	}
	return yamlcodec.Marshal(m), jobHead(m)
}

// buildService writes a Service from a Configuration's spec as Akri's controller does: the
// selector the user gave, with gitbroker's (Akri's) labels added over it, and a port's missing
// targetPort as the API server defaults it (the port itself), so that what is applied is what
// the server keeps and no reconcile sees a difference.
func buildService(cfg *api.ParsedConfiguration, spec *corev1.ServiceSpec, name string, labels, selector map[string]string, inputsHash string) []byte {
	s := spec.DeepCopy()
	merged := maps.Clone(s.Selector)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, selector)
	s.Selector = merged
	for i := range s.Ports {
		if p := &s.Ports[i]; p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	return yamlcodec.Marshal(manifest{
		APIVersion: "v1",
		Kind:       "Service",
		Metadata: metav1.ObjectMeta{
			Name:        name,
			Namespace:   cfg.Namespace,
			Labels:      labels,
			Annotations: map[string]string{api.AnnotationInputsHash: inputsHash},
		},
		Spec: s,
	})
}
