package rpc

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is an Observer that records Prometheus metrics:
// tenzro_rpc_requests_total{method,code} and
// tenzro_rpc_request_duration_seconds{method}.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewMetrics registers the RPC metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tenzro", Subsystem: "rpc", Name: "requests_total",
			Help: "JSON-RPC method calls by method and result code (0 = success).",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tenzro", Subsystem: "rpc", Name: "request_duration_seconds",
			Help:    "JSON-RPC method handler latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObserveRPC implements Observer. Only served method names reach it, so the
// label set is bounded.
func (m *Metrics) ObserveRPC(method string, code int, d time.Duration) {
	m.requests.WithLabelValues(method, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}
