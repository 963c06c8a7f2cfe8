package recorder

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
)

// LogSource opens one container's log, as the API server's pods/log subresource serves it.
type LogSource func(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error)

// maxLogRead bounds what is read of one container's log to find its tail: TailLines asks the
// kubelet for the last lines only, but nothing bounds how long those lines are.
const maxLogRead = 8 << 20

// jobRef is what the capture needs of a finished Job besides its record.
type jobRef struct {
	selector *metav1.LabelSelector
	ran      int32 // Pods that ran to the end: succeeded + failed
	logs     *api.LogPolicy
	logsErr  error
}

func newJobRef(job *batchv1.Job) jobRef {
	ref := jobRef{selector: job.Spec.Selector, ran: job.Status.Succeeded + job.Status.Failed}
	ref.logs, ref.logsErr = api.LogPolicyFromAnnotations(job.Annotations)
	return ref
}

// redactor replaces the recorder's own credentials and the configured patterns.
type redactor struct {
	secrets  [][]byte
	patterns []*regexp.Regexp
}

// redact returns b with every match replaced, and how many were.
func (r *redactor) redact(b []byte) ([]byte, int) {
	n := 0
	for _, s := range r.secrets {
		if c := bytes.Count(b, s); c > 0 {
			n += c
			b = bytes.ReplaceAll(b, s, []byte(api.RedactedText))
		}
	}
	for _, re := range r.patterns {
		b = re.ReplaceAllFunc(b, func([]byte) []byte {
			n++
			return []byte(api.RedactedText)
		})
	}
	return b, n
}

func (r *redactor) with(patterns []string) (*redactor, error) {
	out := &redactor{secrets: r.secrets, patterns: slices.Clone(r.patterns)}
	for _, p := range patterns {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, err
		}
		out.patterns = append(out.patterns, re)
	}
	return out, nil
}

func (r *redactor) text(s string, limit int) string {
	b, _ := r.redact([]byte(s))
	return truncateText(strings.ToValidUTF8(string(b), "\uFFFD"), limit)
}

