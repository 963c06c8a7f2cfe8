package render

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
)

// DRA mode (gitbroker.yaml spec.deviceAllocation: dra; docs/DESIGN.md, "Devices counted once
// across the cluster"): the devices the inventory reports become ResourceSlices of driver
// gitbroker.dev, each Configuration a DeviceClass, and each broker claims its instance through a
// ResourceClaimTemplate, so the scheduler allocates every device, a shared one included, at most
// capacity times across the cluster. All of it is rendered, reviewed and applied like brokers.

// dra says whether the repository allocates devices with DRA.
func (p *pass) dra() bool { return p.loaded.settings.DeviceAllocation == api.DeviceAllocationDRA }

// hostnameLabel selects the nodes that reach a shared device: a ResourceSlice's node selector
// takes one term, and a term names one node by metadata.name, so the nodes are named by the
// label kubelet sets to the node's name.
const hostnameLabel = "kubernetes.io/hostname"

// checkDRA refuses, in DRA mode, a Configuration whose capacity a ResourceSlice cannot hold: each
// slot is a device, and a slice holds at most 128. Its file keeps its output.
func (p *pass) checkDRA(l *loaded, set *configSet) {
	if l.settings.DeviceAllocation != api.DeviceAllocationDRA {
		return
	}
	for _, f := range set.files {
		for _, c := range set.parsed[f].configs {
			if c.Policy.Capacity > api.DRAMaxCapacity {
				set.errs[f] = append(set.errs[f], c.Doc.Errorf("spec.capacity",
					"capacity %d is more than a ResourceSlice holds in DRA mode (gitbroker.yaml spec.deviceAllocation: dra): each slot is a device, at most %d", c.Policy.Capacity, api.DRAMaxCapacity))
			}
		}
	}
}

// renderDRA writes a Configuration's DeviceClass and, for every instance, its ResourceSlice and
// (when a broker claims the device) its ResourceClaimTemplate.
func (p *pass) renderDRA(k string, cfg *api.ParsedConfiguration) {
	class := api.DRADeviceClassName(cfg.Namespace, cfg.Name)
	ch := deviceClassHash(cfg)
	p.build("deviceclass/"+ch, p.commonFolder(cfg)+"/deviceclass-"+class+".yaml", objMeta{ns: cfg.Namespace, cfg: cfg.Name}, func() []byte {
		return buildDeviceClass(cfg, class, ch)
	})
	count := claimCount(cfg)
	for _, in := range p.placement.instances[k] {
		if _, frozen := p.frozen.files[k+"/"+in.name]; frozen {
			continue
		}
		nodes := liveNodes(in, p.loaded.lost)
		m := objMeta{ns: cfg.Namespace, cfg: cfg.Name, inst: in.name, deviceID: in.deviceID, nodes: in.nodes}
		if skipped := skippedProperties(in); len(skipped) > 0 {
			p.warn("Configuration %s: instance %s: properties %v are not ResourceSlice attributes (a name must be a C identifier of at most 32 characters, a value at most 64 characters, at most %d of them); brokers still get them as environment variables", k, in.name, skipped, maxPropertyAttributes)
		}
		sh := resourceSliceHash(in, nodes)
		sliceName := api.DRAResourceSliceName(cfg.Namespace, in.name)
		f := in.folder + "/resourceslice-" + sliceName + ".yaml"
		if in.shared {
			p.output.sliceReasons[f] = sliceNodes{devices: cfg.Policy.Capacity, shared: nodes}
		} else {
			p.output.sliceReasons[f] = sliceNodes{devices: cfg.Policy.Capacity, node: in.nodes[0]}
		}
		p.build("resourceslice/"+sh, f, m, func() []byte {
			attrs, _ := draAttributes(in)
			return buildResourceSlice(in, nodes, attrs, sliceName, sh)
		})
		if count == 0 {
			continue
		}
		th := claimTemplateHash(in, count)
		p.build("resourceclaimtemplate/"+th, in.folder+"/resourceclaimtemplate-"+in.name+".yaml", m, func() []byte {
			return buildClaimTemplate(in, class, count, th)
		})
	}
}

// The inputs hashes of DRA mode's objects: each covers what its builder reads.
func deviceClassHash(cfg *api.ParsedConfiguration) string {
	return hashHex(16, []byte("deviceclass"), []byte(cfg.Namespace), []byte(cfg.Name))
}

func resourceSliceHash(in *instance, nodes []string) string {
	return hashHex(16, []byte("resourceslice"), []byte(in.cfg.Namespace), []byte(in.cfg.Name), []byte(in.name), []byte(in.deviceID),
		[]byte(fmt.Sprint(in.shared, in.nodes, nodes, in.cfg.Policy.Capacity)), propsJSON(in.properties))
}

