package recorder

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gitbroker/gitbroker/gitsync"
)

// Metrics are the recorder's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	records prometheus.Counter
	pushes  *gitsync.PushMetrics
	pending prometheus.Gauge
}

// NewMetrics registers the recorder's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_recorder_records_total", Help: "JobRecords written.",
		}),
		pushes: gitsync.NewPushMetrics(reg, "gitbroker_recorder", "Record writes"),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_recorder_pending_records", Help: "Finished Jobs whose records are not on the branch yet.",
		}),
	}
	reg.MustRegister(m.records, m.pending)
	return m
}

func (m *Metrics) push(res gitsync.Result, err error, written int) {
	if m == nil {
		return
	}
	if err == nil {
		m.records.Add(float64(written))
	}
	m.pushes.Observe(res, err)
}

func (m *Metrics) setPending(n int) {
	if m != nil {
		m.pending.Set(float64(n))
	}
}
