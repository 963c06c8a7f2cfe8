package api

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Log capture: a Configuration opts in (spec.jobPolicy.logs, or the gitbroker.dev/log-tail-*
// annotations on an akri.sh/v0 Configuration), the renderer copies the resolved policy onto each
// Job it renders under the same annotations, and the recorder reads it from the Job when it
// records the outcome. Capture is off unless asked for: a log tail in git is kept forever and
// copied to every clone, where the log on the node is access-controlled and rotated away.
const (
	// AnnotationLogTailLines is how many of the last lines of each container's log are kept;
	// "0" turns capture off.
	AnnotationLogTailLines = "gitbroker.dev/log-tail-lines"
	// AnnotationLogTailBytes bounds each container's tail in bytes.
	AnnotationLogTailBytes = "gitbroker.dev/log-tail-bytes"
	// AnnotationLogRedact holds regular expressions (RE2, one per line) whose matches are
	// replaced by RedactedText before a tail is written.
	AnnotationLogRedact = "gitbroker.dev/log-redact"

	DefaultLogTailLines = 200
	DefaultLogTailBytes = 64 << 10
	// MaxLogTailLines, MaxLogTailBytes, MaxLogRedactPatterns and MaxLogRedactPatternBytes bound
	// what a Configuration may ask for.
	MaxLogTailLines          = 10000
	MaxLogTailBytes          = 1 << 20
	MaxLogRedactPatterns     = 32
	MaxLogRedactPatternBytes = 1024

	// MaxRecordedPods and MaxRecordedContainers bound a JobRecord's spec.pods; MaxRecordLogBytes
	// bounds the sum of its log tails and MaxRecordMessageBytes each termination message.
	MaxRecordedPods       = 20
	MaxRecordedContainers = 20
	MaxRecordLogBytes     = 1 << 20
	MaxRecordMessageBytes = 16 << 10
	MaxRecordReasonBytes  = 1 << 10

	// RedactedText replaces what a redaction pattern or a credential matched.
	RedactedText = "[REDACTED]"
)

// JobLogs is spec.jobPolicy.logs: what the recorder keeps of each finished Job's container logs.
// Setting it (even to {}) turns capture on with the defaults; tailLines: 0 turns it off.
type JobLogs struct {
	TailLines *int32   `json:"tailLines,omitempty"`
	TailBytes *int32   `json:"tailBytes,omitempty"`
	Redact    []string `json:"redact,omitempty"`
}

// LogPolicy is a resolved JobLogs. A nil *LogPolicy means capture is off.
type LogPolicy struct {
	TailLines int
	TailBytes int
	Redact    []string `json:",omitempty"`
}

// Annotations are the rendered Job's annotations that carry the policy to the recorder.
func (p *LogPolicy) Annotations() map[string]string {
	if p == nil {
		return nil
	}
	ann := map[string]string{
		AnnotationLogTailLines: strconv.Itoa(p.TailLines),
		AnnotationLogTailBytes: strconv.Itoa(p.TailBytes),
	}
	if len(p.Redact) > 0 {
		ann[AnnotationLogRedact] = strings.Join(p.Redact, "\n")
	}
	return ann
}

// LogPolicyFromAnnotations reads the policy the renderer put on a Job: nil when capture is off.
// The recorder reads a Job from the cluster, so the values are checked again here.
func LogPolicyFromAnnotations(ann map[string]string) (*LogPolicy, error) {
	p, errs := resolveLogPolicy(nil, ann)
	if len(errs) > 0 {
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, e.field+": "+e.msg)
		}
		return nil, fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return p, nil
}

type policyError struct{ field, msg string }

// resolveLogPolicy merges spec.jobPolicy.logs and the annotations, which may not both be set.
func resolveLogPolicy(spec *JobLogs, ann map[string]string) (*LogPolicy, []policyError) {
	var errs []policyError
	add := func(f, format string, args ...any) { errs = append(errs, policyError{f, fmt.Sprintf(format, args...)}) }
	lines, hasLines := ann[AnnotationLogTailLines]
	bytesV, hasBytes := ann[AnnotationLogTailBytes]
	redact, hasRedact := ann[AnnotationLogRedact]
	if spec == nil && !hasLines && !hasBytes && !hasRedact {
		return nil, nil
	}
	if spec != nil && (hasLines || hasBytes || hasRedact) {
		add("metadata.annotations", "the gitbroker.dev/log-* annotations conflict with spec.jobPolicy.logs; set one of them")
		return nil, errs
	}
	p := &LogPolicy{TailLines: DefaultLogTailLines, TailBytes: DefaultLogTailBytes}
	num := func(s *int32, a string, has bool, specField, ann string, limit int, dst *int) {
		f := "spec.jobPolicy.logs." + specField
		n := 0
		switch {
		case s != nil:
			n = int(*s)
		case has:
			f = "metadata.annotations." + ann
			v, err := strconv.Atoi(a)
			if err != nil {
				add(f, "expected an integer, got %q", a)
				return
			}
			n = v
		default:
			return
		}
		if n < 0 || n > limit {
			add(f, "must be between 0 and %d, got %d", limit, n)
			return
		}
		*dst = n
	}
	var patterns []string
	patternsField := "spec.jobPolicy.logs.redact"
	if spec != nil {
		num(spec.TailLines, "", false, "tailLines", "", MaxLogTailLines, &p.TailLines)
		num(spec.TailBytes, "", false, "tailBytes", "", MaxLogTailBytes, &p.TailBytes)
		patterns = spec.Redact
	} else {
		num(nil, lines, hasLines, "tailLines", AnnotationLogTailLines, MaxLogTailLines, &p.TailLines)
		num(nil, bytesV, hasBytes, "tailBytes", AnnotationLogTailBytes, MaxLogTailBytes, &p.TailBytes)
		patternsField = "metadata.annotations." + AnnotationLogRedact
		for _, l := range strings.Split(redact, "\n") {
			if l != "" {
				patterns = append(patterns, l)
			}
		}
	}
	if len(patterns) > MaxLogRedactPatterns {
		add(patternsField, "at most %d patterns, got %d", MaxLogRedactPatterns, len(patterns))
	}
	for i, re := range patterns {
		f := patternsField
		if spec != nil {
			f = fmt.Sprintf("%s[%d]", patternsField, i)
		}
		switch {
		case re == "" || strings.Contains(re, "\n"):
			add(f, "a pattern must be one non-empty line")
		case len(re) > MaxLogRedactPatternBytes:
			add(f, "a pattern may be at most %d bytes", MaxLogRedactPatternBytes)
		default:
			if _, err := regexp.Compile(re); err != nil {
				add(f, "not a regular expression (RE2): %v", err)
			}
		}
	}
	p.Redact = patterns
	if len(errs) > 0 {
		return nil, errs
	}
	if p.TailLines == 0 || p.TailBytes == 0 {
		return nil, nil // asked for, and off
	}
	return p, nil
}

