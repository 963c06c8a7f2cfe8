package api

import (
	"fmt"
	"path"
	"reflect"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// AkriPlaceholder is the resource name Akri's controller replaces with the instance's device
// plugin resource in containers' limits and requests.
const AkriPlaceholder = "{{PLACEHOLDER}}"

// AkriResourcePrefix begins the device plugin resources the agent serves: akri.sh/<instance> for
// one discovered device and akri.sh/<configuration> for any of a Configuration's devices.
const AkriResourcePrefix = "akri.sh/"

// resources checks names and quantities as ValidateContainerResourceRequirements does, and at
// pod level (podLevel) as validatePodResources: only cpu, memory and huge pages.
func (c *specChecker) resources(f string, r *corev1.ResourceRequirements, podLevel bool) {
	for _, list := range []struct {
		name string
		rl   corev1.ResourceList
	}{{"limits", r.Limits}, {"requests", r.Requests}} {
		for _, name := range resourceNames(list.rl) {
			q := list.rl[corev1.ResourceName(name)]
			rf := f + "." + list.name + "." + name
			if !c.resourceName(rf, name, podLevel) {
				continue
			}
			if q.Sign() < 0 {
				c.add(rf, "must not be negative, got %s", q.String())
			} else if isExtendedResource(name) && q.MilliValue()%1000 != 0 {
				c.add(rf, "must be a whole number, got %s", q.String())
			}
		}
	}
	for _, name := range resourceNames(r.Requests) {
		req := r.Requests[corev1.ResourceName(name)]
		lim, ok := r.Limits[corev1.ResourceName(name)]
		overcommit := !isExtendedResource(name) && !strings.HasPrefix(name, corev1.ResourceHugePagesPrefix)
		switch {
		case ok && !overcommit && req.Cmp(lim) != 0:
			c.add(f+".requests."+name, "must equal its limit (%s): %s cannot be overcommitted", lim.String(), name)
		case ok && req.Cmp(lim) > 0:
			c.add(f+".requests."+name, "%s is more than its limit of %s", req.String(), lim.String())
		case !ok && !overcommit:
			c.add(f+".limits", "a limit for %s is required: it cannot be overcommitted", name)
		}
	}
}

// resourceName reports whether name may be used, adding the error if not.
func (c *specChecker) resourceName(f, name string, podLevel bool) bool {
	switch {
	case name == AkriPlaceholder && podLevel:
		c.add(f, "Akri's placeholder belongs in a container's resources, not the Pod's (is resources: indented under the container?)")
	case name == AkriPlaceholder:
		return true
	case len(validation.IsQualifiedName(name)) > 0:
		c.add(f, "%q is not a valid resource name", name)
	case podLevel && name != string(corev1.ResourceCPU) && name != string(corev1.ResourceMemory) && !strings.HasPrefix(name, corev1.ResourceHugePagesPrefix):
		c.add(f, "%q cannot be set for the whole Pod: only cpu, memory and hugepages-* can (is resources: indented under the container?)", name)
	case !strings.Contains(name, "/") && !isStandardContainerResource(name):
		c.add(f, "%q is not a resource a container can request: cpu, memory, ephemeral-storage, hugepages-* or a domain-qualified extended resource such as akri.sh/camera", name)
	default:
		return true
	}
	return false
}

func resourceNames(rl corev1.ResourceList) []string {
	names := make([]string, 0, len(rl))
	for n := range rl {
		names = append(names, string(n))
	}
	sort.Strings(names)
	return names
}

func isStandardContainerResource(name string) bool {
	switch corev1.ResourceName(name) {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return true
	}
	return strings.HasPrefix(name, corev1.ResourceHugePagesPrefix)
}

// isExtendedResource: domain-qualified outside kubernetes.io, such as akri.sh/<instance>, and
// Akri's placeholder, which stands for one.
func isExtendedResource(name string) bool {
	return name == AkriPlaceholder || strings.Contains(name, "/") && !strings.Contains(name, "kubernetes.io/")
}

// volumes checks names and sources and returns the names containers may mount.
func (c *specChecker) volumes(vs []corev1.Volume) map[string]bool {
	names := map[string]bool{}
	for i, v := range vs {
		f := fmt.Sprintf("%s.volumes[%d]", c.field, i)
		switch {
		case v.Name == "":
			c.add(f+".name", "required")
		case len(validation.IsDNS1123Label(v.Name)) > 0:
			c.add(f+".name", "%q is not a valid volume name (lower case letters, digits and '-')", v.Name)
		case names[v.Name]:
			c.add(f+".name", "duplicate volume name %q", v.Name)
		}
		names[v.Name] = true
		c.volumeSource(f, &v.VolumeSource)
	}
	return names
}

func (c *specChecker) volumeSource(f string, s *corev1.VolumeSource) {
	if n := countSet(s); n != 1 {
		c.add(f, "set exactly one volume source (hostPath, emptyDir, configMap, secret, ...), got %d", n)
		return
	}
	mode := func(mf string, m *int32) {
		if m != nil && (*m < 0 || *m > 0o777) {
			c.add(mf, "must be a file mode between 0 and 0777 (511), got %d", *m)
		}
	}
	switch {
	case s.HostPath != nil:
		if s.HostPath.Path == "" {
			c.add(f+".hostPath.path", "required")
		}
		if t := s.HostPath.Type; t != nil {
			c.enum(f+".hostPath.type", string(*t), "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
		}
	case s.ConfigMap != nil:
		if s.ConfigMap.Name == "" {
			c.add(f+".configMap.name", "required")
		}
		mode(f+".configMap.defaultMode", s.ConfigMap.DefaultMode)
	case s.Secret != nil:
		if s.Secret.SecretName == "" {
			c.add(f+".secret.secretName", "required")
		}
		mode(f+".secret.defaultMode", s.Secret.DefaultMode)
	case s.EmptyDir != nil:
		c.enum(f+".emptyDir.medium", string(s.EmptyDir.Medium), "Memory", "HugePages")
	}
}

// countSet counts the sources set in a VolumeSource: every field of it is a pointer to one.
func countSet(s *corev1.VolumeSource) int {
	n := 0
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			n++
		}
	}
	return n
}

