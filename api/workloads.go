package api

import (
	"fmt"
	"net/netip"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Checks of a brokerJobSpec and of the Service specs as the API server makes them
// (pkg/apis/batch/validation ValidateJobSpec, pkg/apis/core/validation ValidateService), for the
// fields a Configuration carries; the renderer sets the selectors, names and pinning itself.

func validateJobSpec(d *Document, field string, js *batchv1.JobSpec) ErrorList {
	c := &specChecker{d: d, field: field, job: true}
	if js.TTLSecondsAfterFinished != nil {
		c.add(field+".ttlSecondsAfterFinished",
			"not allowed: once the Job is deleted by its TTL, Flux or Argo CD re-creates it from git and it runs again; finished Jobs are kept as history instead")
	}
	if js.Selector != nil {
		c.add(field+".selector", "not allowed: the Job controller generates the selector")
	}
	if js.ManualSelector != nil && *js.ManualSelector {
		c.add(field+".manualSelector", "not allowed: the Job controller generates the selector")
	}
	for _, n := range []struct {
		name string
		v    *int32
	}{{"parallelism", js.Parallelism}, {"completions", js.Completions}, {"backoffLimit", js.BackoffLimit},
		{"backoffLimitPerIndex", js.BackoffLimitPerIndex}, {"maxFailedIndexes", js.MaxFailedIndexes}} {
		if n.v != nil && *n.v < 0 {
			c.add(field+"."+n.name, "must be greater than or equal to 0, got %d", *n.v)
		}
	}
	if js.ActiveDeadlineSeconds != nil && *js.ActiveDeadlineSeconds < 0 {
		c.add(field+".activeDeadlineSeconds", "must be greater than or equal to 0, got %d", *js.ActiveDeadlineSeconds)
	}
	indexed := js.CompletionMode != nil && *js.CompletionMode == batchv1.IndexedCompletion
	if js.CompletionMode != nil {
		c.enum(field+".completionMode", string(*js.CompletionMode), "NonIndexed", "Indexed")
	}
	if indexed && js.Completions == nil && js.Parallelism != nil {
		// With neither set, both default to 1.
		c.add(field+".completionMode", "Indexed needs completions (the number of indexes) when parallelism is set")
	}
	if !indexed && js.BackoffLimitPerIndex != nil {
		c.add(field+".backoffLimitPerIndex", "requires completionMode: Indexed")
	}
	if js.MaxFailedIndexes != nil && js.BackoffLimitPerIndex == nil {
		c.add(field+".backoffLimitPerIndex", "required when maxFailedIndexes is set")
	}
	if js.PodFailurePolicy != nil && js.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		c.add(field+".template.spec.restartPolicy", "must be Never when podFailurePolicy is set, got %q", js.Template.Spec.RestartPolicy)
	}
	c.labels(field+".template.metadata.labels", js.Template.Labels)
	c.errs = append(c.errs, validatePodSpec(d, field+".template.spec", &js.Template.Spec, true)...)
	return c.errs
}

// validateServiceSpec checks a Service spec; perInstance says it is applied to one Service per
// instance, which therefore cannot share a fixed address.
func validateServiceSpec(d *Document, field string, s *corev1.ServiceSpec, perInstance bool) ErrorList {
	c := &specChecker{d: d, field: field}
	switch s.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		c.add(field+".type", "must be ClusterIP, NodePort or LoadBalancer, got %q", s.Type)
	}
	external := s.Type == corev1.ServiceTypeNodePort || s.Type == corev1.ServiceTypeLoadBalancer
	if len(s.Ports) == 0 && s.ClusterIP != corev1.ClusterIPNone {
		c.add(field+".ports", "at least one port is required")
	}
	c.servicePorts(field, s, external)
	c.serviceIPs(field, s, external, perInstance)
	c.enum(field+".sessionAffinity", string(s.SessionAffinity), "None", "ClientIP")
	if cfg := s.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil {
		if s.SessionAffinity != corev1.ServiceAffinityClientIP {
			c.add(field+".sessionAffinityConfig", "may only be set when sessionAffinity is ClientIP")
		} else if t := *cfg.ClientIP.TimeoutSeconds; t < 1 || t > 86400 {
			c.add(field+".sessionAffinityConfig.clientIP.timeoutSeconds", "must be between 1 and 86400, got %d", t)
		}
	}
	if s.ExternalTrafficPolicy != "" {
		if !external {
			c.add(field+".externalTrafficPolicy", "may only be set for a NodePort or LoadBalancer Service")
		}
		c.enum(field+".externalTrafficPolicy", string(s.ExternalTrafficPolicy), "Cluster", "Local")
	}
	if s.InternalTrafficPolicy != nil {
		c.enum(field+".internalTrafficPolicy", string(*s.InternalTrafficPolicy), "Cluster", "Local")
	}
	if len(s.LoadBalancerSourceRanges) > 0 && s.Type != corev1.ServiceTypeLoadBalancer {
		c.add(field+".loadBalancerSourceRanges", "may only be set for a LoadBalancer Service")
	}
	for i, r := range s.LoadBalancerSourceRanges {
		if _, err := netip.ParsePrefix(strings.TrimSpace(r)); err != nil {
			c.add(fmt.Sprintf("%s.loadBalancerSourceRanges[%d]", field, i), "%q is not a CIDR such as 10.0.0.0/8", r)
		}
	}
	return c.errs
}

