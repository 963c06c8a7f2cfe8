package api

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// configurationSetting is one of gitbroker's own settings of a Configuration: a field under spec
// on gitbroker.dev/v1alpha1 and an annotation that sets it on either apiVersion. A new setting
// is a row of configurationSettings, a field of Policy, and, when a builder reads it, a part of
// that builder's hash (render's hash_test.go fails until it is).
type configurationSetting struct {
	// field is the field under spec on gitbroker.dev/v1alpha1, "" for an annotation only.
	field string
	// annotations set it on either apiVersion (the log capture has three).
	annotations []string
	// def is its value when it is not set, as the docs give it.
	def string
	// broker is "Job" or "Pod" when the setting is only for that broker, "" for either.
	broker string
	// inSpec reports whether the Configuration sets the field.
	inSpec func(c *Configuration) bool
	// resolve reads the setting into the policy, reporting what is wrong with it.
	resolve func(r *policyReader, s *configurationSetting)
}

// configurationSettings are gitbroker's settings of a Configuration.
var configurationSettings = []*configurationSetting{{
	field: "jobPolicy.runPolicy", annotations: []string{AnnotationRunPolicy}, def: RunPolicyOnChange, broker: "Job",
	inSpec:  func(c *Configuration) bool { return jobPolicyOf(c).RunPolicy != "" },
	resolve: enumSetting(func(c *Configuration) string { return jobPolicyOf(c).RunPolicy }, func(p *Policy) *string { return &p.RunPolicy }, RunPolicyOnChange, RunPolicyOnce),
}, {
	field: "jobPolicy.concurrency", annotations: []string{AnnotationConcurrency}, def: ConcurrencyForbid, broker: "Job",
	inSpec:  func(c *Configuration) bool { return jobPolicyOf(c).Concurrency != "" },
	resolve: enumSetting(func(c *Configuration) string { return jobPolicyOf(c).Concurrency }, func(p *Policy) *string { return &p.Concurrency }, ConcurrencyForbid, ConcurrencyAllow),
}, {
	field: "jobPolicy.historyLimit", annotations: []string{AnnotationHistoryLimit}, def: strconv.Itoa(DefaultHistoryLimit), broker: "Job",
	inSpec:  func(c *Configuration) bool { return jobPolicyOf(c).HistoryLimit != nil },
	resolve: intSetting(func(c *Configuration) *int32 { return jobPolicyOf(c).HistoryLimit }, func(p *Policy) *int { return &p.HistoryLimit }, 0, -1),
}, {
	field: "jobPolicy.runID", annotations: []string{AnnotationRunID}, broker: "Job",
	inSpec:  func(c *Configuration) bool { return jobPolicyOf(c).RunID != "" },
	resolve: stringSetting(func(c *Configuration) string { return jobPolicyOf(c).RunID }, func(p *Policy) *string { return &p.RunID }),
}, {
	field: "jobPolicy.logs", annotations: []string{AnnotationLogTailLines, AnnotationLogTailBytes, AnnotationLogRedact}, def: "off", broker: "Job",
	inSpec: func(c *Configuration) bool { return jobPolicyOf(c).Logs != nil },
	resolve: func(r *policyReader, _ *configurationSetting) {
		logs, errs := resolveLogPolicy(jobPolicyOf(r.c).Logs, r.c.Annotations)
		for _, e := range errs {
			r.add(e.field, "%s", e.msg)
		}
		r.pol.Logs = logs
	},
}, {
	field: "after", annotations: []string{AnnotationAfter}, broker: "Pod",
	inSpec:  func(c *Configuration) bool { return c.Spec.After != "" },
	resolve: stringSetting(func(c *Configuration) string { return c.Spec.After }, func(p *Policy) *string { return &p.After }),
}, {
	field: "shards", annotations: []string{AnnotationShards}, def: strconv.Itoa(DefaultShards),
	inSpec:  func(c *Configuration) bool { return c.Spec.Shards != nil },
	resolve: intSetting(func(c *Configuration) *int32 { return c.Spec.Shards }, func(p *Policy) *int { return &p.Shards }, 1, 1000),
}, {
	field: "rollout.maxChanged", annotations: []string{AnnotationRolloutMaxChanged}, def: "all at once", broker: "Pod",
	inSpec:  func(c *Configuration) bool { return c.Spec.Rollout != nil && c.Spec.Rollout.MaxChanged != nil },
	resolve: resolveRollout,
}, {
	field: "rollout.progressDeadline", annotations: []string{AnnotationRolloutProgressDeadline}, def: "10m (Kubernetes' own)", broker: "Pod",
	inSpec:  func(c *Configuration) bool { return c.Spec.Rollout != nil && c.Spec.Rollout.ProgressDeadline != "" },
	resolve: resolveProgressDeadline,
}, {
	field: "allowedDeviceProperties", annotations: []string{AnnotationAllowedDeviceProperties},
	inSpec:  func(c *Configuration) bool { return c.Spec.AllowedDeviceProperties != nil },
	resolve: resolveAllowedDeviceProperties,
}, {
	field: "allowedHostPaths", annotations: []string{AnnotationAllowedHostPaths}, def: "/dev only",
	inSpec:  func(c *Configuration) bool { return c.Spec.AllowedHostPaths != nil },
	resolve: resolveAllowedHostPaths,
}, {
	field: "clusterSelector", annotations: []string{AnnotationClusters}, def: "every cluster",
	inSpec:  func(c *Configuration) bool { return c.Spec.ClusterSelector != nil },
	resolve: resolveClusterSelector,
}, {
	annotations: []string{AnnotationOfflineGracePeriod}, def: "5m shared, 30s local (the agent's)",
	resolve: func(r *policyReader, _ *configurationSetting) {
		if v, ok := r.c.Annotations[AnnotationOfflineGracePeriod]; ok {
			if d, err := time.ParseDuration(v); err != nil || d < 0 {
				r.add("metadata.annotations."+AnnotationOfflineGracePeriod, "expected a duration such as \"5m\" or \"30s\", got %q", v)
			}
		}
	},
}}