func (c *specChecker) mounts(f string, ms []corev1.VolumeMount, volumes map[string]bool, privileged bool) {
	paths := map[string]bool{}
	for i, m := range ms {
		mf := fmt.Sprintf("%s[%d]", f, i)
		if m.Name == "" {
			c.add(mf+".name", "required")
		} else if !volumes[m.Name] {
			c.add(mf+".name", "no volume named %q in the Pod's volumes", m.Name)
		}
		switch {
		case m.MountPath == "":
			c.add(mf+".mountPath", "required")
		case paths[m.MountPath]:
			c.add(mf+".mountPath", "%q is mounted twice", m.MountPath)
		}
		paths[m.MountPath] = true
		if m.SubPath != "" && (path.IsAbs(m.SubPath) || hasDotDot(m.SubPath)) {
			c.add(mf+".subPath", "%q must be a relative path without '..'", m.SubPath)
		}
		if m.MountPropagation != nil {
			c.enum(mf+".mountPropagation", string(*m.MountPropagation), "None", "HostToContainer", "Bidirectional")
			if *m.MountPropagation == corev1.MountPropagationBidirectional && !privileged {
				c.add(mf+".mountPropagation", "Bidirectional is only for privileged containers")
			}
		}
	}
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

// probe checks a probe as validateProbe does; liveness and startup probes must succeed once.
func (c *specChecker) probe(f string, p *corev1.Probe, once bool) {
	if p == nil {
		return
	}
	n := 0
	if p.Exec != nil {
		n++
	}
	if h := p.HTTPGet; h != nil {
		n++
		c.probePort(f+".httpGet.port", h.Port)
		c.enum(f+".httpGet.scheme", string(h.Scheme), "HTTP", "HTTPS")
	}
	if t := p.TCPSocket; t != nil {
		n++
		c.probePort(f+".tcpSocket.port", t.Port)
	}
	if g := p.GRPC; g != nil {
		n++
		if g.Port < 1 || g.Port > 65535 {
			c.add(f+".grpc.port", "must be between 1 and 65535, got %d", g.Port)
		}
	}
	if n != 1 {
		c.add(f, "set exactly one of exec, httpGet, tcpSocket and grpc, got %d", n)
	}
	for _, v := range []struct {
		name  string
		value int32
	}{{"initialDelaySeconds", p.InitialDelaySeconds}, {"timeoutSeconds", p.TimeoutSeconds},
		{"periodSeconds", p.PeriodSeconds}, {"successThreshold", p.SuccessThreshold}, {"failureThreshold", p.FailureThreshold}} {
		if v.value < 0 {
			c.add(f+"."+v.name, "must not be negative, got %d", v.value)
		}
	}
	if once && p.SuccessThreshold > 1 {
		c.add(f+".successThreshold", "must be 1 for a liveness or startup probe, got %d", p.SuccessThreshold)
	}
}

func (c *specChecker) probePort(f string, p intstr.IntOrString) {
	if p.Type == intstr.String {
		if len(validation.IsValidPortName(p.StrVal)) > 0 {
			c.add(f, "%q is neither a port number nor a valid port name", p.StrVal)
		}
		return
	}
	if p.IntVal < 1 || p.IntVal > 65535 {
		c.add(f, "must be between 1 and 65535, got %d", p.IntVal)
	}
}

func (c *specChecker) security(f string, s *corev1.SecurityContext) {
	if s == nil {
		return
	}
	c.ids(f, s.RunAsUser, s.RunAsGroup)
	if s.Privileged != nil && *s.Privileged && s.AllowPrivilegeEscalation != nil && !*s.AllowPrivilegeEscalation {
		c.add(f+".allowPrivilegeEscalation", "cannot be false when privileged is true")
	}
	if s.ProcMount != nil {
		c.enum(f+".procMount", string(*s.ProcMount), "Default", "Unmasked")
	}
	c.seccomp(f+".seccompProfile", s.SeccompProfile)
	if s.Capabilities != nil {
		for i, cp := range append(append([]corev1.Capability{}, s.Capabilities.Add...), s.Capabilities.Drop...) {
			if strings.TrimSpace(string(cp)) == "" || strings.ContainsAny(string(cp), " \t") {
				c.add(fmt.Sprintf("%s.capabilities", f), "capability %d (%q) is not a capability name", i, cp)
			}
		}
	}
}

func (c *specChecker) podSecurity(f string, s *corev1.PodSecurityContext) {
	if s == nil {
		return
	}
	c.ids(f, s.RunAsUser, s.RunAsGroup)
	if s.FSGroup != nil && (*s.FSGroup < 0 || *s.FSGroup > 2147483647) {
		c.add(f+".fsGroup", "must be between 0 and 2147483647, got %d", *s.FSGroup)
	}
	for i, g := range s.SupplementalGroups {
		if g < 0 || g > 2147483647 {
			c.add(fmt.Sprintf("%s.supplementalGroups[%d]", f, i), "must be between 0 and 2147483647, got %d", g)
		}
	}
	if p := s.FSGroupChangePolicy; p != nil {
		c.enum(f+".fsGroupChangePolicy", string(*p), "OnRootMismatch", "Always")
	}
	c.seccomp(f+".seccompProfile", s.SeccompProfile)
	for i, sc := range s.Sysctls {
		if sc.Name == "" {
			c.add(fmt.Sprintf("%s.sysctls[%d].name", f, i), "required")
		}
	}
}

func (c *specChecker) ids(f string, user, group *int64) {
	for _, id := range []struct {
		name string
		v    *int64
	}{{"runAsUser", user}, {"runAsGroup", group}} {
		if id.v != nil && (*id.v < 0 || *id.v > 2147483647) {
			c.add(f+"."+id.name, "must be between 0 and 2147483647, got %d", *id.v)
		}
	}
}

func (c *specChecker) seccomp(f string, p *corev1.SeccompProfile) {
	if p == nil {
		return
	}
	switch p.Type {
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			c.add(f+".localhostProfile", "required when type is Localhost")
		}
	case corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined:
		if p.LocalhostProfile != nil {
			c.add(f+".localhostProfile", "may only be set when type is Localhost")
		}
	case "":
		c.add(f+".type", "required")
	default:
		c.add(f+".type", "must be RuntimeDefault, Unconfined or Localhost, got %q", p.Type)
	}
}

