package recorder

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/api"
)

// RolloutSelector picks the broker Deployments of Configurations with a staged rollout.
var RolloutSelector = Selector + "," + api.LabelRollout + "=" + api.RolloutStaged

// rollouts follows the broker Deployments of staged Configurations (get, list and watch on
// deployments, in the namespaces the recorder watches) and keeps status/rollouts/ on the
// recorder's ref: one RolloutRecord per Deployment, saying whether what it runs now is Available
// (docs/FORMATS.md, "Staged rollouts").
type rollouts struct {
	// namespaces are those watched; nil is every namespace.
	namespaces []string

	// wake tells the flush loop that something changed.
	wake chan struct{}

	mu   sync.Mutex
	seen map[string][]byte // RolloutRecords by path, of the Deployments the informers hold
}

func init() {
	registerStatusWriter(func(r *Recorder) statusWriter {
		r.rollouts = &rollouts{namespaces: r.opts.Namespaces, wake: make(chan struct{}, 1), seen: map[string][]byte{}}
		return statusWriter{kind: api.KindRolloutRecord, what: "rollouts", on: true,
			watch: r.watchRollouts, wake: r.rollouts.wake, flush: r.FlushRollouts}
	})
}

// observe takes a Deployment's rollout as it is now; a Deployment whose record would not parse
// (no inputs hash: not one the renderer wrote) has none.
func (ro *rollouts) observe(d *appsv1.Deployment) {
	b, err := marshalRollout(d)
	ro.mu.Lock()
	defer ro.mu.Unlock()
	p := api.RolloutPath(d.Namespace, d.Name)
	if err != nil {
		delete(ro.seen, p)
		return
	}
	ro.seen[p] = b
}

func (ro *rollouts) gone(namespace, name string) {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	delete(ro.seen, api.RolloutPath(namespace, name))
}

// desired is status/rollouts/ as it should be on a head that holds existing: the records of
// the Deployments the informers hold, and those of namespaces this recorder does not watch.
func (ro *rollouts) desired(existing map[string][]byte) map[string][]byte {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	out := maps.Clone(ro.seen)
	for p, b := range existing {
		ns, _, _ := strings.Cut(strings.TrimPrefix(p, api.RolloutDir+"/"), "/")
		if ro.namespaces != nil && !slices.Contains(ro.namespaces, ns) {
			out[p] = b
		}
	}
	return out
}

// rolloutOf judges a Deployment's rollout as `kubectl rollout status` does: its controller has
// observed its spec, every replica is updated, no old one is left and all are Available.
func rolloutOf(d *appsv1.Deployment) api.RolloutRecordSpec {
	spec := api.RolloutRecordSpec{InputsHash: d.Annotations[api.AnnotationInputsHash]}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" && st.ObservedGeneration >= d.Generation {
			spec.Message, spec.ProgressDeadlineExceeded = c.Message, true
			return spec
		}
	}
	switch {
	case st.ObservedGeneration < d.Generation:
		spec.Message = "its controller has not observed this spec yet"
	case st.UpdatedReplicas < want:
		spec.Message = fmt.Sprintf("%d of %d replicas updated", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		spec.Message = fmt.Sprintf("%d old replicas pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		spec.Message = fmt.Sprintf("%d of %d updated replicas available", st.AvailableReplicas, st.UpdatedReplicas)
	default:
		spec.Available = true
	}
	return spec
}

func marshalRollout(d *appsv1.Deployment) ([]byte, error) {
	spec := rolloutOf(d)
	for len(spec.Message) > api.MaxRolloutMessageBytes || !utf8.ValidString(spec.Message) {
		spec.Message = strings.ToValidUTF8(spec.Message[:min(len(spec.Message), api.MaxRolloutMessageBytes)], "")
	}
	rec := api.RolloutRecord{
		TypeMeta:   metav1.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindRolloutRecord},
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace},
		Spec:       spec,
	}
	b, err := yaml.Marshal(rec)
	if err != nil {
		return nil, err
	}
	b = []byte(strings.Replace(string(b), "  creationTimestamp: null\n", "", 1))
	if _, errs := api.ParseRolloutFile(api.RolloutPath(d.Namespace, d.Name), b); len(errs) > 0 {
		return nil, fmt.Errorf("refusing to write a RolloutRecord the renderer would reject: %w", errs)
	}
	return b, nil
}

// watchRollouts starts the Deployment informers; synced reports when they have listed every
// staged Deployment.
func (r *Recorder) watchRollouts(ctx context.Context, namespaces []string) (func() bool, error) {
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		factory := informers.NewSharedInformerFactoryWithOptions(r.opts.Client, 0,
			informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = RolloutSelector }))
		inf := factory.Apps().V1().Deployments().Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.observeRollout(obj) },
			UpdateFunc: func(_, obj any) { r.observeRollout(obj) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if d, ok := obj.(*appsv1.Deployment); ok {
					r.rollouts.gone(d.Namespace, d.Name)
					wakeUp(r.rollouts.wake)
				}
			},
		}); err != nil {
			return nil, fmt.Errorf("watching Deployments: %w", err)
		}
		factory.Start(ctx.Done())
		go func() {
			<-ctx.Done()
			factory.Shutdown()
		}()
		synced = append(synced, inf.HasSynced)
	}
	return func() bool {
		for _, s := range synced {
			if !s() {
				return false
			}
		}
		return true
	}, nil
}

func (r *Recorder) observeRollout(obj any) {
	if d, ok := obj.(*appsv1.Deployment); ok {
		r.rollouts.observe(d)
		wakeUp(r.rollouts.wake)
	}
}

// FlushRollouts brings status/rollouts/ on the recorder's ref up to the Deployments it has
// seen. A record changes only when what it says does.
func (r *Recorder) FlushRollouts(ctx context.Context) (time.Time, error) {
	var changed []string
	commit, err := r.replaceDir(ctx, api.RolloutDir, func(existing map[string][]byte) (map[string][]byte, string, error) {
		files := r.rollouts.desired(existing)
		changed = added(existing, files)
		for p, b := range files {
			if string(existing[p]) != string(b) {
				changed = append(changed, p)
			}
		}
		slices.Sort(changed)
		return files, rolloutsMessage(changed, files), nil
	})
	if commit != "" {
		r.opts.Log.Info("rollouts written", "changed", len(changed), "commit", commit)
	}
	return time.Time{}, err
}

func rolloutsMessage(changed []string, files map[string][]byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rollouts: %d changed\n\n", len(changed))
	for _, p := range changed {
		name := strings.TrimSuffix(strings.TrimPrefix(p, api.RolloutDir+"/"), ".yaml")
		switch data, ok := files[p]; {
		case !ok:
			fmt.Fprintf(&b, "- %s: gone\n", name)
		case strings.Contains(string(data), "available: true"):
			fmt.Fprintf(&b, "- %s: available\n", name)
		default:
			fmt.Fprintf(&b, "- %s: not available\n", name)
		}
	}
	return b.String()
}
