package api

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// API versions and kinds gitbroker reads.
const (
	AkriAPIVersion = "akri.sh/v0"
	APIVersion     = "gitbroker.dev/v1alpha1"

	KindConfiguration = "Configuration"
	KindNodeInventory = "NodeInventory"
	KindJobRecord     = "JobRecord"
	KindSettings      = "Settings"
)

// Annotations that carry gitbroker's settings on an akri.sh/v0 Configuration.
const (
	AnnotationRunPolicy    = "gitbroker.dev/run-policy"
	AnnotationConcurrency  = "gitbroker.dev/concurrency"
	AnnotationHistoryLimit = "gitbroker.dev/history-limit"
	AnnotationRunID        = "gitbroker.dev/run-id"
	AnnotationAfter        = "gitbroker.dev/after"
	AnnotationShards       = "gitbroker.dev/shards"
	// AnnotationClusters selects the clusters a Configuration renders for (a label selector
	// over spec.clusters' labels, as kubectl -l takes it); unset, every cluster.
	AnnotationClusters = "gitbroker.dev/clusters"
	// AnnotationRolloutMaxChanged stages a change over a Pod broker Configuration's brokers: at
	// most this many ("3") or this share ("30%") of them change per render, the next wave only
	// once the recorder has recorded the last one Available (spec.rollout.maxChanged on
	// gitbroker.dev/v1alpha1).
	AnnotationRolloutMaxChanged = "gitbroker.dev/rollout-max-changed"
	// AnnotationRolloutProgressDeadline is how long a broker Deployment may take to become
	// Available with a change before Kubernetes reports it stalled (its
	// progressDeadlineSeconds) and a staged rollout passes it over: a Go duration of whole
	// seconds ("5m"); Kubernetes' 10 minutes when unset (spec.rollout.progressDeadline on
	// gitbroker.dev/v1alpha1).
	AnnotationRolloutProgressDeadline = "gitbroker.dev/rollout-progress-deadline"

	// AnnotationOfflineGracePeriod is how long the agent keeps a device in
	// its inventory after it stopped being discovered (a Go duration such
	// as "5m"). It is read by the agent only and does not affect rendering.
	AnnotationOfflineGracePeriod = "gitbroker.dev/offline-grace-period"
	// AnnotationAllowedDeviceProperties lists, comma-separated, the device properties an
	// akri.sh/v0 Configuration lets devices set although they change how a process loads code
	// or connects (spec.allowedDeviceProperties on gitbroker.dev/v1alpha1).
	AnnotationAllowedDeviceProperties = "gitbroker.dev/allowed-device-properties"
	// AnnotationAllowedHostPaths lists, comma-separated, the host path prefixes outside /dev an
	// akri.sh/v0 Configuration lets the agent serve (spec.allowedHostPaths on gitbroker.dev/v1alpha1).
	AnnotationAllowedHostPaths = "gitbroker.dev/allowed-host-paths"
)

// Job policy values.
const (
	RunPolicyOnChange = "OnChange"
	RunPolicyOnce     = "Once"

	ConcurrencyForbid = "Forbid"
	ConcurrencyAllow  = "Allow"

	OutcomeSucceeded = "Succeeded"
	OutcomeFailed    = "Failed"
)

