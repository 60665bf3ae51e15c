package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/dashboard"
	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// newMetricsRegistry makes the node's Prometheus registry: Go and process
// collectors plus the node's own series (rpc.NodeMetrics).
func newMetricsRegistry() (*prometheus.Registry, *rpc.NodeMetrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	nm, err := rpc.NewNodeMetrics(reg)
	return reg, nm, err
}

// nodeGauges reads pending submissions from the state machine and the peer
// count from gossip at scrape time.
func nodeGauges(ctx context.Context, node *syncer.Node, gn *gossip.Node) rpc.NodeGauges {
	return rpc.NodeGauges{
		Peers: func() float64 { return float64(gn.ConnectedPeers()) },
		Pending: func() float64 {
			runs, err := node.ListRuns(ctx, wire.ListRunsParams{Status: wire.StatusRunning})
			if err != nil {
				return 0
			}
			n := 0
			for _, s := range runs {
				v, err := node.GetRun(ctx, s.TaskID)
				if err != nil {
					continue
				}
				for _, f := range v.Fragments {
					if !f.Committed {
						n += f.Accepted
					}
				}
			}
			return float64(n)
		},
	}
}

// pages is what the RPC port serves to GET requests: /metrics always, and
// the run dashboard at / when --dashboard is on (auto: with --dev).
func pages(cfg Config, reg *prometheus.Registry, src dashboard.Source, verify rpc.VerifyFunc, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if cfg.dashboardOn() {
		var dv dashboard.VerifyFunc
		if verify != nil {
			dv = func(receipt, root []byte) (byte, string) {
				r := verify(context.Background(), receipt, root)
				return r.Valid, r.Reason
			}
		}
		mux.Handle("GET /", dashboard.Handler(src, dashboard.Options{Verify: dv, Logger: log.With("component", "dashboard")}))
		log.Info("dashboard", "url", "http://"+cfg.RPCAddr+"/")
	} else {
		mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "this address serves JSON-RPC over POST and /metrics; the run dashboard is off (tenzro-node --dashboard on, default with --dev)", http.StatusMethodNotAllowed)
		})
	}
	return mux
}

// dashboardOn resolves --dashboard: on, off, or auto (on with --dev).
func (c Config) dashboardOn() bool {
	return c.Dashboard == "on" || (c.Dashboard == "auto" || c.Dashboard == "") && c.Dev
}

// p2pBytes exports the libp2p bandwidth counter: bytes carried by this
// node's streams per protocol and direction (only protocols this node
// registered are ever negotiated, so the label set is bounded).
type p2pBytes struct {
	gn   *gossip.Node
	desc *prometheus.Desc
}

func newP2PBytes(gn *gossip.Node) p2pBytes {
	return p2pBytes{gn: gn, desc: prometheus.NewDesc("tenzro_p2p_stream_bytes_total",
		"Bytes carried by this node's libp2p streams since it started, by protocol (pubsub = the gossip topics, /tenzro/blob = payloads and weights) and direction.",
		[]string{"protocol", "direction"}, nil)}
}

func (c p2pBytes) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c p2pBytes) Collect(ch chan<- prometheus.Metric) {
	for proto, v := range c.gn.BytesByProtocol() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v[0]), proto, "in")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v[1]), proto, "out")
	}
}
