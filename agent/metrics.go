package agent

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gitbroker/gitbroker/gitsync"
)

// Metrics are the agent's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	cycles          prometheus.Counter
	pushes          *prometheus.CounterVec
	conflicts       prometheus.Counter
	retries         prometheus.Counter
	pushDuration    prometheus.Histogram
	devices         *prometheus.GaugeVec
	discoveryErrors *prometheus.CounterVec
	invalidInputs   prometheus.Counter
	refused         prometheus.Gauge
}

// NewMetrics registers the agent's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		cycles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_agent_cycles_total", Help: "Discovery cycles run.",
		}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitbroker_agent_pushes_total",
			Help: "Inventory writes by result: pushed, unchanged (the branch already held it) or failed.",
		}, []string{"result"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_agent_push_conflicts_total",
			Help: "Pushes refused because the branch had moved; each was recomputed on the new head.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_agent_push_retries_total",
			Help: "Fetches or pushes repeated after a transient error.",
		}),
		pushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gitbroker_agent_push_duration_seconds",
			Help:    "Time from the first fetch of an inventory write to its end, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gitbroker_agent_devices",
			Help: "Devices in this node's inventory per Configuration.",
		}, []string{"namespace", "configuration"}),
		discoveryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gitbroker_agent_discovery_errors_total",
			Help: "Discovery calls that failed, by handler.",
		}, []string{"handler"}),
		invalidInputs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_agent_invalid_configuration_files_total",
			Help: "Cycles that found an invalid Configuration file (its last valid version was used).",
		}),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gitbroker_agent_configurations_refused",
			Help: "1 while the tip of gitbroker/configurations is refused (not the renderer's signed publication, or a rollback); the agent discovers with the one it accepted before.",
		}),
	}
	reg.MustRegister(m.cycles, m.pushes, m.conflicts, m.retries, m.pushDuration, m.devices, m.discoveryErrors, m.invalidInputs, m.refused)
	return m
}

func (m *Metrics) cycle() {
	if m != nil {
		m.cycles.Inc()
	}
}

func (m *Metrics) invalid() {
	if m != nil {
		m.invalidInputs.Inc()
	}
}

func (m *Metrics) refusedConfigurations(refused bool) {
	if m == nil {
		return
	}
	if refused {
		m.refused.Set(1)
	} else {
		m.refused.Set(0)
	}
}

func (m *Metrics) discoveryError(handler string) {
	if m != nil {
		m.discoveryErrors.WithLabelValues(handler).Inc()
	}
}

func (m *Metrics) push(res gitsync.Result, err error) {
	if m == nil {
		return
	}
	switch {
	case err == nil:
		m.pushes.WithLabelValues("pushed").Inc()
	case errors.Is(err, gitsync.ErrNoChanges):
		m.pushes.WithLabelValues("unchanged").Inc()
	default:
		m.pushes.WithLabelValues("failed").Inc()
	}
	m.conflicts.Add(float64(res.Conflicts))
	m.retries.Add(float64(res.Retries))
	m.pushDuration.Observe(res.Elapsed.Seconds())
}

// setDevices replaces the per-Configuration device gauges.
func (m *Metrics) setDevices(counts map[[2]string]int) {
	if m == nil {
		return
	}
	m.devices.Reset()
	for k, n := range counts {
		m.devices.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
}