func (c *specChecker) tolerations(f string, ts []corev1.Toleration) {
	for i, t := range ts {
		tf := fmt.Sprintf("%s[%d]", f, i)
		if t.Key != "" && len(validation.IsQualifiedName(t.Key)) > 0 {
			c.add(tf+".key", "%q is not a valid taint key", t.Key)
		}
		switch t.Operator {
		case corev1.TolerationOpExists:
			if t.Value != "" {
				c.add(tf+".value", "must be empty when operator is Exists")
			}
		case "", corev1.TolerationOpEqual:
			if t.Key == "" {
				c.add(tf+".operator", "must be Exists when key is empty")
			}
		default:
			c.add(tf+".operator", "must be Equal or Exists, got %q", t.Operator)
		}
		c.enum(tf+".effect", string(t.Effect), "NoSchedule", "PreferNoSchedule", "NoExecute")
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			c.add(tf+".tolerationSeconds", "only allowed with effect NoExecute")
		}
	}
}

func (c *specChecker) topologySpread(f string, cs []corev1.TopologySpreadConstraint) {
	for i, t := range cs {
		tf := fmt.Sprintf("%s[%d]", f, i)
		if t.MaxSkew < 1 {
			c.add(tf+".maxSkew", "must be at least 1, got %d", t.MaxSkew)
		}
		if t.TopologyKey == "" {
			c.add(tf+".topologyKey", "required")
		}
		if t.WhenUnsatisfiable == "" {
			c.add(tf+".whenUnsatisfiable", "required")
		} else {
			c.enum(tf+".whenUnsatisfiable", string(t.WhenUnsatisfiable), "DoNotSchedule", "ScheduleAnyway")
		}
	}
}