// gitbrokerAnnotations are the annotations of configurationSettings.
var gitbrokerAnnotations = func() map[string]bool {
	out := map[string]bool{}
	for _, s := range configurationSettings {
		for _, a := range s.annotations {
			out[a] = true
		}
	}
	return out
}()

func jobPolicyOf(c *Configuration) *JobPolicy {
	if c.Spec.JobPolicy == nil {
		return &JobPolicy{}
	}
	return c.Spec.JobPolicy
}

// policyReader reads gitbroker's settings of one Configuration.
type policyReader struct {
	c   *Configuration
	pol *Policy
	add func(field, format string, args ...any)
}

// resolvePolicy reads gitbroker's settings of a Configuration: a field given in spec on the
// Akri apiVersion is refused, an unknown gitbroker.dev/ annotation too, and a setting for a Job
// broker without one.
func resolvePolicy(c *Configuration, apiVersion string, add func(field, format string, args ...any)) Policy {
	pol := Policy{Capacity: DefaultCapacity, RunPolicy: RunPolicyOnChange, Concurrency: ConcurrencyForbid,
		HistoryLimit: DefaultHistoryLimit, Shards: DefaultShards}
	if c.Spec.Capacity != nil {
		if *c.Spec.Capacity < 1 {
			add("spec.capacity", "must be at least 1, got %d", *c.Spec.Capacity)
		}
		pol.Capacity = int(*c.Spec.Capacity)
	}
	if apiVersion == AkriAPIVersion {
		if c.Spec.JobPolicy != nil {
			add("spec.jobPolicy", "unknown field in %s; use apiVersion %s or the gitbroker.dev/* annotations", AkriAPIVersion, APIVersion)
		}
		for _, s := range configurationSettings {
			if s.inSpec != nil && !strings.HasPrefix(s.field, "jobPolicy.") && s.inSpec(c) {
				add("spec."+s.field, "unknown field in %s; use apiVersion %s or the %s annotation", AkriAPIVersion, APIVersion, s.annotations[0])
			}
		}
	}
	for _, k := range sortedKeys(c.Annotations) {
		if strings.HasPrefix(k, "gitbroker.dev/") && !gitbrokerAnnotations[k] {
			add("metadata.annotations."+k, "unknown gitbroker annotation")
		}
	}
	r := &policyReader{c: c, pol: &pol, add: add}
	jobSettings := c.Spec.JobPolicy != nil
	for _, s := range configurationSettings {
		s.resolve(r, s)
		for _, a := range s.annotations {
			if _, ok := c.Annotations[a]; ok && s.broker == "Job" {
				jobSettings = true
			}
		}
	}
	bs := c.Spec.BrokerSpec
	if jobSettings && (bs == nil || bs.BrokerJobSpec == nil) {
		add(policyField(c.Spec.JobPolicy != nil, "spec.jobPolicy", "gitbroker job policy annotations"), "a job policy needs spec.brokerSpec.brokerJobSpec")
	}
	if pol.After != "" {
		f := policyField(c.Spec.After != "", "spec.after", AnnotationAfter)
		if bs == nil || bs.BrokerPodSpec == nil {
			add(f, "after: needs spec.brokerSpec.brokerPodSpec; it holds broker Pods until a Job succeeded")
		}
		if msgs := validation.IsDNS1123Subdomain(pol.After); len(msgs) > 0 {
			add(f, "%q is not a valid Configuration name", pol.After)
		} else if pol.After == c.Name {
			add(f, "a Configuration cannot wait for itself")
		}
	}
	return pol
}

