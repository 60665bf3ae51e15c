package rpc

import (
	"context"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// NodeMetrics are the node's own Prometheus series (beside the RPC ones of
// Metrics):
//
//	tenzro_rounds_committed_total
//	tenzro_submissions_total{outcome}            accepted, forwarded, or the refusal kind
//	tenzro_fragment_finalize_seconds{status}     round start → fragment commit
//	tenzro_syncer_commit_compute_seconds{phase}  compute of each of this node's commits, by phase:
//	                                             verify, copy_stale, finalize, write, score (syncer.ComputePhases)
//	tenzro_syncer_input_cache_lookups_total{result}  a commit's lookups of what ingest computed of an input:
//	                                             hit or miss (syncer.Node.InputCacheStats)
//	tenzro_plugin_call_seconds{op,rule}          aggregate / verify / outer_step / finalize
//	tenzro_plugin_fuel_total{op,rule}
//	tenzro_payload_bytes_total{direction}        in: every payload and initial weights received, by any path
//	                                             (inline base64, PUT /blobs, the libp2p blob stream); out:
//	                                             weights and payloads served
//	tenzro_pending_submissions                   accepted, not yet aggregated (all running runs)
//	tenzro_peers                                 libp2p peers connected
//	tenzro_reexecutions_total{why,result}        commits re-executed (watch, vote) by result: agree, disagree, unavailable
//	tenzro_reexecution_seconds{why}              time to re-execute one commit
//	tenzro_challenges_sent_total                 challenges this node's watcher sent
//	tenzro_challenge_outcomes_total{outcome}     decided challenges this node sent, by outcome
//	tenzro_challenge_votes_total{vote}           votes this validator sent: result or unavailable
//
// It implements syncer.Observer; InstrumentService and InstrumentEngine feed
// the rest.
type NodeMetrics struct {
	rounds      prometheus.Counter
	submissions *prometheus.CounterVec
	finalize    *prometheus.HistogramVec
	compute     *prometheus.HistogramVec
	pluginTime  *prometheus.HistogramVec
	pluginFuel  *prometheus.CounterVec
	payload     *prometheus.CounterVec
	reexec      *prometheus.CounterVec
	reexecTime  *prometheus.HistogramVec
	chSent      prometheus.Counter
	chOutcomes  *prometheus.CounterVec
	votes       *prometheus.CounterVec
}

// NodeGauges are read at scrape time; either may be nil.
type NodeGauges struct {
	// Pending returns the accepted submissions not yet aggregated.
	Pending func() float64
	// Peers returns the number of connected libp2p peers.
	Peers func() float64
	// BlobBytes, BlobCount and BlobCap return the blob store's disk use,
	// number of blobs and cap (0: none); BlobUploadBytes the bytes of
	// uploads no record references yet.
	BlobBytes, BlobCount, BlobCap, BlobUploadBytes func() float64
	// ReplayRuns and ReplayHits return Server.HeavyStats: replay calls
	// that ran on their own (executed, or refused by the heavy-read
	// budget) and those answered from the replay cache.
	ReplayRuns, ReplayHits func() float64
	// InputCacheHits and InputCacheMisses return syncer.Node's
	// InputCacheStats: a commit's lookups of the input cache.
	InputCacheHits, InputCacheMisses func() float64
}

// refusalOutcomes are the outcome label values besides accepted/forwarded:
// the stable kind names of ERRORS.md.
func refusalOutcome(err error) string {
	if kc, ok := kindCodes[machine.KindOf(err)]; ok {
		return kc.Name
	}
	return "internal"
}

// NewNodeMetrics registers the node's series with reg (RegisterGauges adds
// the two read at scrape time, once their sources exist).
func NewNodeMetrics(reg prometheus.Registerer) (*NodeMetrics, error) {
	m := &NodeMetrics{
		rounds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tenzro", Name: "rounds_committed_total",
			Help: "Rounds committed by this node's state machine (every run)."}),
		submissions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenzro", Name: "submissions_total",
			Help: "Outer-gradient submissions by outcome: accepted, forwarded (light role), or the refusal kind (invalid, unauthorized, conflict, not_found, attestation, ...)."},
			[]string{"outcome"}),
		finalize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "tenzro", Name: "fragment_finalize_seconds",
			Help:    "Time from a round's start to each fragment's commit, by commit status.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}, []string{"status"}),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "tenzro", Subsystem: "syncer", Name: "commit_compute_seconds",
			Help:    "Compute time of each fragment commit this node's syncer made, by phase (verify, copy_stale, finalize, write, score); the chain's block latency is not included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"phase"}),
		pluginTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "tenzro", Name: "plugin_call_seconds",
			Help:    "Wall time of aggregation, verification and outer-step calls, by rule.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"op", "rule"}),
		pluginFuel: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenzro", Name: "plugin_fuel_total",
			Help: "Fuel spent by plugin calls, by rule (0 for the native engine)."}, []string{"op", "rule"}),
		payload: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenzro", Name: "payload_bytes_total",
			Help: "Payload bytes in (submissions, initial weights) and out (weights, payloads served)."}, []string{"direction"}),
		reexec: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenzro", Name: "reexecutions_total",
			Help: "Fragment commits this node re-executed (why: watch, vote) by result: agree, disagree, unavailable."}, []string{"why", "result"}),
		reexecTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "tenzro", Name: "reexecution_seconds",
			Help:    "Wall time to re-execute one fragment commit (fetching its inputs included).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"why"}),
		chSent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tenzro", Name: "challenges_sent_total",
			Help: "Challenges this node's watcher sent."}),
		chOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenzro", Name: "challenge_outcomes_total",
			Help: "Decided challenges this node sent, by outcome (syncer_wrong, challenge_wrong, expired, void)."}, []string{"outcome"}),
		votes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenzro", Name: "challenge_votes_total",
			Help: "Challenge votes this validator node sent: result or unavailable."}, []string{"vote"}),
	}
	for _, c := range []prometheus.Collector{m.rounds, m.submissions, m.finalize, m.compute, m.pluginTime, m.pluginFuel, m.payload, m.reexec, m.reexecTime, m.chSent, m.chOutcomes, m.votes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.payload.WithLabelValues("in")
	m.payload.WithLabelValues("out")
	m.submissions.WithLabelValues("accepted")
	for _, ph := range syncer.ComputePhases {
		m.compute.WithLabelValues(ph)
	}
	return m, nil
}