// truncateText cuts s to at most limit bytes at a rune boundary.
func truncateText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// capture fills in what the Job's Pods say: per Pod and container the node, exit code, reason and
// termination message, and, when the Job asks for it, the tail of the log. Nothing here stops the
// record from being written: what cannot be read is said in the record instead.
func (r *Recorder) capture(ctx context.Context, rec *api.JobRecord, ref jobRef) {
	if ref.selector == nil || (len(ref.selector.MatchLabels) == 0 && len(ref.selector.MatchExpressions) == 0) {
		rec.Spec.PodsNote = "the Job has no Pod selector, so its Pods could not be found"
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(ref.selector)
	if err != nil {
		rec.Spec.PodsNote = "the Job's Pod selector cannot be read: " + r.redact.text(err.Error(), api.MaxRecordMessageBytes)
		return
	}
	list, err := r.opts.Client.CoreV1().Pods(rec.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		why := err.Error()
		if apierrors.IsForbidden(err) {
			why = fmt.Sprintf("the recorder may not list Pods in %s; grant it the gitbroker-recorder-pods ClusterRole there (deploy/recorder)", rec.Namespace)
		}
		rec.Spec.PodsNote = "the Job's Pods could not be read: " + r.redact.text(why, api.MaxRecordMessageBytes)
		return
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var notes []string
	switch {
	case len(pods) == 0:
		notes = append(notes, "none of the Job's Pods were left when the recorder saw it finished (deleted by Pod garbage collection, a node drain or by hand); their nodes, exit codes and logs are lost")
	case int32(len(pods)) < ref.ran:
		notes = append(notes, fmt.Sprintf("%d of the Job's %d Pods were deleted before the recorder saw it finished; what they did is lost", int(ref.ran)-len(pods), ref.ran))
	}
	if len(pods) > api.MaxRecordedPods {
		notes = append(notes, fmt.Sprintf("the Job had %d Pods; the newest %d are recorded", len(pods), api.MaxRecordedPods))
		pods = pods[len(pods)-api.MaxRecordedPods:]
	}

	red := r.redact
	logs := ref.logs
	if ref.logsErr != nil {
		notes = append(notes, "no log was kept: the Job's log policy cannot be read: "+r.redact.text(ref.logsErr.Error(), 1024))
		logs = nil
	} else if logs != nil {
		if red, err = r.redact.with(logs.Redact); err != nil {
			notes = append(notes, "no log was kept: a redaction pattern cannot be compiled: "+r.redact.text(err.Error(), 1024))
			logs = nil
		}
	}
	if logs != nil && r.opts.MaxTailBytes < 0 {
		notes = append(notes, "no log was kept: this recorder does not capture logs (--log-tail-max-bytes 0)")
		logs = nil
	}
	if logs != nil && logs.TailBytes > r.opts.MaxTailBytes {
		capped := *logs
		capped.TailBytes = r.opts.MaxTailBytes
		logs = &capped
	}

	out := make([]api.PodRecord, len(pods))
	budget := api.MaxRecordLogBytes
	// The newest Pod's logs matter most (it decided the outcome), so it is served first from
	// the record's log budget.
	for i := len(pods) - 1; i >= 0; i-- {
		p := &pods[i]
		pr := api.PodRecord{Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase)}
		pr.InitContainers = r.containers(ctx, p, p.Spec.InitContainers, p.Status.InitContainerStatuses, logs, red, &budget)
		pr.Containers = r.containers(ctx, p, p.Spec.Containers, p.Status.ContainerStatuses, logs, red, &budget)
		out[i] = pr
	}
	rec.Spec.Pods = out
	rec.Spec.PodsNote = truncateText(strings.Join(notes, "; "), api.MaxRecordMessageBytes)
}

func (r *Recorder) containers(ctx context.Context, p *corev1.Pod, spec []corev1.Container, statuses []corev1.ContainerStatus,
	logs *api.LogPolicy, red *redactor, budget *int) []api.ContainerRecord {
	if len(spec) > api.MaxRecordedContainers {
		spec = spec[:api.MaxRecordedContainers]
	}
	var out []api.ContainerRecord
	for _, c := range spec {
		cr := api.ContainerRecord{Name: c.Name}
		var st *corev1.ContainerStatus
		for i := range statuses {
			if statuses[i].Name == c.Name {
				st = &statuses[i]
			}
		}
		started := false
		if st != nil {
			cr.Restarts = st.RestartCount
			switch s := st.State; {
			case s.Terminated != nil:
				t := s.Terminated
				code := t.ExitCode
				cr.ExitCode, cr.Signal, cr.Reason = &code, t.Signal, red.text(t.Reason, api.MaxRecordReasonBytes)
				cr.Message = red.text(t.Message, api.MaxRecordMessageBytes)
				if !t.StartedAt.IsZero() {
					cr.StartedAt = t.StartedAt.DeepCopy()
				}
				if !t.FinishedAt.IsZero() {
					cr.FinishedAt = t.FinishedAt.DeepCopy()
				}
				started = true
			case s.Running != nil:
				cr.Reason = "Running"
				if !s.Running.StartedAt.IsZero() {
					cr.StartedAt = s.Running.StartedAt.DeepCopy()
				}
				started = true
			case s.Waiting != nil:
				cr.Reason = red.text(s.Waiting.Reason, api.MaxRecordReasonBytes)
				cr.Message = red.text(s.Waiting.Message, api.MaxRecordMessageBytes)
				started = st.RestartCount > 0
			}
		}
		switch {
		case logs == nil:
		case !started:
			cr.LogNote = "the container never started, so it has no log"
		case *budget <= 0:
			cr.LogNote = fmt.Sprintf("not kept: the record's %d bytes of log are used by later Pods", api.MaxRecordLogBytes)
		default:
			max := min(logs.TailBytes, *budget)
			b, truncated, note, err := r.tail(ctx, p, c.Name, logs.TailLines, max, red)
			if err != nil {
				cr.LogNote = "the log could not be read: " + red.text(err.Error(), 1024)
				break
			}
			*budget -= len(b)
			cr.SetLog(b)
			cr.LogTruncated, cr.LogNote = truncated, note
		}
		out = append(out, cr)
	}
	return out
}

// tail reads the end of one container's log: at most lines lines and maxBytes bytes, starting at
// a line boundary when it can, redacted before it is cut so that a cut cannot split a secret
// out of a pattern's reach.
func (r *Recorder) tail(ctx context.Context, p *corev1.Pod, container string, lines, maxBytes int, red *redactor) ([]byte, bool, string, error) {
	// One line more than kept, to know whether there was more.
	n := int64(lines + 1)
	limit := int64(maxLogRead)
	rc, err := r.opts.Logs(ctx, p.Namespace, p.Name, &corev1.PodLogOptions{Container: container, TailLines: &n, LimitBytes: &limit})
	if err != nil {
		return nil, false, "", err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxLogRead+1))
	if err != nil {
		return nil, false, "", err
	}
	var notes []string
	truncated := false
	if len(data) > maxLogRead {
		data = data[:maxLogRead]
		truncated = true
		notes = append(notes, fmt.Sprintf("its last %d lines are longer than %d bytes; the tail is the end of their first %d bytes", lines, maxLogRead, maxLogRead))
	}
	data, redactions := red.redact(data)
	if c := countLines(data); c > lines {
		truncated = true
		for ; c > lines; c-- {
			data = data[bytes.IndexByte(data, '\n')+1:]
		}
	}
	if len(data) > maxBytes {
		truncated = true
		data = data[len(data)-maxBytes:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 && i < len(data)-1 {
			data = data[i+1:]
		} else {
			for len(data) > 0 && !utf8.RuneStart(data[0]) {
				data = data[1:]
			}
		}
	}
	if redactions > 0 {
		notes = append(notes, fmt.Sprintf("%d redacted", redactions))
	}
	return data, truncated, strings.Join(notes, "; "), nil
}

// countLines counts lines; a last line without a newline counts.
func countLines(b []byte) int {
	n := bytes.Count(b, []byte{'\n'})
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}
