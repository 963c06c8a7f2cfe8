package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
)

// Flag names of the daemons' endpoints.
const (
	flagMetricsAddr = "metrics-addr"
	flagHealthAddr  = "health-addr"
)

// EndpointOptions are where a daemon serves metrics and probes, with
// Flux's controllers' defaults.
type EndpointOptions struct {
	MetricsAddr string
	HealthAddr  string
}

func (o *EndpointOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, flagMetricsAddr, ":8080", "Address the Prometheus metrics endpoint (/metrics) binds to; empty disables it.")
	fs.StringVar(&o.HealthAddr, flagHealthAddr, ":9440", "Address the probes (/healthz, /readyz) bind to; empty disables them.")
}

// Probes answer /healthz and /readyz.
type Probes struct {
	Healthy func() error
	Ready   func() error
}

// Stalled is a liveness check of a loop that finishes a cycle every interval: it fails once
// no cycle has finished for 3 intervals and 5 minutes, counted from start until the first one
// does. last returns when the last cycle finished; what names a cycle in the error. A loop
// that has not begun (begun false; nil is always begun) is not stalled.
func Stalled(start time.Time, interval time.Duration, last func() time.Time, begun func() bool, what string) func() error {
	stall := 3*interval + 5*time.Minute
	return func() error {
		l := last()
		if l.Before(start) {
			l = start
		}
		if (begun == nil || begun()) && time.Since(l) > stall {
			return fmt.Errorf("no %s has finished for %s", what, time.Since(l).Round(time.Second))
		}
		return nil
	}
}

// ServeEndpoints starts the metrics and probe servers and stops them when
// ctx ends. It returns once both listen, with their addresses (useful
// when binding port 0).
func ServeEndpoints(ctx context.Context, log logr.Logger, o EndpointOptions, reg *prometheus.Registry, p Probes) (metricsAddr, healthAddr string, err error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	start := func(addr string, h http.Handler) (string, error) {
		if addr == "" {
			return "", nil
		}
		return Serve(ctx, log, &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second})
	}
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if metricsAddr, err = start(o.MetricsAddr, metrics); err != nil {
		return "", "", err
	}
	health := http.NewServeMux()
	check := func(f func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if err := f(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	health.Handle("/healthz", check(p.Healthy))
	health.Handle("/readyz", check(p.Ready))
	if healthAddr, err = start(o.HealthAddr, health); err != nil {
		return "", "", err
	}
	return metricsAddr, healthAddr, nil
}

// Serve listens on srv.Addr and serves srv until ctx ends, then shuts it down (5 s at most). It
// returns once it listens, with the address (useful when binding port 0).
func Serve(ctx context.Context, log logr.Logger, srv *http.Server) (string, error) {
	lis, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return "", fmt.Errorf("listening on %s: %w", srv.Addr, err)
	}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "endpoint server stopped", "addr", lis.Addr().String())
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return lis.Addr().String(), nil
}