// RegisterGauges registers tenzro_pending_submissions and tenzro_peers.
func RegisterGauges(reg prometheus.Registerer, g NodeGauges) error {
	var cs []prometheus.Collector
	if g.Pending != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "tenzro", Name: "pending_submissions",
			Help: "Accepted submissions waiting for their fragment's aggregation, over running runs."}, g.Pending))
	}
	if g.Peers != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "tenzro", Name: "peers",
			Help: "libp2p peers connected."}, g.Peers))
	}
	for _, g := range []struct {
		name, help string
		f          func() float64
	}{
		{"blob_store_bytes", "Bytes of blobs on this node's disk (payloads, weights, uploads).", g.BlobBytes},
		{"blob_store_blobs", "Blobs on this node's disk.", g.BlobCount},
		{"blob_store_cap_bytes", "The blob store's disk cap (node flag --blob-disk-cap; 0: none).", g.BlobCap},
		{"blob_upload_unreferenced_bytes", "Bytes of PUT /blobs uploads no record references yet (collected after --blob-ttl).", g.BlobUploadBytes},
	} {
		if g.f != nil {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "tenzro", Name: g.name, Help: g.help}, g.f))
		}
	}
	for _, c := range []struct {
		name, help string
		f          func() float64
	}{
		{"replay_runs_total", "tenzro_training_replayFragment calls that ran on their own: executed, or refused by the heavy-read budget (identical calls share one, and cached answers are not counted).", g.ReplayRuns},
		{"replay_cache_hits_total", "tenzro_training_replayFragment calls answered from the replay cache.", g.ReplayHits},
	} {
		if c.f != nil {
			cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "tenzro", Name: c.name, Help: c.help}, c.f))
		}
	}
	for _, c := range []struct {
		result string
		f      func() float64
	}{{"hit", g.InputCacheHits}, {"miss", g.InputCacheMisses}} {
		if c.f != nil {
			cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "tenzro", Subsystem: "syncer",
				Name: "input_cache_lookups_total", ConstLabels: prometheus.Labels{"result": c.result},
				Help: "A commit's lookups of what this node computed of an input when it accepted it (binding, per-submission verifiers, the copy rule's read pass), by result: hit or miss (--input-cache-bytes)."}, c.f))
		}
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// FragmentCommitted implements syncer.Observer.
func (m *NodeMetrics) FragmentCommitted(_ string, _ uint64, _ int, status string, d time.Duration) {
	m.finalize.WithLabelValues(status).Observe(d.Seconds())
}