// labels checks keys and values of a label map, such as a nodeSelector.
func (c *specChecker) labels(f string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			c.add(f+"."+k, "%q is not a valid label key: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(m[k]); len(msgs) > 0 {
			c.add(f+"."+k, "%q is not a valid label value: %s", m[k], strings.Join(msgs, "; "))
		}
	}
}

// affinity checks node affinity terms and the pod (anti-)affinity terms people add; the renderer
// adds its own pinning to the node terms.
func (c *specChecker) affinity(f string, a *corev1.Affinity) {
	if a == nil {
		return
	}
	if na := a.NodeAffinity; na != nil {
		if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			for i, t := range r.NodeSelectorTerms {
				c.nodeSelectorTerm(fmt.Sprintf("%s.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[%d]", f, i), t)
			}
		}
		for i, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			pf := fmt.Sprintf("%s.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[%d]", f, i)
			if p.Weight < 1 || p.Weight > 100 {
				c.add(pf+".weight", "must be between 1 and 100, got %d", p.Weight)
			}
			c.nodeSelectorTerm(pf+".preference", p.Preference)
		}
	}
	if pa := a.PodAffinity; pa != nil {
		c.podAffinityTerms(f+".podAffinity", pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		c.podAffinityTerms(f+".podAntiAffinity", pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution)
	}
}

func (c *specChecker) nodeSelectorTerm(f string, t corev1.NodeSelectorTerm) {
	for i, r := range t.MatchExpressions {
		rf := fmt.Sprintf("%s.matchExpressions[%d]", f, i)
		if msgs := validation.IsQualifiedName(r.Key); len(msgs) > 0 {
			c.add(rf+".key", "%q is not a valid label key: %s", r.Key, strings.Join(msgs, "; "))
		}
		c.selectorOperator(rf, string(r.Operator), len(r.Values), true)
	}
	if len(t.MatchFields) > 0 {
		c.add(f+".matchFields", "not allowed: gitbroker pins each broker to the nodes that see its device with matchFields of its own")
	}
}

// selectorOperator checks a requirement's operator and the number of its values.
func (c *specChecker) selectorOperator(f, op string, values int, node bool) {
	switch op {
	case "In", "NotIn":
		if values == 0 {
			c.add(f+".values", "must have at least one value when the operator is %s", op)
		}
	case "Exists", "DoesNotExist":
		if values > 0 {
			c.add(f+".values", "must be empty when the operator is %s", op)
		}
	case "Gt", "Lt":
		if !node {
			c.add(f+".operator", "must be In, NotIn, Exists or DoesNotExist, got %q", op)
		} else if values != 1 {
			c.add(f+".values", "must have exactly one value when the operator is %s", op)
		}
	default:
		if node {
			c.add(f+".operator", "must be In, NotIn, Exists, DoesNotExist, Gt or Lt, got %q", op)
		} else {
			c.add(f+".operator", "must be In, NotIn, Exists or DoesNotExist, got %q", op)
		}
	}
}

func (c *specChecker) podAffinityTerms(f string, required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm) {
	term := func(tf string, t corev1.PodAffinityTerm) {
		if t.TopologyKey == "" {
			c.add(tf+".topologyKey", "required")
		} else if msgs := validation.IsQualifiedName(t.TopologyKey); len(msgs) > 0 {
			c.add(tf+".topologyKey", "%q is not a valid label key: %s", t.TopologyKey, strings.Join(msgs, "; "))
		}
		if s := t.LabelSelector; s != nil {
			c.labels(tf+".labelSelector.matchLabels", s.MatchLabels)
			for i, r := range s.MatchExpressions {
				c.selectorOperator(fmt.Sprintf("%s.labelSelector.matchExpressions[%d]", tf, i), string(r.Operator), len(r.Values), false)
			}
		}
	}
	for i, t := range required {
		term(fmt.Sprintf("%s.requiredDuringSchedulingIgnoredDuringExecution[%d]", f, i), t)
	}
	for i, w := range preferred {
		pf := fmt.Sprintf("%s.preferredDuringSchedulingIgnoredDuringExecution[%d]", f, i)
		if w.Weight < 1 || w.Weight > 100 {
			c.add(pf+".weight", "must be between 1 and 100, got %d", w.Weight)
		}
		term(pf+".podAffinityTerm", w.PodAffinityTerm)
	}
}
