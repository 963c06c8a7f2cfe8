package api

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ParsedInventory is one validated NodeInventory.
type ParsedInventory struct {
	*NodeInventory
	Doc *Document
}

// NodeFromInventoryPath returns the node a path inventory/<node>.yaml belongs to.
func NodeFromInventoryPath(file string) string {
	return strings.TrimSuffix(path.Base(file), path.Ext(file))
}

// ParseInventory decodes and validates inventory/<node>.yaml. Entries without a namespace get
// defaultNamespace.
func ParseInventory(file string, data []byte, defaultNamespace string) (*ParsedInventory, ErrorList) {
	if len(data) > MaxInventorySize {
		return nil, ErrorList{{File: file, Line: 1, Message: fmt.Sprintf("inventory is %d bytes, above the limit of %d", len(data), MaxInventorySize)}}
	}
	if n := yamlEntries(data); n > MaxInventoryEntries {
		return nil, ErrorList{{File: file, Line: 1, Message: fmt.Sprintf("inventory has %d lines and flow entries, above the limit of %d", n, MaxInventoryEntries)}}
	}
	docs, err := SplitDocuments(file, data)
	if err != nil {
		return nil, ErrorList{err.(*FieldError)}
	}
	if len(docs) != 1 {
		return nil, ErrorList{{File: file, Message: fmt.Sprintf("expected exactly one NodeInventory document, found %d", len(docs))}}
	}
	d := docs[0]
	apiVersion, kind := d.TypeMeta()
	if kind != KindNodeInventory {
		return nil, ErrorList{d.Errorf("kind", "expected kind %q, got %q", KindNodeInventory, kind)}
	}
	if apiVersion != APIVersion {
		return nil, ErrorList{d.Errorf("apiVersion", "expected %q, got %q", APIVersion, apiVersion)}
	}
	var inv NodeInventory
	if errs := d.DecodeStrict(&inv); len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	var errs ErrorList
	more := 0
	add := func(field, format string, args ...any) {
		if len(errs) == MaxInventoryErrors {
			more++
			return
		}
		errs = append(errs, d.Errorf(field, format, args...))
	}
	node := NodeFromInventoryPath(file)
	switch {
	case inv.Name == "":
		add("metadata.name", "required")
	case inv.Name != node:
		add("metadata.name", "node %q does not match the file name: inventory/%s.yaml may only hold node %q", inv.Name, node, node)
	default:
		if msgs := validation.IsDNS1123Subdomain(inv.Name); len(msgs) > 0 {
			add("metadata.name", "%q is not a valid node name: %s", inv.Name, strings.Join(msgs, "; "))
		}
	}
	seen := map[string]bool{}
	for i := range inv.Spec.Configurations {
		ic := &inv.Spec.Configurations[i]
		f := fmt.Sprintf("spec.configurations[%d]", i)
		if ic.Name == "" {
			add(f+".name", "required")
		} else if msgs := validation.IsDNS1123Subdomain(ic.Name); len(msgs) > 0 {
			add(f+".name", "%q is not a valid Configuration name", ic.Name)
		}
		if ic.Namespace == "" {
			ic.Namespace = defaultNamespace
		} else if msgs := validation.IsDNS1123Label(ic.Namespace); len(msgs) > 0 {
			add(f+".namespace", "%q is not a valid namespace", ic.Namespace)
		}
		key := ic.Namespace + "/" + ic.Name
		if seen[key] {
			add(f+".name", "Configuration %s is listed twice", key)
		}
		seen[key] = true
		ids := map[string]bool{}
		for j, dev := range ic.Devices {
			df := fmt.Sprintf("%s.devices[%d]", f, j)
			if dev.ID == "" {
				add(df+".id", "required")
			} else if len(dev.ID) > MaxDeviceIDLength {
				add(df+".id", "device id is %d bytes, above the limit of %d", len(dev.ID), MaxDeviceIDLength)
			}
			if len(dev.Properties) > MaxPropertiesPerDevice {
				add(df+".properties", "%d properties, above the limit of %d per device", len(dev.Properties), MaxPropertiesPerDevice)
			}
			if n := propertiesSize(dev.Properties); n > MaxPropertiesSize {
				add(df+".properties", "names and values are %d bytes, above the limit of %d per device (each becomes two environment variables in every broker container, and a rendered object must stay far below the API server's request limit)", n, MaxPropertiesSize)
			}
			if len(dev.Mounts)+len(dev.DeviceSpecs) > MaxMountsPerDevice {
				add(df, "%d mounts and device specs, above the limit of %d per device", len(dev.Mounts)+len(dev.DeviceSpecs), MaxMountsPerDevice)
			}
			if ids[dev.ID] {
				add(df+".id", "device %q is listed twice", dev.ID)
			}
			ids[dev.ID] = true
			for _, k := range sortedKeys(dev.Properties) {
				switch {
				case len(k) > MaxPropertyNameLength:
					add(df+".properties", "a property name is %d bytes, above the limit of %d", len(k), MaxPropertyNameLength)
				case len(validation.IsCIdentifier(k)) > 0:
					add(df+".properties."+k, "%q is not a valid environment variable name (letters, digits and _, not starting with a digit)", k)
				case len(dev.Properties[k]) > MaxPropertyValueSize:
					add(df+".properties."+k, "value is %d bytes, above the limit of %d", len(dev.Properties[k]), MaxPropertyValueSize)
				}
			}
			for m, mt := range dev.Mounts {
				if mt.ContainerPath == "" || mt.HostPath == "" {
					add(fmt.Sprintf("%s.mounts[%d]", df, m), "containerPath and hostPath are required")
				}
			}
			for m, ds := range dev.DeviceSpecs {
				if ds.ContainerPath == "" || ds.HostPath == "" {
					add(fmt.Sprintf("%s.deviceSpecs[%d]", df, m), "containerPath and hostPath are required")
				}
			}
		}
	}
	if len(errs) > 0 {
		errs.Sort()
		if more > 0 {
			errs = append(errs, &FieldError{File: file, Message: fmt.Sprintf("and %d more errors", more)})
		}
		return nil, errs
	}
	return &ParsedInventory{NodeInventory: &inv, Doc: d}, nil
}