var _ syncer.ComputeObserver = (*NodeMetrics)(nil)

// CommitCompute implements syncer.ComputeObserver (phase is one of
// syncer.ComputePhases: the label set is fixed).
func (m *NodeMetrics) CommitCompute(phase string, d time.Duration) {
	m.compute.WithLabelValues(phase).Observe(d.Seconds())
}

// RoundCommitted implements syncer.Observer.
func (m *NodeMetrics) RoundCommitted(string, uint64) { m.rounds.Inc() }

var _ syncer.ChallengeObserver = (*NodeMetrics)(nil)

// Reexecuted implements syncer.ChallengeObserver.
func (m *NodeMetrics) Reexecuted(why string, agree, unavailable bool, d time.Duration) {
	res := "disagree"
	switch {
	case unavailable:
		res = "unavailable"
	case agree:
		res = "agree"
	}
	m.reexec.WithLabelValues(why, res).Inc()
	m.reexecTime.WithLabelValues(why).Observe(d.Seconds())
}

// ChallengeSent implements syncer.ChallengeObserver.
func (m *NodeMetrics) ChallengeSent(string, uint64, int) { m.chSent.Inc() }

// ChallengeDecided implements syncer.ChallengeObserver.
func (m *NodeMetrics) ChallengeDecided(outcome string) { m.chOutcomes.WithLabelValues(outcome).Inc() }

// VoteSent implements syncer.ChallengeObserver.
func (m *NodeMetrics) VoteSent(unavailable bool) {
	v := "result"
	if unavailable {
		v = "unavailable"
	}
	m.votes.WithLabelValues(v).Inc()
}

// PayloadIn counts n payload bytes received by a path other than the
// JSON-RPC methods: a blob stored by PUT /blobs (rpc.Options.OnBlobIn) or
// fetched from a peer over the blob stream (gossip.Config.OnBlobIn). A
// submission or posting that names such a blob by hash carries no bytes
// itself, so nothing is counted twice.
func (m *NodeMetrics) PayloadIn(n int64) { m.payload.WithLabelValues("in").Add(float64(n)) }

// InstrumentService counts submissions by outcome and payload bytes through svc
// (the bytes sent inline; by-reference ones are counted where they arrived).
func InstrumentService(svc syncer.Service, m *NodeMetrics) syncer.Service {
	return instrumented{svc, m}
}

type instrumented struct {
	syncer.Service
	m *NodeMetrics
}

func (s instrumented) Submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	res, err := s.Service.Submit(ctx, g)
	switch {
	case err != nil:
		s.m.submissions.WithLabelValues(refusalOutcome(err)).Inc()
	case res.Forwarded:
		s.m.submissions.WithLabelValues("forwarded").Inc()
		s.m.payload.WithLabelValues("in").Add(float64(len(g.GradientPayload)))
	default:
		s.m.submissions.WithLabelValues("accepted").Inc()
		s.m.payload.WithLabelValues("in").Add(float64(len(g.GradientPayload)))
	}
	return res, err
}

func (s instrumented) PostTask(ctx context.Context, p *wire.PostTaskParams) (*wire.PostTaskResult, error) {
	res, err := s.Service.PostTask(ctx, p)
	if err == nil {
		s.m.payload.WithLabelValues("in").Add(float64(len(p.InitWeights)))
	}
	return res, err
}

func (s instrumented) SetInitWeights(ctx context.Context, p *wire.SetInitWeightsParams) (*wire.PostTaskResult, error) {
	res, err := s.Service.SetInitWeights(ctx, p)
	if err == nil {
		s.m.payload.WithLabelValues("in").Add(float64(len(p.Weights)))
	}
	return res, err
}

