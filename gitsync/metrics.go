package gitsync

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// PushMetrics are the Prometheus metrics of a writer's Updates, the same for every writer:
// <prefix>_pushes_total{result} (pushed, unchanged or failed), <prefix>_push_conflicts_total,
// <prefix>_push_retries_total and <prefix>_push_duration_seconds. A nil *PushMetrics records
// nothing.
type PushMetrics struct {
	pushes    *prometheus.CounterVec
	conflicts prometheus.Counter
	retries   prometheus.Counter
	duration  prometheus.Histogram
}

// NewPushMetrics registers a writer's push metrics with reg; writes names what one Update
// writes ("Inventory writes"), for the help texts.
func NewPushMetrics(reg prometheus.Registerer, prefix, writes string) *PushMetrics {
	m := &PushMetrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_pushes_total",
			Help: writes + " by result: pushed, unchanged (the branch already held it) or failed.",
		}, []string{"result"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "_push_conflicts_total",
			Help: "Pushes refused because the branch had moved; each was recomputed on the new head.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "_push_retries_total",
			Help: "Fetches or pushes repeated after a transient error.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    prefix + "_push_duration_seconds",
			Help:    "Time from the first fetch of one of the " + writes + " to its end, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
	}
	reg.MustRegister(m.pushes, m.conflicts, m.retries, m.duration)
	return m
}

// Observe records how one Update went.
func (m *PushMetrics) Observe(res Result, err error) {
	if m == nil {
		return
	}
	switch {
	case err == nil:
		m.pushes.WithLabelValues("pushed").Inc()
	case errors.Is(err, ErrNoChanges):
		m.pushes.WithLabelValues("unchanged").Inc()
	default:
		m.pushes.WithLabelValues("failed").Inc()
	}
	m.conflicts.Add(float64(res.Conflicts))
	m.retries.Add(float64(res.Retries))
	m.duration.Observe(res.Elapsed.Seconds())
}