// PodRecord is what the recorder found of one of a Job's Pods when it recorded the Job.
type PodRecord struct {
	Name           string            `json:"name"`
	Node           string            `json:"node,omitempty"`
	Phase          string            `json:"phase,omitempty"`
	InitContainers []ContainerRecord `json:"initContainers,omitempty"`
	Containers     []ContainerRecord `json:"containers,omitempty"`
}

// ContainerRecord is one container's end: how it terminated and, when the Configuration asked
// for it, the tail of its log.
type ContainerRecord struct {
	Name       string       `json:"name"`
	ExitCode   *int32       `json:"exitCode,omitempty"`
	Signal     int32        `json:"signal,omitempty"`
	Reason     string       `json:"reason,omitempty"`
	Message    string       `json:"message,omitempty"`
	StartedAt  *metav1.Time `json:"startedAt,omitempty"`
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	Restarts   int32        `json:"restarts,omitempty"`
	// Log is the tail as text, when it is valid UTF-8; LogBase64 holds the exact bytes otherwise.
	Log       string `json:"log,omitempty"`
	LogBase64 string `json:"logBase64,omitempty"`
	// LogTruncated says the container printed more than the tail kept.
	LogTruncated bool `json:"logTruncated,omitempty"`
	// LogNote says why there is no tail, or what was done to it (redactions).
	LogNote string `json:"logNote,omitempty"`
}

// LogBytes returns the tail's bytes.
func (c *ContainerRecord) LogBytes() []byte {
	if c.LogBase64 != "" {
		b, _ := base64.StdEncoding.DecodeString(c.LogBase64)
		return b
	}
	return []byte(c.Log)
}

// SetLog stores a tail as text when it is valid UTF-8 and as base64 otherwise, so any output is
// stored exactly and the YAML stays valid.
func (c *ContainerRecord) SetLog(b []byte) {
	c.Log, c.LogBase64 = "", ""
	if utf8.Valid(b) {
		c.Log = string(b)
		return
	}
	c.LogBase64 = base64.StdEncoding.EncodeToString(b)
}

// validatePods checks a record's spec.pods against the bounds the recorder writes within, so a
// forged or hand-edited record cannot make the renderer, plan or history carry unbounded text.
func validatePods(pods []PodRecord, add func(field, format string, args ...any)) {
	if len(pods) > MaxRecordedPods {
		add("spec.pods", "at most %d Pods, got %d", MaxRecordedPods, len(pods))
		return
	}
	total := 0
	for i, p := range pods {
		f := fmt.Sprintf("spec.pods[%d]", i)
		if p.Name == "" {
			add(f+".name", "required")
		}
		for _, list := range []struct {
			field string
			cs    []ContainerRecord
		}{{"initContainers", p.InitContainers}, {"containers", p.Containers}} {
			if len(list.cs) > MaxRecordedContainers {
				add(f+"."+list.field, "at most %d containers, got %d", MaxRecordedContainers, len(list.cs))
				continue
			}
			for j, c := range list.cs {
				cf := fmt.Sprintf("%s.%s[%d]", f, list.field, j)
				if c.Name == "" {
					add(cf+".name", "required")
				}
				if len(c.Reason) > MaxRecordReasonBytes {
					add(cf+".reason", "at most %d bytes", MaxRecordReasonBytes)
				}
				if len(c.Message) > MaxRecordMessageBytes {
					add(cf+".message", "at most %d bytes", MaxRecordMessageBytes)
				}
				if len(c.LogNote) > MaxRecordMessageBytes {
					add(cf+".logNote", "at most %d bytes", MaxRecordMessageBytes)
				}
				if c.Log != "" && c.LogBase64 != "" {
					add(cf+".logBase64", "set only one of log and logBase64")
				}
				n := len(c.Log)
				if c.LogBase64 != "" {
					b, err := base64.StdEncoding.DecodeString(c.LogBase64)
					if err != nil {
						add(cf+".logBase64", "not base64: %v", err)
					}
					n = len(b)
				}
				if n > MaxLogTailBytes {
					add(cf+".log", "a tail may be at most %d bytes, got %d", MaxLogTailBytes, n)
				}
				total += n
			}
		}
	}
	if total > MaxRecordLogBytes {
		add("spec.pods", "the log tails may hold at most %d bytes in all, got %d", MaxRecordLogBytes, total)
	}
}