// str is the setting's value: the spec field's, else the annotation's. Both given must agree.
func (r *policyReader) str(s *configurationSetting, specVal string) string {
	ann := s.annotations[0]
	a, ok := r.c.Annotations[ann]
	if ok && specVal != "" && a != specVal {
		r.add("metadata.annotations."+ann, "conflicts with %s (%q); set one of them", "spec."+s.field, specVal)
	}
	if specVal != "" {
		return specVal
	}
	return a
}

// num is the setting's number, and whether it is set.
func (r *policyReader) num(s *configurationSetting, spec *int32) (int, bool) {
	ann := s.annotations[0]
	if a, ok := r.c.Annotations[ann]; ok {
		n, err := strconv.Atoi(a)
		if err != nil {
			r.add("metadata.annotations."+ann, "expected an integer, got %q", a)
			return 0, false
		}
		if spec != nil && int(*spec) != n {
			r.add("metadata.annotations."+ann, "conflicts with %s (%d); set one of them", "spec."+s.field, *spec)
		}
		return n, true
	}
	if spec != nil {
		return int(*spec), true
	}
	return 0, false
}

// where is the field an error about the setting names: the spec field when given there.
func (s *configurationSetting) where(c *Configuration) string {
	return policyField(s.inSpec(c), "spec."+s.field, s.annotations[0])
}

func stringSetting(get func(*Configuration) string, dst func(*Policy) *string) func(*policyReader, *configurationSetting) {
	return func(r *policyReader, s *configurationSetting) {
		*dst(r.pol) = r.str(s, get(r.c))
	}
}

// enumSetting is a setting that takes one of two values.
func enumSetting(get func(*Configuration) string, dst func(*Policy) *string, a, b string) func(*policyReader, *configurationSetting) {
	return func(r *policyReader, s *configurationSetting) {
		v := r.str(s, get(r.c))
		if v == "" {
			return
		}
		if v != a && v != b {
			r.add(s.where(r.c), "must be %s or %s, got %q", a, b, v)
		}
		*dst(r.pol) = v
	}
}

// intSetting is a number from min to max (no maximum when max < min).
func intSetting(get func(*Configuration) *int32, dst func(*Policy) *int, min, max int) func(*policyReader, *configurationSetting) {
	return func(r *policyReader, s *configurationSetting) {
		n, ok := r.num(s, get(r.c))
		if !ok {
			return
		}
		switch {
		case max < min && min == 0 && n < 0:
			r.add(s.where(r.c), "must not be negative, got %d", n)
		case max < min && n < min:
			r.add(s.where(r.c), "must be at least %d, got %d", min, n)
		case max >= min && (n < min || n > max):
			r.add(s.where(r.c), "must be between %d and %d, got %d", min, max, n)
		}
		*dst(r.pol) = n
	}
}

func resolveAllowedDeviceProperties(r *policyReader, _ *configurationSetting) {
	allowed, field := listSetting(r, r.c.Spec.AllowedDeviceProperties, "allowedDeviceProperties", AnnotationAllowedDeviceProperties)
	for _, n := range allowed {
		if msgs := validation.IsCIdentifier(n); len(msgs) > 0 {
			r.add(field, "%q is not a valid environment variable name", n)
		}
	}
	r.pol.AllowedDeviceProperties = allowed
}