// Defaults documented in docs/FORMATS.md.
const (
	DefaultNamespace          = "default"
	DefaultCapacity           = 1
	DefaultHistoryLimit       = 5
	DefaultShards             = 1
	DefaultMaxDeletionPercent = 50
	// DefaultDeletionAllowance covers one device's objects (its broker, its instance Service
	// and a Job) with room to spare, and stays far below what a wiped node removes in a fleet
	// of any size that the percentage protects.
	DefaultDeletionAllowance   = 5
	DefaultMaxObjectsPerFolder = 1000

	// DefaultFluxNamespace and DefaultFluxSource are where the rendered Flux Kustomizations
	// live and the GitRepository they build from: deploy/flux's, which is named gitbroker so
	// that it never replaces the flux-system GitRepository that Flux's bootstrap creates.
	DefaultFluxNamespace = "flux-system"
	DefaultFluxSource    = "gitbroker"
	// DefaultFluxServiceAccount is the account every rendered Flux Kustomization applies as:
	// deploy/flux's, which may touch only Deployments, Jobs, Services and Pods in the broker namespaces an
	// administrator granted it (deploy/applier).
	DefaultFluxServiceAccount = "gitbroker-applier"
	// DefaultFluxNamespacesServiceAccount applies the rendered namespaces (deploy/flux).
	DefaultFluxNamespacesServiceAccount = "gitbroker-namespaces"
	// DefaultFluxVerifySecret holds the renderer's public key (deploy/flux).
	DefaultFluxVerifySecret = "gitbroker-renderer-verify"
	// FolderBranchPrefix is where the branches of spec.flux.folderSources live: one per rendered
	// folder, moved by the renderer only when that folder changes.
	FolderBranchPrefix = "gitbroker/folders/"
	// FluxFolderBranch shows rendered/flux/ alone, for the root Kustomization's GitRepository
	// (deploy/flux), so that it too reconciles only when a Flux object changes.
	FluxFolderBranch = FolderBranchPrefix + "flux"

	// DefaultRecorderNamespace and DefaultRecorderServiceAccount are where deploy/ runs the
	// recorder; RecorderPodsClusterRole is what it is granted in each broker namespace (list
	// pods, get pods/log) to keep a finished Job's Pods in its record.
	DefaultRecorderNamespace      = "gitbroker-system"
	DefaultRecorderServiceAccount = "gitbroker-recorder"
	RecorderPodsClusterRole       = "gitbroker-recorder-pods"
)

// Configuration is Akri's Configuration (akri.sh/v0), accepted unchanged, or gitbroker's
// superset (gitbroker.dev/v1alpha1) that adds spec.jobPolicy, spec.after and spec.shards.
type Configuration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ConfigurationSpec `json:"spec"`
}

// ConfigurationSpec mirrors Akri's ConfigurationSpec field for field.
type ConfigurationSpec struct {
	DiscoveryHandler         DiscoveryHandlerInfo `json:"discoveryHandler"`
	Capacity                 *int32               `json:"capacity,omitempty"`
	BrokerSpec               *BrokerSpec          `json:"brokerSpec,omitempty"`
	InstanceServiceSpec      *corev1.ServiceSpec  `json:"instanceServiceSpec,omitempty"`
	ConfigurationServiceSpec *corev1.ServiceSpec  `json:"configurationServiceSpec,omitempty"`
	BrokerProperties         map[string]string    `json:"brokerProperties,omitempty"`

	// gitbroker.dev/v1alpha1 only.
	JobPolicy *JobPolicy `json:"jobPolicy,omitempty"`
	After     string     `json:"after,omitempty"`
	Shards    *int32     `json:"shards,omitempty"`
	// Rollout stages a change over the brokers of a Pod broker Configuration.
	Rollout *RolloutPolicy `json:"rollout,omitempty"`
	// AllowedDeviceProperties are the device properties that may become environment variables
	// although ParsedConfiguration.DeviceMaySet would not let a device set them (a SERIAL a
	// custom discovery handler reports, an HTTP_PROXY, say).
	AllowedDeviceProperties []string `json:"allowedDeviceProperties,omitempty"`
	// AllowedHostPaths are host path prefixes outside /dev whose device nodes and mounts the
	// node's agent may give a broker when a discovery handler reports them (/sys/class/gpio,
	// say). Without them the agent serves only paths under /dev.
	AllowedHostPaths []string `json:"allowedHostPaths,omitempty"`
	// ClusterSelector selects the clusters of gitbroker.yaml's spec.clusters this
	// Configuration renders for, by their labels; unset, every cluster.
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
}

