package api

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ParsedConfiguration is one validated Configuration and where it came from.
type ParsedConfiguration struct {
	*Configuration
	Policy Policy
	Doc    *Document
}

// Key is "<namespace>/<name>".
func (c *ParsedConfiguration) Key() string { return c.Namespace + "/" + c.Name }

// IsJobBroker reports whether the Configuration's broker is a Job.
func (c *ParsedConfiguration) IsJobBroker() bool {
	return c.Spec.BrokerSpec != nil && c.Spec.BrokerSpec.BrokerJobSpec != nil
}

// IsPodBroker reports whether the Configuration's broker is a Pod.
func (c *ParsedConfiguration) IsPodBroker() bool {
	return c.Spec.BrokerSpec != nil && c.Spec.BrokerSpec.BrokerPodSpec != nil
}

// OfflineGracePeriod returns the Configuration's gitbroker.dev/offline-grace-period,
// if it sets one. The value was validated when the Configuration was parsed.
func (c *ParsedConfiguration) OfflineGracePeriod() (time.Duration, bool) {
	v, ok := c.Annotations[AnnotationOfflineGracePeriod]
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	return d, err == nil
}

func valueFromRef(p DiscoveryProperty, secret bool) *DiscoveryPropertyKeySelector {
	switch {
	case p.ValueFrom == nil:
		return nil
	case secret:
		return p.ValueFrom.SecretKeyRef
	}
	return p.ValueFrom.ConfigMapKeyRef
}

// ParseConfigurations decodes and validates every Configuration in one file. defaultNamespace
// fills in a missing metadata.namespace. A file is all or nothing: any error rejects the file.
func ParseConfigurations(file string, data []byte, defaultNamespace string) ([]*ParsedConfiguration, ErrorList) {
	docs, err := SplitDocuments(file, data)
	if err != nil {
		return nil, ErrorList{err.(*FieldError)}
	}
	if len(docs) == 0 {
		return nil, ErrorList{{File: file, Message: "no Configuration in file"}}
	}
	var out []*ParsedConfiguration
	var errs ErrorList
	// A List, as `kubectl get akric -o yaml` prints a cluster's Akri Configurations, is its
	// items.
	var expanded []*Document
	for _, d := range docs {
		items, isList, err := d.ListItems()
		switch {
		case err != nil:
			if fe, ok := err.(*FieldError); ok {
				errs = append(errs, fe)
			} else {
				errs = append(errs, d.Errorf("items", "%v", err))
			}
		case isList:
			expanded = append(expanded, items...)
		default:
			expanded = append(expanded, d)
		}
	}
	if len(expanded) == 0 && len(errs) == 0 {
		return nil, ErrorList{{File: file, Message: "no Configuration in file (an empty List)"}}
	}
	for _, d := range expanded {
		c, e := parseConfiguration(d, defaultNamespace)
		errs = append(errs, e...)
		if c != nil {
			out = append(out, c)
		}
	}
	if len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	return out, nil
}

