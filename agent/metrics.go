package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gitbroker/gitbroker/gitsync"
)

// Metrics are the agent's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	cycles          prometheus.Counter
	pushes          *gitsync.PushMetrics
	devices         *prometheus.GaugeVec
	discoveryErrors *prometheus.CounterVec
	invalidInputs   prometheus.Counter
	refused         prometheus.Gauge
	unresolved      *prometheus.GaugeVec
	enrolled        prometheus.Gauge
}

// NewMetrics registers the agent's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		cycles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gitbroker_agent_cycles_total", Help: "Discovery cycles run.",
		}),
		pushes: gitsync.NewPushMetrics(reg, "gitbroker_agent", "Inventory writes"),
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
	m.unresolved = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gitbroker_agent_discovery_properties_unresolved",
		Help: "1 while a Configuration's discoveryProperties[].valueFrom cannot be resolved (its devices are kept, not rediscovered).",
	}, []string{"configuration"})
	m.enrolled = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gitbroker_agent_enrolled",
		Help: "1 while .gitbroker/allowed_signers enrolls the agent's key as node:<node> (or the repository enrolls no writers), 0 while the renderer would ignore what the agent writes.",
	})
	reg.MustRegister(m.cycles, m.devices, m.discoveryErrors, m.invalidInputs, m.refused, m.unresolved, m.enrolled)
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
	setBool(m.refused, refused)
}

func (m *Metrics) discoveryError(handler string) {
	if m != nil {
		m.discoveryErrors.WithLabelValues(handler).Inc()
	}
}

func (m *Metrics) push(res gitsync.Result, err error) {
	if m != nil {
		m.pushes.Observe(res, err)
	}
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

func (m *Metrics) unresolvedProperties(configuration string, unresolved bool) {
	if m == nil {
		return
	}
	if unresolved {
		m.unresolved.WithLabelValues(configuration).Set(1)
	} else {
		m.unresolved.DeleteLabelValues(configuration)
	}
}

func (m *Metrics) setEnrolled(enrolled bool) {
	if m != nil {
		setBool(m.enrolled, enrolled)
	}
}

// setBool sets a 0/1 gauge.
func setBool(g prometheus.Gauge, on bool) {
	if on {
		g.Set(1)
	} else {
		g.Set(0)
	}
}