// DiscoveryHandlerInfo names the discovery handler and what it is asked to discover.
type DiscoveryHandlerInfo struct {
	Name                string              `json:"name"`
	DiscoveryDetails    string              `json:"discoveryDetails,omitempty"`
	DiscoveryProperties []DiscoveryProperty `json:"discoveryProperties,omitempty"`
}

// DiscoveryProperty is Akri's named discovery property, given inline or by reference.
type DiscoveryProperty struct {
	Name      string                   `json:"name"`
	Value     *string                  `json:"value,omitempty"`
	ValueFrom *DiscoveryPropertySource `json:"valueFrom,omitempty"`
}

// DiscoveryPropertySource references a Secret or ConfigMap key.
type DiscoveryPropertySource struct {
	SecretKeyRef    *DiscoveryPropertyKeySelector `json:"secretKeyRef,omitempty"`
	ConfigMapKeyRef *DiscoveryPropertyKeySelector `json:"configMapKeyRef,omitempty"`
}

// DiscoveryPropertyKeySelector selects one key of a Secret or ConfigMap.
type DiscoveryPropertyKeySelector struct {
	Key       string `json:"key"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Optional  *bool  `json:"optional,omitempty"`
}

// BrokerSpec holds exactly one of a Pod or a Job broker.
type BrokerSpec struct {
	BrokerPodSpec *corev1.PodSpec  `json:"brokerPodSpec,omitempty"`
	BrokerJobSpec *batchv1.JobSpec `json:"brokerJobSpec,omitempty"`
}

// RolloutPolicy stages a change over many broker Deployments (docs/FORMATS.md, "Staged
// rollouts").
type RolloutPolicy struct {
	// MaxChanged is how many brokers, or which share of them ("30%"), change in one render.
	MaxChanged *intstr.IntOrString `json:"maxChanged,omitempty"`
	// ProgressDeadline is how long a broker may take to become Available with a change before
	// a staged rollout passes it over (a Go duration; Kubernetes' 10 minutes when unset).
	ProgressDeadline string `json:"progressDeadline,omitempty"`
}

// JobPolicy is gitbroker's lifecycle policy for Job brokers.
type JobPolicy struct {
	RunPolicy    string `json:"runPolicy,omitempty"`
	Concurrency  string `json:"concurrency,omitempty"`
	HistoryLimit *int32 `json:"historyLimit,omitempty"`
	RunID        string `json:"runID,omitempty"`
	// Logs asks the recorder to keep the tail of each container's log with the Job's record.
	Logs *JobLogs `json:"logs,omitempty"`
}

// NodeInventory is what one node's agent discovered. It is sorted and has no timestamps, so it
// changes only when what the node sees changes.
type NodeInventory struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NodeInventorySpec `json:"spec"`
}

// NodeInventorySpec lists devices per Configuration.
type NodeInventorySpec struct {
	Configurations []InventoryConfiguration `json:"configurations,omitempty"`
}

// InventoryConfiguration is the devices one node sees for one Configuration.
type InventoryConfiguration struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace,omitempty"`
	Devices   []Device `json:"devices,omitempty"`
}

// Device is one discovered device, as Akri's discovery protocol reports it.
type Device struct {
	ID          string            `json:"id"`
	Shared      bool              `json:"shared,omitempty"`
	Properties  map[string]string `json:"properties,omitempty"`
	Mounts      []Mount           `json:"mounts,omitempty"`
	DeviceSpecs []DeviceSpec      `json:"deviceSpecs,omitempty"`
}

// Mount is a host path the discovery handler reports for a device.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

// DeviceSpec is a device node the discovery handler reports for a device.
type DeviceSpec struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions,omitempty"`
}

// JobRecord is the final outcome of one broker Job, written once by the recorder.
type JobRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              JobRecordSpec `json:"spec"`
}