func parseConfiguration(d *Document, defaultNamespace string) (*ParsedConfiguration, ErrorList) {
	apiVersion, kind := d.TypeMeta()
	if kind != KindConfiguration {
		return nil, ErrorList{d.Errorf("kind", "expected kind %q, got %q", KindConfiguration, kind)}
	}
	if apiVersion != AkriAPIVersion && apiVersion != APIVersion {
		return nil, ErrorList{d.Errorf("apiVersion", "expected %q or %q, got %q", AkriAPIVersion, APIVersion, apiVersion)}
	}
	var c Configuration
	if errs := d.DecodeStrict(&c); len(errs) > 0 {
		return nil, errs
	}
	var errs ErrorList
	add := func(field, format string, args ...any) { errs = append(errs, d.Errorf(field, format, args...)) }

	if c.Name == "" {
		add("metadata.name", "required")
	} else if msgs := validation.IsDNS1123Subdomain(c.Name); len(msgs) > 0 {
		add("metadata.name", "%q is not a valid name: %s", c.Name, strings.Join(msgs, "; "))
	} else if len(c.Name) > validation.LabelValueMaxLength {
		add("metadata.name", "%q is longer than %d characters; it is the value of the akri.sh/configuration label", c.Name, validation.LabelValueMaxLength)
	}
	if c.Namespace == "" {
		c.Namespace = defaultNamespace
	} else if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		add("metadata.namespace", "%q is not a valid namespace: %s", c.Namespace, strings.Join(msgs, "; "))
	}
	if c.Spec.DiscoveryHandler.Name == "" {
		add("spec.discoveryHandler.name", "required")
	}
	for i, p := range c.Spec.DiscoveryHandler.DiscoveryProperties {
		f := fmt.Sprintf("spec.discoveryHandler.discoveryProperties[%d]", i)
		if p.Name == "" {
			add(f+".name", "required")
		}
		if p.Value != nil && p.ValueFrom != nil {
			add(f+".valueFrom", "set only one of value and valueFrom")
		}
		if p.ValueFrom != nil && p.ValueFrom.SecretKeyRef != nil && p.ValueFrom.ConfigMapKeyRef != nil {
			add(f+".valueFrom", "set only one of secretKeyRef and configMapKeyRef")
		}
		for _, r := range []struct {
			field string
			ref   *DiscoveryPropertyKeySelector
		}{{"secretKeyRef", valueFromRef(p, true)}, {"configMapKeyRef", valueFromRef(p, false)}} {
			field, ref := r.field, r.ref
			if ref == nil {
				continue
			}
			rf := f + ".valueFrom." + field
			if msgs := validation.IsDNS1123Subdomain(ref.Name); len(msgs) > 0 {
				add(rf+".name", "%q is not a valid name: %s", ref.Name, strings.Join(msgs, "; "))
			}
			if msgs := validation.IsConfigMapKey(ref.Key); len(msgs) > 0 {
				add(rf+".key", "%q is not a valid key: %s", ref.Key, strings.Join(msgs, "; "))
			}
			if msgs := validation.IsDNS1123Label(ref.Namespace); ref.Namespace != "" && len(msgs) > 0 {
				add(rf+".namespace", "%q is not a valid namespace: %s", ref.Namespace, strings.Join(msgs, "; "))
			}
		}
	}

	for _, k := range sortedKeys(c.Spec.BrokerProperties) {
		if msgs := validation.IsCIdentifier(k); len(msgs) > 0 {
			add("spec.brokerProperties."+k, "%q is not a valid environment variable name (letters, digits and _, not starting with a digit)", k)
		}
	}
	pol := resolvePolicy(&c, apiVersion, add)
	bs := c.Spec.BrokerSpec
	isJob := bs != nil && bs.BrokerJobSpec != nil
	isPod := bs != nil && bs.BrokerPodSpec != nil
	if isJob && isPod {
		add("spec.brokerSpec", "set only one of brokerPodSpec and brokerJobSpec")
	}
	if isPod {
		errs = append(errs, validatePodSpec(d, "spec.brokerSpec.brokerPodSpec", bs.BrokerPodSpec, false)...)
	}
	if isJob {
		errs = append(errs, validateJobSpec(d, "spec.brokerSpec.brokerJobSpec", bs.BrokerJobSpec)...)
	}
	if s := c.Spec.InstanceServiceSpec; s != nil {
		errs = append(errs, validateServiceSpec(d, "spec.instanceServiceSpec", s, true)...)
	}
	if s := c.Spec.ConfigurationServiceSpec; s != nil {
		errs = append(errs, validateServiceSpec(d, "spec.configurationServiceSpec", s, false)...)
	}
	if (c.Spec.InstanceServiceSpec != nil || c.Spec.ConfigurationServiceSpec != nil) && c.Name != "" {
		if msgs := validation.IsDNS1035Label(strings.ReplaceAll(c.Name, ".", "-")); len(msgs) > 0 {
			add("metadata.name", "%q cannot name a Service (it must start with a letter): %s", c.Name, strings.Join(msgs, "; "))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &ParsedConfiguration{Configuration: &c, Policy: pol, Doc: d}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
