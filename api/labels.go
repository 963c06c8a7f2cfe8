package api

// Labels and annotations gitbroker writes on what it renders, and reads back (the recorder, a
// previous render). The akri.sh labels and "controller: akri.sh" are Akri's, so selectors and
// dashboards written for Akri keep working.
const (
	LabelConfiguration = "akri.sh/configuration"
	LabelInstance      = "akri.sh/instance"
	LabelTargetNode    = "akri.sh/target-node"
	LabelController    = "controller"
	ControllerAkri     = "akri.sh"
	LabelManagedBy     = "app.kubernetes.io/managed-by"
	ManagedByGitbroker = "gitbroker"

	AnnotationInputsHash   = "gitbroker.dev/inputs-hash"
	AnnotationDeviceID     = "gitbroker.dev/device-id"
	AnnotationRenderedFrom = "gitbroker.dev/rendered-from"
)

// LabelRollout marks a broker Deployment of a Configuration with a staged rollout, on the
// Deployment only (never its Pod template, so turning staging on or off restarts nothing): the
// recorder records the availability of the Deployments that carry it.
const (
	LabelRollout  = "gitbroker.dev/rollout"
	RolloutStaged = "staged"
)
