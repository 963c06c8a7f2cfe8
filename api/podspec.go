package api

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Checks of a broker's Pod spec as the API server makes them (k8s.io/kubernetes
// pkg/apis/core/validation, ValidatePodSpec and what it calls), for the fields people write in a
// Configuration, so that review refuses what apply would. testdata/mistakes/ holds a row for the
// mistakes people make most (93 of them, not one per rule), which e2e's TestMistakesCorpus
// submits to a real API server so the corpus and these rules stay true to it. Where
// Kubernetes versions differ, the rule is the strictest of the versions gitbroker supports
// (1.30 and later), so what passes here is accepted by all of them. Image references are checked
// as the kubelet parses them: the API server accepts "Nginx:latest:v2" and the Pod then never
// starts (InvalidImageName).

// specChecker collects the errors of one Pod spec at field, a path in the Configuration.
type specChecker struct {
	d     *Document
	field string
	job   bool
	errs  ErrorList
}

func (c *specChecker) add(field, format string, args ...any) {
	c.errs = append(c.errs, c.d.Errorf(field, format, args...))
}

func validatePodSpec(d *Document, field string, ps *corev1.PodSpec, job bool) ErrorList {
	c := &specChecker{d: d, field: field, job: job}
	if len(ps.Containers) == 0 {
		c.add(field+".containers", "at least one container is required")
	}
	volumes := c.volumes(ps.Volumes)
	seen := map[string]bool{}
	for i := range ps.InitContainers {
		f := fmt.Sprintf("%s.initContainers[%d]", field, i)
		c.container(f, &ps.InitContainers[i], volumes, seen, ps.HostNetwork)
		if p := ps.InitContainers[i].RestartPolicy; p != nil && *p != corev1.ContainerRestartPolicyAlways {
			c.add(f+".restartPolicy", "an init container's restartPolicy may only be Always (a sidecar; Kubernetes before the container restart rules refuses any other), got %q", *p)
		}
	}
	for i := range ps.Containers {
		f := fmt.Sprintf("%s.containers[%d]", field, i)
		c.container(f, &ps.Containers[i], volumes, seen, ps.HostNetwork)
		c.probe(f+".startupProbe", ps.Containers[i].StartupProbe, true)
		c.probe(f+".livenessProbe", ps.Containers[i].LivenessProbe, true)
		c.probe(f+".readinessProbe", ps.Containers[i].ReadinessProbe, false)
	}
	c.pod(ps)
	return c.errs
}

func (c *specChecker) pod(ps *corev1.PodSpec) {
	f := c.field
	switch ps.RestartPolicy {
	case "", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		c.add(f+".restartPolicy", "must be Always, OnFailure or Never, got %q", ps.RestartPolicy)
	}
	if c.job && ps.RestartPolicy != corev1.RestartPolicyNever && ps.RestartPolicy != corev1.RestartPolicyOnFailure {
		c.add(f+".restartPolicy", "a Job's Pods need restartPolicy Never or OnFailure, got %q", ps.RestartPolicy)
	}
	if !c.job && ps.RestartPolicy != "" && ps.RestartPolicy != corev1.RestartPolicyAlways {
		c.add(f+".restartPolicy", "a Pod broker runs as a Deployment, whose Pods need restartPolicy Always, got %q", ps.RestartPolicy)
	}
	if !c.job && ps.ActiveDeadlineSeconds != nil {
		c.add(f+".activeDeadlineSeconds", "not allowed for a Pod broker: it runs as a Deployment, which refuses it (a broker that should end is a Job broker)")
	}
	if ps.NodeName != "" {
		c.add(f+".nodeName", "not allowed: gitbroker pins brokers to the nodes that see the device")
	}
	c.enum(f+".dnsPolicy", string(ps.DNSPolicy), "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
	if ps.DNSPolicy == corev1.DNSNone && (ps.DNSConfig == nil || len(ps.DNSConfig.Nameservers) == 0) {
		c.add(f+".dnsPolicy", "None needs at least one nameserver in dnsConfig.nameservers")
	}
	c.labels(f+".nodeSelector", ps.NodeSelector)
	c.tolerations(f+".tolerations", ps.Tolerations)
	c.dnsNames(f, ps)
	if ps.ActiveDeadlineSeconds != nil && *ps.ActiveDeadlineSeconds < 1 {
		c.add(f+".activeDeadlineSeconds", "must be at least 1, got %d", *ps.ActiveDeadlineSeconds)
	}
	if g := ps.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		c.add(f+".terminationGracePeriodSeconds", "must not be negative, got %d", *g)
	}
	for i, s := range ps.ImagePullSecrets {
		if s.Name == "" {
			c.add(fmt.Sprintf("%s.imagePullSecrets[%d].name", f, i), "required")
		}
	}
	c.podSecurity(f+".securityContext", ps.SecurityContext)
	c.topologySpread(f+".topologySpreadConstraints", ps.TopologySpreadConstraints)
	c.affinity(f+".affinity", ps.Affinity)
	if ps.Resources != nil {
		c.resources(f+".resources", ps.Resources, true)
	}
}

func (c *specChecker) dnsNames(f string, ps *corev1.PodSpec) {
	names := []struct{ field, value string }{
		{".hostname", ps.Hostname}, {".subdomain", ps.Subdomain},
	}
	for _, n := range names {
		if n.value != "" && len(validation.IsDNS1123Label(n.value)) > 0 {
			c.add(f+n.field, "%q is not a valid DNS label (lower case letters, digits and '-', at most 63)", n.value)
		}
	}
	subdomains := []struct{ field, value string }{
		{".serviceAccountName", ps.ServiceAccountName}, {".priorityClassName", ps.PriorityClassName},
	}
	for _, n := range subdomains {
		if n.value != "" && len(validation.IsDNS1123Subdomain(n.value)) > 0 {
			c.add(f+n.field, "%q is not a valid name (lower case letters, digits, '-' and '.')", n.value)
		}
	}
}