func (c *specChecker) servicePorts(field string, s *corev1.ServiceSpec, external bool) {
	names := map[string]bool{}
	pairs := map[string]bool{}
	for i, p := range s.Ports {
		f := fmt.Sprintf("%s.ports[%d]", field, i)
		if p.Port < 1 || p.Port > 65535 {
			c.add(f+".port", "must be between 1 and 65535, got %d", p.Port)
		}
		if p.TargetPort.StrVal != "" {
			if msgs := validation.IsValidPortName(p.TargetPort.StrVal); len(msgs) > 0 {
				c.add(f+".targetPort", "%q is not a valid port name: %s", p.TargetPort.StrVal, strings.Join(msgs, "; "))
			}
		} else if p.TargetPort.IntVal < 0 || p.TargetPort.IntVal > 65535 {
			c.add(f+".targetPort", "must be between 1 and 65535, got %d", p.TargetPort.IntVal)
		}
		if p.NodePort != 0 {
			if !external {
				c.add(f+".nodePort", "may not be used when the Service's type is ClusterIP")
			} else if p.NodePort < 1 || p.NodePort > 65535 {
				c.add(f+".nodePort", "must be between 1 and 65535, got %d", p.NodePort)
			}
		}
		c.enum(f+".protocol", string(p.Protocol), "TCP", "UDP", "SCTP")
		pair := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.Protocol == "" {
			pair = fmt.Sprintf("%d/TCP", p.Port)
		}
		if pairs[pair] {
			c.add(f+".port", "duplicate port and protocol %s", pair)
		}
		pairs[pair] = true
		if len(s.Ports) > 1 && p.Name == "" {
			c.add(f+".name", "required when a Service has more than one port")
		}
		if p.Name != "" {
			if msgs := validation.IsDNS1123Label(p.Name); len(msgs) > 0 {
				c.add(f+".name", "%q is not a valid port name: %s", p.Name, strings.Join(msgs, "; "))
			} else if names[p.Name] {
				c.add(f+".name", "duplicate port name %q", p.Name)
			}
			names[p.Name] = true
		}
		if p.AppProtocol != nil {
			if msgs := validation.IsQualifiedName(*p.AppProtocol); len(msgs) > 0 {
				c.add(f+".appProtocol", "%q is not a valid protocol name: %s", *p.AppProtocol, strings.Join(msgs, "; "))
			}
		}
	}
}

func (c *specChecker) serviceIPs(field string, s *corev1.ServiceSpec, external, perInstance bool) {
	switch {
	case s.ClusterIP == "":
	case s.ClusterIP == corev1.ClusterIPNone:
		if external {
			c.add(field+".clusterIP", "may not be None for a %s Service", s.Type)
		}
	case perInstance:
		c.add(field+".clusterIP", "not allowed: the spec is applied to one Service per instance, and two cannot share %q; leave it empty or None", s.ClusterIP)
	default:
		if _, err := netip.ParseAddr(s.ClusterIP); err != nil {
			c.add(field+".clusterIP", "%q is not an IP address, \"None\" or empty", s.ClusterIP)
		}
	}
	if len(s.ClusterIPs) > 0 && perInstance {
		c.add(field+".clusterIPs", "not allowed: the spec is applied to one Service per instance, which cannot share addresses")
	}
	for i, ip := range s.ExternalIPs {
		if _, err := netip.ParseAddr(ip); err != nil {
			c.add(fmt.Sprintf("%s.externalIPs[%d]", field, i), "%q is not an IP address", ip)
		}
	}
	if s.IPFamilyPolicy != nil {
		c.enum(field+".ipFamilyPolicy", string(*s.IPFamilyPolicy), "SingleStack", "PreferDualStack", "RequireDualStack")
	}
	if len(s.IPFamilies) > 2 {
		c.add(field+".ipFamilies", "at most two (IPv4 and IPv6), got %d", len(s.IPFamilies))
	}
	seen := map[corev1.IPFamily]bool{}
	for i, fam := range s.IPFamilies {
		f := fmt.Sprintf("%s.ipFamilies[%d]", field, i)
		c.enum(f, string(fam), "IPv4", "IPv6")
		if seen[fam] {
			c.add(f, "duplicate %q", fam)
		}
		seen[fam] = true
	}
}