func (s instrumented) GetWeights(ctx context.Context, p wire.GetWeightsParams) (*wire.Weights, error) {
	w, err := s.Service.GetWeights(ctx, p)
	if err == nil {
		s.m.payload.WithLabelValues("out").Add(float64(len(w.Payload)))
	}
	return w, err
}

func (s instrumented) GetPayload(ctx context.Context, h wire.Hash) ([]byte, error) {
	b, err := s.Service.GetPayload(ctx, h)
	if err == nil {
		s.m.payload.WithLabelValues("out").Add(float64(len(b)))
	}
	return b, err
}

// InstrumentEngine times the plugin calls of e and counts their fuel by rule.
// The optional syncer.Decoder (codec plugins) stays visible through it.
func InstrumentEngine(e syncer.Engine, m *NodeMetrics) syncer.Engine {
	d, dok := e.(syncer.Decoder)
	sc, sok := e.(syncer.Scorer)
	switch {
	case dok && sok:
		return scorerMetrics{decoderMetrics{engineMetrics{e, m}, d}, sc}
	case dok:
		return decoderMetrics{engineMetrics{e, m}, d}
	}
	return engineMetrics{e, m}
}

// scorerMetrics keeps an engine's syncer.Scorer visible and times its
// score calls (op "score", labelled with the evaluator).
type scorerMetrics struct {
	decoderMetrics
	sc syncer.Scorer
}

func (s scorerMetrics) ResolveScorer(ctx context.Context, ref string, params json.RawMessage) (syncer.RuleRef, error) {
	return s.sc.ResolveScorer(ctx, ref, params)
}

func (s scorerMetrics) Score(ctx context.Context, in syncer.ScoreInput) (syncer.ScoreOutput, error) {
	t := time.Now()
	out, err := s.sc.Score(ctx, in)
	s.observe("score", in.Evaluator.Name, t, out.Fuel)
	return out, err
}

type decoderMetrics struct {
	engineMetrics
	dec syncer.Decoder
}

func (d decoderMetrics) ResolveCodec(ctx context.Context, codec string, params json.RawMessage) (syncer.RuleRef, error) {
	return d.dec.ResolveCodec(ctx, codec, params)
}

func (d decoderMetrics) Decode(ctx context.Context, in syncer.DecodeInput) (syncer.DecodeOutput, error) {
	t := time.Now()
	out, err := d.dec.Decode(ctx, in)
	d.observe("decode", in.Codec.Name, t, out.Fuel)
	return out, err
}

type engineMetrics struct {
	syncer.Engine
	m *NodeMetrics
}

func (e engineMetrics) observe(op, rule string, start time.Time, fuel uint64) {
	e.m.pluginTime.WithLabelValues(op, rule).Observe(time.Since(start).Seconds())
	e.m.pluginFuel.WithLabelValues(op, rule).Add(float64(fuel))
}

func (e engineMetrics) Aggregate(ctx context.Context, in syncer.AggregateInput) (syncer.AggregateOutput, error) {
	t := time.Now()
	out, err := e.Engine.Aggregate(ctx, in)
	e.observe("aggregate", in.Rule.Name, t, out.Fuel)
	return out, err
}

func (e engineMetrics) Verify(ctx context.Context, in syncer.VerifyInput) (syncer.VerifyOutput, error) {
	t := time.Now()
	out, err := e.Engine.Verify(ctx, in)
	e.observe("verify", in.Verifier.Name, t, out.Fuel)
	return out, err
}

// Finalize is one fragment's fused finalize (round-level verifiers,
// aggregation and outer step): op "finalize", labelled with the
// aggregation rule, its fuel the three steps'.
func (e engineMetrics) Finalize(ctx context.Context, in syncer.FinalizeInput) (syncer.FinalizeOutput, error) {
	t := time.Now()
	out, err := e.Engine.Finalize(ctx, in)
	e.observe("finalize", in.Rule.Name, t, out.Fuel)
	return out, err
}

func (e engineMetrics) OuterStep(ctx context.Context, in syncer.OuterStepInput) (syncer.OuterStepOutput, error) {
	t := time.Now()
	out, err := e.Engine.OuterStep(ctx, in)
	e.observe("outer_step", in.Rule.Name, t, out.Fuel)
	return out, err
}