func (c *specChecker) container(f string, ct *corev1.Container, volumes map[string]bool, seen map[string]bool, hostNetwork bool) {
	switch {
	case ct.Name == "":
		c.add(f+".name", "required")
	case len(validation.IsDNS1123Label(ct.Name)) > 0:
		c.add(f+".name", "%q is not a valid container name (lower case letters, digits and '-')", ct.Name)
	case seen[ct.Name]:
		c.add(f+".name", "duplicate container name %q", ct.Name)
	}
	seen[ct.Name] = true
	c.image(f+".image", ct.Image)
	c.enum(f+".imagePullPolicy", string(ct.ImagePullPolicy), "Always", "IfNotPresent", "Never")
	c.enum(f+".terminationMessagePolicy", string(ct.TerminationMessagePolicy), "File", "FallbackToLogsOnError")
	c.ports(f+".ports", ct.Ports, hostNetwork)
	c.env(f, ct)
	c.resources(f+".resources", &ct.Resources, false)
	privileged := ct.SecurityContext != nil && ct.SecurityContext.Privileged != nil && *ct.SecurityContext.Privileged
	c.mounts(f+".volumeMounts", ct.VolumeMounts, volumes, privileged)
	c.security(f+".securityContext", ct.SecurityContext)
}

func (c *specChecker) image(f, image string) {
	switch {
	case image == "":
		c.add(f, "required")
	case strings.TrimSpace(image) != image:
		c.add(f, "%q has leading or trailing whitespace", image)
	default:
		if _, err := reference.ParseNormalizedNamed(image); err != nil {
			c.add(f, "%q is not an image reference the kubelet can pull (%v); the Pod would never start (InvalidImageName)", image, err)
		}
	}
}

// enum refuses a set value that is not one of allowed; empty means the API server's default.
func (c *specChecker) enum(f, value string, allowed ...string) {
	if value == "" {
		return
	}
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	c.add(f, "must be %s, got %q", orList(allowed), value)
}

func orList(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

func (c *specChecker) ports(f string, ports []corev1.ContainerPort, hostNetwork bool) {
	names := map[string]bool{}
	for i, p := range ports {
		pf := fmt.Sprintf("%s[%d]", f, i)
		if p.Name != "" {
			if len(validation.IsValidPortName(p.Name)) > 0 {
				c.add(pf+".name", "%q is not a valid port name (at most 15 lower case letters, digits and '-', with a letter)", p.Name)
			} else if names[p.Name] {
				c.add(pf+".name", "duplicate port name %q", p.Name)
			}
			names[p.Name] = true
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			c.add(pf+".containerPort", "must be between 1 and 65535, got %d", p.ContainerPort)
		}
		if p.HostPort < 0 || p.HostPort > 65535 {
			c.add(pf+".hostPort", "must be between 0 and 65535, got %d", p.HostPort)
		}
		if hostNetwork && p.HostPort != 0 && p.HostPort != p.ContainerPort {
			c.add(pf+".hostPort", "must equal containerPort (%d) when hostNetwork is true, got %d", p.ContainerPort, p.HostPort)
		}
		c.enum(pf+".protocol", string(p.Protocol), "TCP", "UDP", "SCTP")
	}
}

func (c *specChecker) env(f string, ct *corev1.Container) {
	for i, e := range ct.Env {
		ef := fmt.Sprintf("%s.env[%d]", f, i)
		switch {
		case e.Name == "":
			c.add(ef+".name", "required")
		case len(validation.IsEnvVarName(e.Name)) > 0:
			c.add(ef+".name", "%q is not a valid environment variable name (letters, digits, '_', '-' and '.', not starting with a digit)", e.Name)
		}
		if e.ValueFrom == nil {
			continue
		}
		if e.Value != "" {
			c.add(ef+".valueFrom", "set only one of value and valueFrom")
		}
		c.envSource(ef+".valueFrom", e.ValueFrom)
	}
	for i, e := range ct.EnvFrom {
		ef := fmt.Sprintf("%s.envFrom[%d]", f, i)
		if (e.ConfigMapRef == nil) == (e.SecretRef == nil) {
			c.add(ef, "set exactly one of configMapRef and secretRef")
		}
		if e.Prefix != "" && len(validation.IsEnvVarName(e.Prefix)) > 0 {
			c.add(ef+".prefix", "%q is not a valid environment variable prefix", e.Prefix)
		}
	}
}

func (c *specChecker) envSource(f string, s *corev1.EnvVarSource) {
	n := 0
	if s.FieldRef != nil {
		n++
		if s.FieldRef.FieldPath == "" {
			c.add(f+".fieldRef.fieldPath", "required")
		}
	}
	if s.ResourceFieldRef != nil {
		n++
	}
	if r := s.ConfigMapKeyRef; r != nil {
		n++
		c.keyRef(f+".configMapKeyRef", r.Name, r.Key)
	}
	if r := s.SecretKeyRef; r != nil {
		n++
		c.keyRef(f+".secretKeyRef", r.Name, r.Key)
	}
	if s.FileKeyRef != nil {
		n++
	}
	if n != 1 {
		c.add(f, "set exactly one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef and fileKeyRef")
	}
}

func (c *specChecker) keyRef(f, name, key string) {
	if name == "" {
		c.add(f+".name", "required")
	}
	if key == "" {
		c.add(f+".key", "required")
	} else if len(validation.IsConfigMapKey(key)) > 0 {
		c.add(f+".key", "%q is not a valid key (letters, digits, '-', '_' and '.')", key)
	}
}