// ParsedJobRecord is one validated JobRecord.
type ParsedJobRecord struct {
	*JobRecord
	Doc *Document
}

// JobRecordsDir holds the JobRecords on the recorder's ref.
const JobRecordsDir = "status/jobs"

// JobRecordPath is where the recorder writes the record of a Job.
func JobRecordPath(namespace, job string) string {
	return path.Join(JobRecordsDir, namespace, job+".yaml")
}

// ParseJobRecord decodes and validates status/jobs/<namespace>/<job>.yaml. When file is empty the
// path check is skipped (records embedded in history files).
func ParseJobRecord(file string, d *Document) (*ParsedJobRecord, ErrorList) {
	apiVersion, kind := d.TypeMeta()
	if kind != KindJobRecord {
		return nil, ErrorList{d.Errorf("kind", "expected kind %q, got %q", KindJobRecord, kind)}
	}
	if apiVersion != APIVersion {
		return nil, ErrorList{d.Errorf("apiVersion", "expected %q, got %q", APIVersion, apiVersion)}
	}
	var r JobRecord
	if errs := d.DecodeStrict(&r); len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	var errs ErrorList
	add := func(field, format string, args ...any) { errs = append(errs, d.Errorf(field, format, args...)) }
	if r.Name == "" {
		add("metadata.name", "required")
	}
	if r.Namespace == "" {
		add("metadata.namespace", "required")
	}
	if file != "" && r.Name != "" && r.Namespace != "" && file != JobRecordPath(r.Namespace, r.Name) {
		add("metadata.name", "record of Job %s/%s must be at %s", r.Namespace, r.Name, JobRecordPath(r.Namespace, r.Name))
	}
	if r.Spec.Configuration == "" {
		add("spec.configuration", "required")
	}
	if r.Spec.Instance == "" {
		add("spec.instance", "required")
	} else if msgs := validation.IsDNS1123Subdomain(r.Spec.Instance); len(msgs) > 0 {
		add("spec.instance", "%q is not a valid instance name", r.Spec.Instance)
	}
	if r.Spec.Configuration != "" {
		if msgs := validation.IsDNS1123Subdomain(r.Spec.Configuration); len(msgs) > 0 {
			add("spec.configuration", "%q is not a valid Configuration name", r.Spec.Configuration)
		}
	}
	if r.Spec.Outcome != OutcomeSucceeded && r.Spec.Outcome != OutcomeFailed {
		add("spec.outcome", "must be %s or %s, got %q", OutcomeSucceeded, OutcomeFailed, r.Spec.Outcome)
	}
	if r.Spec.Succeeded < 0 {
		add("spec.succeeded", "must not be negative, got %d", r.Spec.Succeeded)
	}
	if r.Spec.Failed < 0 {
		add("spec.failed", "must not be negative, got %d", r.Spec.Failed)
	}
	validatePods(r.Spec.Pods, add)
	if len(r.Spec.PodsNote) > MaxRecordMessageBytes {
		add("spec.podsNote", "at most %d bytes", MaxRecordMessageBytes)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &ParsedJobRecord{JobRecord: &r, Doc: d}, nil
}

// ParseJobRecordFile parses one status/jobs file.
func ParseJobRecordFile(file string, data []byte) (*ParsedJobRecord, ErrorList) {
	docs, err := SplitDocuments(file, data)
	if err != nil {
		return nil, ErrorList{err.(*FieldError)}
	}
	if len(docs) != 1 {
		return nil, ErrorList{{File: file, Message: fmt.Sprintf("expected exactly one JobRecord document, found %d", len(docs))}}
	}
	return ParseJobRecord(file, docs[0])
}

// folderSourceURL is what a Flux GitRepository accepts as its URL, without spaces.
var folderSourceURL = regexp.MustCompile(`^(http|https|ssh)://[^\s]+$`)

// ResolvedSettings is gitbroker.yaml with every default applied.
type ResolvedSettings struct {
	DefaultNamespace    string
	MaxDeletionPercent  int
	DeletionAllowance   int
	MaxObjectsPerFolder int
	DiscoveryHandlers   []string
	// DeviceAllocation is DeviceAllocationDevicePlugin or DeviceAllocationDRA.
	DeviceAllocation string
	Flux             FluxSettings
	Recorder         RecorderSettings
	Templates        TemplateSettings
	// Clusters are spec.clusters; none for a repository of one cluster.
	Clusters Clusters
}

// DefaultSettings are the settings of a repository without gitbroker.yaml.
func DefaultSettings() ResolvedSettings {
	s, _ := ParseSettings("gitbroker.yaml", nil)
	return s
}

// ParseSettings decodes gitbroker.yaml; nil data gives the defaults.
func ParseSettings(file string, data []byte) (ResolvedSettings, ErrorList) {
	var s Settings
	var d *Document
	if len(data) > 0 {
		docs, err := SplitDocuments(file, data)
		if err != nil {
			return ResolvedSettings{}, ErrorList{err.(*FieldError)}
		}
		if len(docs) > 1 {
			return ResolvedSettings{}, ErrorList{{File: file, Message: "expected one Settings document"}}
		}
		if len(docs) == 1 {
			d = docs[0]
			apiVersion, kind := d.TypeMeta()
			if kind != KindSettings {
				return ResolvedSettings{}, ErrorList{d.Errorf("kind", "expected kind %q, got %q", KindSettings, kind)}
			}
			if apiVersion != APIVersion {
				return ResolvedSettings{}, ErrorList{d.Errorf("apiVersion", "expected %q, got %q", APIVersion, apiVersion)}
			}
			if errs := d.DecodeStrict(&s); len(errs) > 0 {
				errs.Sort()
				return ResolvedSettings{}, errs
			}
		}
	}
	var errs ErrorList
	r := ResolvedSettings{
		DefaultNamespace:    DefaultNamespace,
		MaxDeletionPercent:  DefaultMaxDeletionPercent,
		DeletionAllowance:   DefaultDeletionAllowance,
		MaxObjectsPerFolder: DefaultMaxObjectsPerFolder,
		Flux:                s.Spec.Flux,
		Recorder:            s.Spec.Recorder,
		Templates:           s.Spec.Templates,
	}
	if r.Recorder.Namespace == "" {
		r.Recorder.Namespace = DefaultRecorderNamespace
	} else if msgs := validation.IsDNS1123Label(r.Recorder.Namespace); len(msgs) > 0 {
		errs = append(errs, d.Errorf("spec.recorder.namespace", "%q is not a valid namespace", r.Recorder.Namespace))
	}
	if r.Recorder.ServiceAccountName == "" {
		r.Recorder.ServiceAccountName = DefaultRecorderServiceAccount
	} else if msgs := validation.IsDNS1123Subdomain(r.Recorder.ServiceAccountName); len(msgs) > 0 {
		errs = append(errs, d.Errorf("spec.recorder.serviceAccountName", "%q is not a valid ServiceAccount name", r.Recorder.ServiceAccountName))
	}
	for _, t := range []struct{ field, text string }{
		{"spec.templates.commitMessage", s.Spec.Templates.CommitMessage},
		{"spec.templates.pullRequest", s.Spec.Templates.PullRequest},
	} {
		field, text := t.field, t.text
		if text == "" {
			continue
		}
		if _, err := template.New(field).Option("missingkey=error").Parse(text); err != nil {
			errs = append(errs, d.Errorf(field, "not a valid Go template: %v", err))
		}
	}
	if v := s.Spec.DefaultNamespace; v != "" {
		if msgs := validation.IsDNS1123Label(v); len(msgs) > 0 {
			errs = append(errs, d.Errorf("spec.defaultNamespace", "%q is not a valid namespace", v))
		}
		r.DefaultNamespace = v
	}
	if v := s.Spec.MaxDeletionPercent; v != nil {
		if *v < 0 || *v > 100 {
			errs = append(errs, d.Errorf("spec.maxDeletionPercent", "must be between 0 and 100, got %d", *v))
		}
		r.MaxDeletionPercent = int(*v)
	}
	if v := s.Spec.DeletionAllowance; v != nil {
		if *v < 0 {
			errs = append(errs, d.Errorf("spec.deletionAllowance", "must not be negative, got %d", *v))
		}
		r.DeletionAllowance = int(*v)
	}
	for i, h := range s.Spec.DiscoveryHandlers {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " \t/") {
			errs = append(errs, d.Errorf(fmt.Sprintf("spec.discoveryHandlers[%d]", i), "%q is not a discovery handler name", h))
		}
	}
	r.DiscoveryHandlers = s.Spec.DiscoveryHandlers
	switch v := s.Spec.DeviceAllocation; v {
	case "", DeviceAllocationDevicePlugin:
		r.DeviceAllocation = DeviceAllocationDevicePlugin
	case DeviceAllocationDRA:
		r.DeviceAllocation = v
	default:
		errs = append(errs, d.Errorf("spec.deviceAllocation", "must be %s or %s, got %q", DeviceAllocationDevicePlugin, DeviceAllocationDRA, v))
	}
	if v := s.Spec.MaxObjectsPerFolder; v != nil {
		if *v < 1 {
			errs = append(errs, d.Errorf("spec.maxObjectsPerFolder", "must be at least 1, got %d", *v))
		}
		r.MaxObjectsPerFolder = int(*v)
	}
	if len(s.Spec.Clusters) == 0 && s.Spec.ClusterRollout != nil {
		errs = append(errs, validateClusterRollout(d, s.Spec.ClusterRollout, false)...)
	}
	if len(s.Spec.Clusters) > 0 {
		cs, cerrs := validateClusters(d, s.Spec.Clusters)
		cs.file = file
		errs = append(errs, cerrs...)
		if r := s.Spec.ClusterRollout; r != nil {
			errs = append(errs, validateClusterRollout(d, r, true)...)
			rollout := ClusterRolloutSpec{Label: r.Label, Rings: slices.Clone(r.Rings)}
			cs.rollout = &rollout
		}
		r.Clusters = cs
	}
	f := &r.Flux
	if f.Namespace == "" {
		f.Namespace = DefaultFluxNamespace
	}
	if f.SourceRef.Kind == "" {
		f.SourceRef.Kind = "GitRepository"
	}
	if f.SourceRef.Name == "" {
		f.SourceRef.Name = DefaultFluxSource
	}
	if f.ServiceAccountName == "" {
		f.ServiceAccountName = DefaultFluxServiceAccount
	}
	if f.NamespacesServiceAccountName == "" {
		f.NamespacesServiceAccountName = DefaultFluxNamespacesServiceAccount
	}
	if fs := f.FolderSources; fs != nil {
		c := *fs
		if c.VerifySecretRef == nil {
			c.VerifySecretRef = &LocalObjectReference{Name: DefaultFluxVerifySecret}
		}
		f.FolderSources = &c
		if u, err := url.Parse(c.URL); err != nil || !folderSourceURL.MatchString(c.URL) {
			errs = append(errs, d.Errorf("spec.flux.folderSources.url", "must be an http, https or ssh URL without spaces: what Flux fetches this repository from"))
		} else if _, ok := u.User.Password(); ok {
			errs = append(errs, d.Errorf("spec.flux.folderSources.url", "holds a password: name a Secret in spec.flux.folderSources.secretRef instead"))
		}
		for field, ref := range map[string]*LocalObjectReference{"spec.flux.folderSources.secretRef.name": c.SecretRef, "spec.flux.folderSources.verifySecretRef.name": c.VerifySecretRef} {
			if ref != nil && len(validation.IsDNS1123Subdomain(ref.Name)) > 0 {
				errs = append(errs, d.Errorf(field, "%q is not a valid name", ref.Name))
			}
		}
	}
	switch f.SourceRef.Kind {
	case "GitRepository", "OCIRepository", "Bucket":
	default:
		errs = append(errs, d.Errorf("spec.flux.sourceRef.kind", "must be GitRepository, OCIRepository or Bucket, got %q", f.SourceRef.Kind))
	}
	for field, v := range map[string]string{"spec.flux.namespace": f.Namespace, "spec.flux.sourceRef.name": f.SourceRef.Name, "spec.flux.serviceAccountName": f.ServiceAccountName, "spec.flux.namespacesServiceAccountName": f.NamespacesServiceAccountName} {
		if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
			errs = append(errs, d.Errorf(field, "%q is not a valid name", v))
		}
	}
	if len(errs) > 0 {
		for _, e := range errs {
			e.File = file
		}
		errs.Sort()
		return ResolvedSettings{}, errs
	}
	return r, nil
}