// JobRecordSpec is the recorded outcome.
type JobRecordSpec struct {
	Configuration  string       `json:"configuration"`
	Instance       string       `json:"instance"`
	DeviceID       string       `json:"deviceID"`
	RenderedFrom   string       `json:"renderedFrom,omitempty"`
	Outcome        string       `json:"outcome"`
	StartTime      *metav1.Time `json:"startTime,omitempty"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	Succeeded      int32        `json:"succeeded"`
	Failed         int32        `json:"failed"`
	Reason         string       `json:"reason,omitempty"`
	Message        string       `json:"message,omitempty"`
	// Pods is what the recorder found of the Job's Pods when it recorded the Job, oldest first.
	Pods []PodRecord `json:"pods,omitempty"`
	// PodsNote says plainly what could not be recorded, such as Pods deleted before the
	// recorder saw the Job finished.
	PodsNote string `json:"podsNote,omitempty"`
}

// Settings is the optional gitbroker.yaml at the repository root.
type Settings struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SettingsSpec `json:"spec"`
}

// SettingsSpec holds repository-wide settings; every field has a documented default.
type SettingsSpec struct {
	// DefaultNamespace is used for Configurations and inventory entries without a namespace.
	DefaultNamespace string `json:"defaultNamespace,omitempty"`
	// MaxDeletionPercent refuses a render that removes more than this share of broker objects.
	MaxDeletionPercent *int32 `json:"maxDeletionPercent,omitempty"`
	// DeletionAllowance lets a render that removes at most this many broker objects pass the
	// deletion budget whatever the share (so a small fleet is not frozen by one unplugged
	// device); 0 makes the budget strict.
	DeletionAllowance *int32 `json:"deletionAllowance,omitempty"`
	// MaxObjectsPerFolder makes plan warn about folders that build slowly in kustomize.
	MaxObjectsPerFolder *int32 `json:"maxObjectsPerFolder,omitempty"`
	// DiscoveryHandlers names the discovery handlers deployed in the fleet beside the agent's
	// own (udev, debugEcho) and Akri's (onvif, opcua), so plan warns about a Configuration
	// naming none of them (a typo no agent would ever serve).
	DiscoveryHandlers []string `json:"discoveryHandlers,omitempty"`
	// DeviceAllocation says how brokers and users' workloads get devices (docs/DESIGN.md,
	// "Devices counted once across the cluster"): devicePlugin (the default, any Kubernetes),
	// the agent's akri.sh/<instance> and akri.sh/<configuration> resources, as Akri; or dra
	// (Kubernetes 1.34 and later), ResourceSlices rendered from the inventory, a DeviceClass per
	// Configuration, and brokers that claim their device through a ResourceClaimTemplate, which
	// the scheduler allocates. The agents must run with the same --device-allocation.
	DeviceAllocation string `json:"deviceAllocation,omitempty"`
	// Flux configures the Kustomizations written to rendered/flux/.
	Flux FluxSettings `json:"flux,omitempty"`
	// Recorder names the recorder's ServiceAccount, which the rendered broker namespaces let read
	// their Pods and logs (default gitbroker-system/gitbroker-recorder, as deploy/ runs it).
	Recorder RecorderSettings `json:"recorder,omitempty"`
	// Templates replace the renderer's commit message and pull-request
	// description (Go text/templates; see templates/).
	Templates TemplateSettings `json:"templates,omitempty"`
	// Clusters splits the fleet into clusters (docs/DESIGN.md, "Many clusters, one
	// repository"): each node belongs to exactly one, by name, and each cluster renders under
	// rendered/<cluster>/ for its own Flux or Argo CD. Empty: one cluster, rendered/ itself.
	Clusters []ClusterSpec `json:"clusters,omitempty"`
	// ClusterRollout rolls a change of a Pod broker Configuration out cluster by cluster, in
	// rings by a cluster label: a ring's brokers change once every cluster of the rings before
	// it has recorded that Configuration's brokers Available with their new spec.
	ClusterRollout *ClusterRolloutSpec `json:"clusterRollout,omitempty"`
}

// ClusterRolloutSpec orders the clusters of a rollout in rings.
type ClusterRolloutSpec struct {
	// Label is the cluster label whose values name the rings.
	Label string `json:"label"`
	// Rings are its values, first ring first; the clusters with another value, or without the
	// label, are the last ring.
	Rings []string `json:"rings"`
}

// ClusterSpec is one cluster of the fleet.
type ClusterSpec struct {
	// Name is the cluster's name: its folder under rendered/ (a DNS label).
	Name string `json:"name"`
	// Labels are what Configurations select clusters by (gitbroker.dev/clusters,
	// spec.clusterSelector) and what its brokers are told (GITBROKER_CLUSTER_LABEL_<KEY>).
	Labels map[string]string `json:"labels,omitempty"`
	// Nodes are the cluster's nodes: names, or globs (path.Match: *, ?, [a-z]).
	Nodes []string `json:"nodes"`
}

// RecorderSettings names the recorder's ServiceAccount.
type RecorderSettings struct {
	Namespace          string `json:"namespace,omitempty"`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// TemplateSettings holds template overrides; empty keeps the default.
type TemplateSettings struct {
	CommitMessage string `json:"commitMessage,omitempty"`
	PullRequest   string `json:"pullRequest,omitempty"`
}

// FluxSettings configures the per-folder Flux Kustomizations.
type FluxSettings struct {
	// Namespace of the Flux Kustomizations (default flux-system).
	Namespace string `json:"namespace,omitempty"`
	// SourceRef is the GitRepository holding this repository (default GitRepository/flux-system).
	SourceRef FluxSourceRef `json:"sourceRef,omitempty"`
	// Interval between reconciles (default 10m).
	Interval *metav1.Duration `json:"interval,omitempty"`
	// RetryInterval after a failed reconcile (default 2m).
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`
	// Timeout of one reconcile (default 5m).
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Wait for the applied objects to become ready (default false: Jobs may run for long).
	Wait bool `json:"wait,omitempty"`
	// ServiceAccountName is the ServiceAccount, in Namespace, that kustomize-controller
	// impersonates to apply each folder (default gitbroker-applier): what a rendered folder may
	// create is what its Roles allow, not what the controller may.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Namespaces renders the broker namespaces (default true) into rendered/_namespaces/, with
	// the RoleBinding that lets ServiceAccountName apply there, applied first by a Kustomization
	// of its own as NamespacesServiceAccountName and never pruned. false leaves both to an
	// administrator (deploy/applier).
	Namespaces *bool `json:"namespaces,omitempty"`
	// NamespacesServiceAccountName applies rendered/_namespaces/ (default gitbroker-namespaces):
	// it may create Namespaces, and RoleBindings to gitbroker-applier's ClusterRole only.
	NamespacesServiceAccountName string `json:"namespacesServiceAccountName,omitempty"`
	// FolderSources, when set, gives every rendered folder a GitRepository of its own, in
	// rendered/flux/sources/, that follows a branch the renderer moves only when that folder's
	// content changes (gitbroker/folders/<Kustomization name>). A commit that changes one folder
	// then reconciles one Kustomization instead of all of them. Without it, every Kustomization
	// builds from SourceRef and reconciles on every render.
	FolderSources *FolderSources `json:"folderSources,omitempty"`
}

// FolderSources configures the per-folder GitRepositories.
type FolderSources struct {
	// URL Flux fetches this repository from (http, https or ssh; required), as deploy/flux's
	// GitRepository names it.
	URL string `json:"url"`
	// SecretRef names the Secret, in the Flux namespace, with the credentials for URL (none for
	// a repository anyone may read).
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// VerifySecretRef names the Secret, in the Flux namespace, with the renderer's public key:
	// every source applies only a head the renderer signed (default gitbroker-renderer-verify,
	// deploy/flux's).
	VerifySecretRef *LocalObjectReference `json:"verifySecretRef,omitempty"`
	// Interval between fetches (default 1m).
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	Name string `json:"name"`
}

// FluxSourceRef names the Flux source the Kustomizations build from.
type FluxSourceRef struct {
	Kind      string `json:"kind,omitempty"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}