func claimTemplateHash(in *instance, count int64) string {
	return hashHex(16, []byte("resourceclaimtemplate"), []byte(in.cfg.Namespace), []byte(in.cfg.Name), []byte(in.name), []byte(in.deviceID), []byte(strconv.FormatInt(count, 10)))
}

// claimCount is how many of its instance's devices a broker claims: the most any container of
// the Pod or Job broker asks for as Akri's placeholder resource, 0 when none does (the broker
// then gets no device, as in device-plugin mode, and no claim is rendered).
func claimCount(cfg *api.ParsedConfiguration) int64 {
	var specs []*corev1.PodSpec
	if cfg.Spec.BrokerSpec != nil {
		if s := cfg.Spec.BrokerSpec.BrokerPodSpec; s != nil {
			specs = append(specs, s)
		}
		if j := cfg.Spec.BrokerSpec.BrokerJobSpec; j != nil {
			specs = append(specs, &j.Template.Spec)
		}
	}
	var most int64
	for _, ps := range specs {
		for _, cs := range [][]corev1.Container{ps.InitContainers, ps.Containers} {
			for _, c := range cs {
				for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
					if q, ok := l[akriPlaceholder]; ok {
						most = max(most, q.Value(), 1)
					}
				}
			}
		}
	}
	return most
}

// toClaim turns the akri.sh/<instance> resource that applyDevice wrote into the instance's
// ResourceClaim: every container that asked for the device refers to the claim instead, and the
// Pod claims it from the instance's ResourceClaimTemplate. A Pod that asked for no device gets no
// claim.
func toClaim(ps *corev1.PodSpec, instance string) {
	resource := corev1.ResourceName(api.AkriResourcePrefix + instance)
	claimed := false
	for _, cs := range [][]corev1.Container{ps.InitContainers, ps.Containers} {
		for i := range cs {
			c := &cs[i]
			_, inLimits := c.Resources.Limits[resource]
			_, inRequests := c.Resources.Requests[resource]
			if !inLimits && !inRequests {
				continue
			}
			delete(c.Resources.Limits, resource)
			delete(c.Resources.Requests, resource)
			if len(c.Resources.Limits) == 0 {
				c.Resources.Limits = nil
			}
			if len(c.Resources.Requests) == 0 {
				c.Resources.Requests = nil
			}
			c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: api.DRAClaimName})
			claimed = true
		}
	}
	if claimed {
		name := instance
		ps.ResourceClaims = append(ps.ResourceClaims, corev1.PodResourceClaim{Name: api.DRAClaimName, ResourceClaimTemplateName: &name})
	}
}

// spread prefers to run the replicas of a shared device's broker on different nodes, one broker
// per node as Akri places them, without holding a replica back when fewer nodes reach the device.
func spread(ps *corev1.PodSpec, instance string) {
	if ps.Affinity == nil {
		ps.Affinity = &corev1.Affinity{}
	}
	if ps.Affinity.PodAntiAffinity == nil {
		ps.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	pa := ps.Affinity.PodAntiAffinity
	pa.PreferredDuringSchedulingIgnoredDuringExecution = append(pa.PreferredDuringSchedulingIgnoredDuringExecution, corev1.WeightedPodAffinityTerm{
		Weight: 100,
		PodAffinityTerm: corev1.PodAffinityTerm{
			TopologyKey:   hostnameLabel,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{api.LabelInstance: instance, api.LabelController: api.ControllerAkri}},
		},
	})
}

// maxPropertyAttributes is how many of a device's properties become attributes: a device has at
// most 32 attributes and capacities, and four are gitbroker's own.
const maxPropertyAttributes = resourcev1.ResourceSliceMaxAttributesAndCapacitiesPerDevice - 4

var cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// skippedProperties are the properties of an instance that draAttributes leaves out, by name.
func skippedProperties(in *instance) []string {
	var skipped []string
	for k, v := range in.properties {
		if len(k) > resourcev1.DeviceMaxIDLength || !cIdentifier.MatchString(k) || len(v) > resourcev1.DeviceAttributeMaxValueLength {
			skipped = append(skipped, k)
		}
	}
	if len(in.properties)-len(skipped) > maxPropertyAttributes {
		_, skipped = draAttributes(in)
	}
	sort.Strings(skipped)
	return skipped
}

