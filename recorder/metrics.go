package recorder

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gitbroker/gitbroker/gitsync"
)

// Metrics are the recorder's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	records   prometheus.Counter
	pushes    *prometheus.CounterVec
	conflicts prometheus.Counter
	pending   prometheus.Gauge
	duration  prometheus.Histogram
}

// NewMetrics registers the recorder's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_recorder_records_total", Help: "JobRecords written.",
		}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitbroker_recorder_pushes_total", Help: "Record writes by result: pushed, unchanged or failed.",
		}, []string{"result"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_recorder_push_conflicts_total", Help: "Pushes refused because the branch had moved; recomputed.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_recorder_pending_records", Help: "Finished Jobs whose records are not on the branch yet.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gitbroker_recorder_push_duration_seconds", Help: "Time to land one batch of records.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
	}
	reg.MustRegister(m.records, m.pushes, m.conflicts, m.pending, m.duration)
	return m
}

func (m *Metrics) push(res gitsync.Result, err error, written int) {
	if m == nil {
		return
	}
	switch {
	case err == nil:
		m.pushes.WithLabelValues("pushed").Inc()
		m.records.Add(float64(written))
	case errors.Is(err, gitsync.ErrNoChanges):
		m.pushes.WithLabelValues("unchanged").Inc()
	default:
		m.pushes.WithLabelValues("failed").Inc()
	}
	m.conflicts.Add(float64(res.Conflicts))
	m.duration.Observe(res.Elapsed.Seconds())
}

func (m *Metrics) setPending(n int) {
	if m != nil {
		m.pending.Set(float64(n))
	}
}