// listSetting reads a list setting given as spec.<name> or as its comma-separated annotation
// (an empty annotation is an empty list), and the field to name in its errors.
func listSetting(r *policyReader, spec []string, name, annotation string) ([]string, string) {
	a, ok := r.c.Annotations[annotation]
	if !ok {
		return spec, "spec." + name
	}
	field := "metadata.annotations." + annotation
	if spec != nil {
		r.add(field, "conflicts with spec.%s; set one of them", name)
	}
	var out []string
	if strings.TrimSpace(a) != "" {
		for _, v := range strings.Split(a, ",") {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out, field
}

// resolveAllowedHostPaths reads the host path prefixes outside /dev the agent may serve: absolute,
// clean, and never the root itself.
func resolveAllowedHostPaths(r *policyReader, _ *configurationSetting) {
	allowed, field := listSetting(r, r.c.Spec.AllowedHostPaths, "allowedHostPaths", AnnotationAllowedHostPaths)
	for _, p := range allowed {
		switch {
		case !strings.HasPrefix(p, "/"):
			r.add(field, "%q is not an absolute path", p)
		case path.Clean(p) != p:
			r.add(field, "%q is not a clean path (write %q)", p, path.Clean(p))
		case p == "/":
			r.add(field, "%q would let a discovery handler mount any host path into a broker", p)
		}
	}
	r.pol.AllowedHostPaths = allowed
}

// HostPathAllowed reports whether the agent may give a broker the host path p: under /dev, or
// under one of the Configuration's allowed prefixes. p is cleaned first, so "/dev/../etc" is /etc.
func (p Policy) HostPathAllowed(hostPath string) bool {
	if !strings.HasPrefix(hostPath, "/") {
		return false
	}
	hostPath = path.Clean(hostPath)
	for _, prefix := range append([]string{"/dev"}, p.AllowedHostPaths...) {
		if hostPath == prefix || strings.HasPrefix(hostPath, prefix+"/") {
			return true
		}
	}
	return false
}

func policyField(inSpec bool, specField, ann string) string {
	if inSpec {
		return specField
	}
	if strings.HasPrefix(ann, "gitbroker.dev/") {
		return "metadata.annotations." + ann
	}
	return "metadata.annotations"
}

// Policy is a Configuration's gitbroker settings with annotations and defaults resolved.
type Policy struct {
	Capacity     int
	RunPolicy    string
	Concurrency  string
	HistoryLimit int
	RunID        string
	After        string
	Shards       int
	// AllowedDeviceProperties are the refused device properties this Configuration allows.
	// Omitted when empty, so Configurations without it hash (and render) as before.
	AllowedDeviceProperties []string `json:",omitempty"`
	// AllowedHostPaths are the host path prefixes outside /dev the agent may serve to brokers.
	AllowedHostPaths []string `json:",omitempty"`
	// Logs is the log capture the recorder applies to the Configuration's Jobs; nil is off.
	Logs *LogPolicy `json:",omitempty"`
	// RolloutMaxChanged stages changes of the broker Deployments: "3" or "30%"; "" changes
	// them all at once.
	RolloutMaxChanged string `json:",omitempty"`
	// RolloutProgressDeadline is the broker Deployments' progressDeadlineSeconds; 0 leaves
	// Kubernetes' default (10 minutes).
	RolloutProgressDeadline int32 `json:",omitempty"`
	// ClusterSelector is the clusters' label selector in its canonical form ("" for every
	// cluster); ClusterSelector() parses it.
	ClusterSelector string `json:",omitempty"`
}

// Clusters is the selector of the clusters the Configuration renders for; nil selects every
// cluster.
func (p *Policy) Clusters() labels.Selector {
	if p.ClusterSelector == "" {
		return nil
	}
	sel, err := labels.Parse(p.ClusterSelector)
	if err != nil {
		// resolveClusterSelector wrote it from a selector that parsed.
		panic(fmt.Sprintf("cluster selector %q: %v", p.ClusterSelector, err))
	}
	return sel
}

// resolveClusterSelector reads spec.clusterSelector (a LabelSelector) or the annotation
// gitbroker.dev/clusters (a selector string, as kubectl -l takes it).
func resolveClusterSelector(r *policyReader, _ *configurationSetting) {
	a, annotated := r.c.Annotations[AnnotationClusters]
	spec := r.c.Spec.ClusterSelector
	var sel labels.Selector
	switch {
	case annotated && spec != nil:
		r.add("metadata.annotations."+AnnotationClusters, "conflicts with spec.clusterSelector; set one of them")
		return
	case spec != nil:
		s, err := metav1.LabelSelectorAsSelector(spec)
		if err != nil {
			r.add("spec.clusterSelector", "%v", err)
			return
		}
		sel = s
	case annotated:
		s, err := labels.Parse(a)
		if err != nil {
			r.add("metadata.annotations."+AnnotationClusters, "not a label selector: %v", err)
			return
		}
		sel = s
	default:
		return
	}
	if sel.Empty() {
		return
	}
	r.pol.ClusterSelector = sel.String()
}

// Bounds of spec.rollout.progressDeadline.
const (
	MinProgressDeadline = 10 * time.Second
	MaxProgressDeadline = 24 * time.Hour
)

// resolveProgressDeadline reads spec.rollout.progressDeadline or its annotation: a Go duration
// of whole seconds from MinProgressDeadline to MaxProgressDeadline, for a Pod broker
// Configuration.
func resolveProgressDeadline(r *policyReader, s *configurationSetting) {
	var specVal string
	if ro := r.c.Spec.Rollout; ro != nil {
		specVal = ro.ProgressDeadline
	}
	v := r.str(s, specVal)
	if v == "" {
		return
	}
	field := s.where(r.c)
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		r.add(field, "expected a duration such as 5m or 90s, got %q", v)
		return
	case d%time.Second != 0 || d < MinProgressDeadline || d > MaxProgressDeadline:
		r.add(field, "expected whole seconds from %s to %s, got %q", MinProgressDeadline, MaxProgressDeadline, v)
		return
	}
	if bs := r.c.Spec.BrokerSpec; bs == nil || bs.BrokerPodSpec == nil {
		r.add(field, "a progress deadline needs spec.brokerSpec.brokerPodSpec; it is the broker Deployments' progressDeadlineSeconds")
		return
	}
	r.pol.RolloutProgressDeadline = int32(d / time.Second)
}

// resolveRollout reads spec.rollout.maxChanged or its annotation: a whole number of brokers from
// 1, or a percentage from 1% to 100%, for a Pod broker Configuration.
func resolveRollout(r *policyReader, s *configurationSetting) {
	var specVal string
	if ro := r.c.Spec.Rollout; ro != nil {
		if ro.MaxChanged == nil {
			if ro.ProgressDeadline == "" {
				r.add("spec.rollout.maxChanged", "required: how many brokers (3) or which share of them (\"30%\") change per render")
			}
			return
		}
		specVal = ro.MaxChanged.String()
	}
	v := r.str(s, specVal)
	if v == "" {
		return
	}
	field := s.where(r.c)
	if _, err := RolloutWave(v, 1); err != nil {
		r.add(field, "%v", err)
		return
	}
	if bs := r.c.Spec.BrokerSpec; bs == nil || bs.BrokerPodSpec == nil {
		r.add(field, "a staged rollout needs spec.brokerSpec.brokerPodSpec; it stages changes of broker Deployments")
		return
	}
	r.pol.RolloutMaxChanged = v
}

// RolloutWave is how many of total brokers may change in one render under maxChanged ("3" or
// "30%"): a share is rounded down, and a wave is never empty while a broker is left to change.
func RolloutWave(maxChanged string, total int) (int, error) {
	if pct, ok := strings.CutSuffix(maxChanged, "%"); ok {
		n, err := strconv.Atoi(pct)
		if err != nil || n < 1 || n > 100 {
			return 0, fmt.Errorf("expected a whole number of brokers from 1 or a percentage from 1%% to 100%%, got %q", maxChanged)
		}
		return max(1, total*n/100), nil
	}
	n, err := strconv.Atoi(maxChanged)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("expected a whole number of brokers from 1 or a percentage from 1%% to 100%%, got %q", maxChanged)
	}
	return n, nil
}
