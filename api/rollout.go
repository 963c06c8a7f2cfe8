package api

import (
	"path"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A RolloutRecord is the recorder's statement of whether a broker Deployment of a staged
// Configuration has rolled out: the inputs hash of what it runs, and whether every replica of
// that is Available (as `kubectl rollout status` judges it). The recorder keeps
// status/rollouts/<namespace>/<deployment>.yaml on its own signed ref for every Deployment that
// carries LabelRollout, so the renderer, a function of git, can start the next wave of a staged
// rollout only once the last one runs.
type RolloutRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              RolloutRecordSpec `json:"spec"`
}

// RolloutRecordSpec is what the recorder saw of one Deployment.
type RolloutRecordSpec struct {
	// InputsHash is the Deployment's gitbroker.dev/inputs-hash annotation.
	InputsHash string `json:"inputsHash"`
	// Available says the Deployment's controller has observed its current spec and every
	// replica of it is updated and Available.
	Available bool `json:"available"`
	// Message says why not, bounded.
	Message string `json:"message,omitempty"`
	// ProgressDeadlineExceeded says the Deployment's controller gave up waiting for this spec to
	// become Available (its Progressing condition's reason ProgressDeadlineExceeded, after
	// spec.progressDeadlineSeconds, 10 minutes by default): a staged rollout passes it over
	// instead of waiting for good on one node.
	ProgressDeadlineExceeded bool `json:"progressDeadlineExceeded,omitempty"`
}

const (
	KindRolloutRecord = "RolloutRecord"
	// RolloutDir holds the RolloutRecords on the recorder's ref.
	RolloutDir = "status/rollouts"
	// MaxRolloutMessageBytes bounds a RolloutRecord's message.
	MaxRolloutMessageBytes = 1024
)

func init() {
	registerStatusKind(StatusKind{Kind: KindRolloutRecord, Dir: RolloutDir, IsPath: IsRolloutPath, Layout: RolloutDir + "/<namespace>/<deployment>.yaml"})
}

// RolloutPath is where the recorder writes the rollout of a Deployment.
func RolloutPath(namespace, name string) string {
	return path.Join(RolloutDir, namespace, name+".yaml")
}

// IsRolloutPath reports whether p is a RolloutRecord's path: status/rollouts/<namespace>/<name>.yaml.
func IsRolloutPath(p string) bool {
	rest, ok := strings.CutPrefix(p, RolloutDir+"/")
	if !ok || !strings.HasSuffix(rest, ".yaml") {
		return false
	}
	ns, name, ok := strings.Cut(rest, "/")
	return ok && ns != "" && name != ".yaml" && !strings.Contains(name, "/")
}

// ParsedRolloutRecord is one validated RolloutRecord.
type ParsedRolloutRecord struct {
	*RolloutRecord
	Doc *Document
}

// ParseRolloutFile decodes and validates status/rollouts/<namespace>/<name>.yaml: one
// RolloutRecord naming the Deployment its path names, with an inputs hash and a bounded message.
func ParseRolloutFile(file string, data []byte) (*ParsedRolloutRecord, ErrorList) {
	var r RolloutRecord
	d, errs := decodeOne(file, data, KindRolloutRecord, &r)
	if len(errs) > 0 {
		return nil, errs
	}
	add := func(field, format string, args ...any) { errs = append(errs, d.Errorf(field, format, args...)) }
	switch {
	case r.Name == "" || r.Namespace == "":
		add("metadata", "name and namespace are required")
	case len(validation.IsDNS1123Subdomain(r.Name)) > 0 || len(validation.IsDNS1123Label(r.Namespace)) > 0:
		add("metadata", "%s/%s is not a valid Deployment name", r.Namespace, r.Name)
	case file != RolloutPath(r.Namespace, r.Name):
		add("metadata.name", "the rollout of Deployment %s/%s must be at %s", r.Namespace, r.Name, RolloutPath(r.Namespace, r.Name))
	}
	if r.Spec.InputsHash == "" || len(r.Spec.InputsHash) > 64 || strings.Trim(r.Spec.InputsHash, "0123456789abcdef") != "" {
		add("spec.inputsHash", "expected the Deployment's %s (lower-case hex), got %q", AnnotationInputsHash, r.Spec.InputsHash)
	}
	if len(r.Spec.Message) > MaxRolloutMessageBytes || !utf8.ValidString(r.Spec.Message) {
		add("spec.message", "at most %d bytes of UTF-8", MaxRolloutMessageBytes)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &ParsedRolloutRecord{RolloutRecord: &r, Doc: d}, nil
}