// draAttributes are an instance's device attributes: its instance, namespace, Configuration and
// whether it is shared in gitbroker.dev's domain, and its properties in property.gitbroker.dev's
// (a node reports them: they can never pass for gitbroker's own). A property whose name or value
// an attribute cannot hold, or beyond the most a device may have (by name), is left out and named.
func draAttributes(in *instance) (map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, []string) {
	str := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &s} }
	shared := in.shared
	attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		api.DRAAttributeInstance:      str(in.name),
		api.DRAAttributeNamespace:     str(in.cfg.Namespace),
		api.DRAAttributeConfiguration: str(api.DRAConfigurationValue(in.cfg.Name)),
		api.DRAAttributeShared:        {BoolValue: &shared},
	}
	names := make([]string, 0, len(in.properties))
	for k := range in.properties {
		names = append(names, k)
	}
	sort.Strings(names)
	var skipped []string
	added := 0
	for _, k := range names {
		v := in.properties[k]
		if added == maxPropertyAttributes || len(k) > resourcev1.DeviceMaxIDLength || !cIdentifier.MatchString(k) || len(v) > resourcev1.DeviceAttributeMaxValueLength {
			skipped = append(skipped, k)
			continue
		}
		attrs[resourcev1.QualifiedName(api.DRAPropertyDomain+"/"+k)] = str(v)
		added++
	}
	return attrs, skipped
}

// buildResourceSlice writes an instance's devices: capacity devices of one pool, on its node
// (nodeName), or for a shared device on every live node that reports it (nodeSelector), so the
// scheduler allocates each at most once across the cluster.
func buildResourceSlice(in *instance, nodes []string, attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, name, inputsHash string) []byte {
	node := ""
	if !in.shared {
		node = in.nodes[0]
	}
	spec := resourcev1.ResourceSliceSpec{
		Driver: api.DRADriver,
		Pool:   resourcev1.ResourcePool{Name: api.DRAPool(node, in.cfg.Namespace, in.name, in.shared), Generation: 1, ResourceSliceCount: 1},
	}
	labels := in.labels()
	if in.shared {
		spec.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: hostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: nodes}},
		}}}
	} else {
		spec.NodeName = &node
		labels[api.LabelTargetNode] = node
	}
	for i := range in.cfg.Policy.Capacity {
		spec.Devices = append(spec.Devices, resourcev1.Device{Name: api.DRADeviceName(i), Attributes: attrs})
	}
	return yamlcodec.Marshal(manifest{
		APIVersion: "resource.k8s.io/v1",
		Kind:       "ResourceSlice",
		Metadata: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{api.AnnotationInputsHash: inputsHash, api.AnnotationDeviceID: in.deviceID},
		},
		Spec: &spec,
	})
}

// buildClaimTemplate writes what each broker Pod of an instance claims its device from: count of
// the instance's devices, through the Configuration's DeviceClass.
func buildClaimTemplate(in *instance, class string, count int64, inputsHash string) []byte {
	return yamlcodec.Marshal(manifest{
		APIVersion: "resource.k8s.io/v1",
		Kind:       "ResourceClaimTemplate",
		Metadata: metav1.ObjectMeta{
			Name:        in.name,
			Namespace:   in.cfg.Namespace,
			Labels:      in.labels(),
			Annotations: map[string]string{api.AnnotationInputsHash: inputsHash, api.AnnotationDeviceID: in.deviceID},
		},
		Spec: &resourcev1.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: in.labels()},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "device",
				Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: class,
					Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
						// No space: yamlcodec's fast path writes it on one line, whatever its length.
						Expression: fmt.Sprintf("device.attributes[%q].%s==%q", api.DRADriver, api.DRAAttributeInstance, in.name),
					}}},
					AllocationMode: resourcev1.DeviceAllocationModeExactCount,
					Count:          count,
				},
			}}}},
		},
	})
}

// buildDeviceClass writes the class of a Configuration's devices, which its brokers claim through
// and users' own workloads may claim through too. A device matches every selector of a class, so
// the first, exactly driverSelector, holds whatever the second says: deploy/flux's admission
// policy admits a class only with it.
func buildDeviceClass(cfg *api.ParsedConfiguration, class, inputsHash string) []byte {
	expr := fmt.Sprintf("device.attributes[%q].%s == %q && device.attributes[%q].%s == %q",
		api.DRADriver, api.DRAAttributeNamespace, cfg.Namespace, api.DRADriver, api.DRAAttributeConfiguration, api.DRAConfigurationValue(cfg.Name))
	return yamlcodec.Marshal(manifest{
		APIVersion: "resource.k8s.io/v1",
		Kind:       "DeviceClass",
		Metadata: metav1.ObjectMeta{
			Name:        class,
			Labels:      map[string]string{api.LabelConfiguration: cfg.Name, api.LabelManagedBy: api.ManagedByGitbroker},
			Annotations: map[string]string{api.AnnotationInputsHash: inputsHash, annotationConfigurationNamespace: cfg.Namespace},
		},
		Spec: &resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{
			{CEL: &resourcev1.CELDeviceSelector{Expression: api.DRADriverSelector}},
			{CEL: &resourcev1.CELDeviceSelector{Expression: expr}},
		}},
	})
}

// annotationConfigurationNamespace names a cluster-wide object's Configuration's namespace.
const annotationConfigurationNamespace = "gitbroker.dev/configuration-namespace"
