package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/creachadair/jrpc2"
	"github.com/creachadair/jrpc2/handler"
	"github.com/creachadair/jrpc2/jhttp"
	"golang.org/x/sync/semaphore"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Defaults.
const (
	DefaultAddr = "127.0.0.1:8545"
	// DefaultMaxRequestBytes bounds one HTTP body. A 33 MB fragment travels
	// base64-encoded (×4/3) inside JSON, so the limit leaves ample room.
	DefaultMaxRequestBytes = 256 << 20
	// DefaultLargeRequestBytes is the body size above which a request needs
	// a large-request slot.
	DefaultLargeRequestBytes = 1 << 20
	// DefaultMaxLargeInFlight is the number of large requests decoded at once.
	DefaultMaxLargeInFlight = 2
	// DefaultLargeWait is how long a large request waits for a slot.
	DefaultLargeWait = 2 * time.Minute
	// DefaultMaxBatch bounds the number of requests in one batch.
	DefaultMaxBatch = 100
	// DefaultConcurrency bounds handlers running at once. Memory is bounded
	// by the large-request slots, so this only needs to keep small calls
	// (get-run, get-weights) from queueing behind slow submissions.
	DefaultConcurrency = 64
)

// PluginRegistry is the optional plugin registry (plugins package) served
// as tenzro_plugin_*.
type PluginRegistry interface {
	Publish(ctx context.Context, p *wire.PublishPluginParams) (*wire.PluginInfo, error)
	List(ctx context.Context) ([]wire.PluginInfo, error)
	Get(ctx context.Context, hash wire.Hash) (*wire.PluginInfo, []byte, error)
}

// AttestService is the optional attestation service (attest and enclave
// packages) served as tenzro_attest_*. Params arrive as the raw JSON object
// of the request (nil when absent); the implementation decodes them strictly
// and returns a syncer.Error of KindInvalid for bad params, KindAttestation
// for evidence refused by policy.
//
// tenzro_attest_getNonce is served by syncer.Service.AttestNonce.
type AttestService interface {
	SubmitEvidence(ctx context.Context, params json.RawMessage) (json.RawMessage, error)
	GetEvidence(ctx context.Context, params json.RawMessage) (json.RawMessage, error)
	GetPolicy(ctx context.Context, params json.RawMessage) (json.RawMessage, error)
	ReleaseKey(ctx context.Context, params json.RawMessage) (json.RawMessage, error)
}

// ChallengeService is the optional challenge service (syncer.Node) served
// as tenzro_training_challenge, getChallenges and replayFragment
// (docs/protocol/challenges.md).
type ChallengeService interface {
	SubmitChallenge(ctx context.Context, p *wire.ChallengeTx) (*wire.ChallengeResult, error)
	Challenges(ctx context.Context, task string) ([]wire.ChallengeRecord, error)
	ReplayFragment(ctx context.Context, p *wire.ReplayFragmentParams) (*wire.ReplayFragmentResult, error)
	FragmentState(ctx context.Context, p *wire.ReplayFragmentParams) (*wire.FragmentState, error)
}

// VerifyFunc serves tenzro_training_verifyReceipt
// (syncer.VerifyReceiptAgainst): with root nil, against the run root the
// node's committed state holds for the receipt's task; with a root, the pure
// check against it. Valid is 1 or 0 as in the 0x1008 precompile.
type VerifyFunc func(ctx context.Context, receipt []byte, root []byte) *wire.VerifyReceiptResult

// Observer receives one call per served method invocation (metrics).
type Observer interface {
	ObserveRPC(method string, code int, d time.Duration)
}

// Options configure a Server. The zero value serves the Service alone
// with the defaults above.
type Options struct {
	// MaxRequestBytes bounds one HTTP body (DefaultMaxRequestBytes when 0).
	MaxRequestBytes int64
	// LargeRequestBytes is the size above which a body needs one of
	// MaxLargeInFlight slots before it is read (DefaultLargeRequestBytes).
	LargeRequestBytes int64
	// MaxLargeInFlight bounds concurrent large requests (DefaultMaxLargeInFlight).
	MaxLargeInFlight int
	// LargeWait is how long a large request waits for a slot (DefaultLargeWait).
	LargeWait time.Duration
	// MaxLargePerPeer bounds the large slots one remote IP holds at once;
	// its other large requests wait (default: MaxLargeInFlight-1, at least 1).
	MaxLargePerPeer int
	// LargeMinRate is the slowest large body accepted after LargeGrace, in
	// bytes per second (DefaultLargeMinRate).
	LargeMinRate int64
	// LargeGrace is how long a large body may lag behind LargeMinRate at its
	// start (DefaultLargeGrace).
	LargeGrace time.Duration
	// MaxChunkedBytes bounds a body sent without Content-Length
	// (DefaultMaxChunkedBytes, at most MaxRequestBytes).
	MaxChunkedBytes int64
	// MaxBatch bounds the requests of one batch (DefaultMaxBatch).
	MaxBatch int
	// Concurrency bounds handlers running at once (DefaultConcurrency).
	Concurrency int

	Logger *slog.Logger
	// VerifyReceipt serves tenzro_training_verifyReceipt when set.
	VerifyReceipt VerifyFunc
	// Plugins serves tenzro_plugin_* when set.
	Plugins PluginRegistry
	// Attest serves tenzro_attest_* when set.
	Attest AttestService
	// Challenges serves the challenge methods when set.
	Challenges ChallengeService
	// Observer receives per-method outcomes (see NewMetrics).
	Observer Observer
	// Pages, when set, serves the GET and HEAD requests of the RPC port
	// (the run dashboard, /metrics); JSON-RPC stays on POST.
	Pages http.Handler
	// Routes are more HTTP handlers served beside JSON-RPC on the same
	// port, by http.ServeMux pattern (the dataset API and IPFS gateway).
	Routes map[string]http.Handler

	// Blobs, when set, serves PUT, GET and HEAD /blobs/<hash> (blobs.go);
	// without it those answer 404 and clients send payloads inline.
	Blobs BlobStore
	// MaxBlobBytes caps one uploaded blob (default MaxRequestBytes).
	MaxBlobBytes int64
	// OnBlobIn, when set, is told the size of every blob PUT /blobs stored
	// (the node's tenzro_payload_bytes_total{in}).
	OnBlobIn func(n int64)
	// FetchBlob, when set, is asked on a GET or HEAD /blobs/<hash> miss to
	// bring the blob from the network into Blobs (hash-checked), so any node
	// serves an audit of any run (replay, receipt verify --full). The
	// server bounds how many such fetches run at once and how long each may
	// take (blobFetchSlots, blobFetchTimeout).
	FetchBlob func(ctx context.Context, h wire.Hash) error
	// MaxBlobUploads bounds uploads received at once (DefaultMaxBlobUploads).
	MaxBlobUploads int
	// MaxBlobUploadsPerPeer bounds the uploads of one remote IP at once;
	// its further uploads wait (DefaultMaxBlobUploadsPerPeer).
	MaxBlobUploadsPerPeer int

	// BlobAuth, when set, admits PUT /blobs only with a signed, funded
	// upload intent (blobs.go); without it uploads are open (tests, tools).
	BlobAuth BlobAuthorizer
	// BlobPeerBytesPerHour bounds the upload bytes one remote IP is admitted
	// per hour under BlobAuth (DefaultBlobPeerBytesPerHour).
	BlobPeerBytesPerHour int64

	// HeavyMemoryBytes is the memory heavy reads (replayFragment,
	// getPayload, getWeights) may hold at once (DefaultHeavyMemoryBytes);
	// ReplayBytes what one replay is assumed to hold (DefaultReplayBytes).
	HeavyMemoryBytes int64
	ReplayBytes      int64

	// AllowedOrigins are browser origins (scheme://host[:port], or "*")
	// allowed to make state-changing requests besides the port's own
	// origin (browser.go).
	AllowedOrigins []string
}

func (o Options) withDefaults() Options {
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.LargeRequestBytes <= 0 {
		o.LargeRequestBytes = DefaultLargeRequestBytes
	}
	if o.MaxLargeInFlight <= 0 {
		o.MaxLargeInFlight = DefaultMaxLargeInFlight
	}
	if o.LargeWait <= 0 {
		o.LargeWait = DefaultLargeWait
	}
	if o.MaxLargePerPeer <= 0 {
		o.MaxLargePerPeer = max(1, o.MaxLargeInFlight-1)
	}
	if o.LargeMinRate <= 0 {
		o.LargeMinRate = DefaultLargeMinRate
	}
	if o.LargeGrace <= 0 {
		o.LargeGrace = DefaultLargeGrace
	}
	if o.MaxChunkedBytes <= 0 {
		o.MaxChunkedBytes = DefaultMaxChunkedBytes
	}
	o.MaxChunkedBytes = min(o.MaxChunkedBytes, o.MaxRequestBytes)
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.MaxBlobBytes <= 0 {
		o.MaxBlobBytes = o.MaxRequestBytes
	}
	if o.MaxBlobUploads <= 0 {
		o.MaxBlobUploads = DefaultMaxBlobUploads
	}
	if o.MaxBlobUploadsPerPeer <= 0 {
		o.MaxBlobUploadsPerPeer = DefaultMaxBlobUploadsPerPeer
	}
	if o.BlobPeerBytesPerHour <= 0 {
		o.BlobPeerBytesPerHour = DefaultBlobPeerBytesPerHour
	}
	if o.HeavyMemoryBytes <= 0 {
		o.HeavyMemoryBytes = DefaultHeavyMemoryBytes
	}
	if o.ReplayBytes <= 0 {
		o.ReplayBytes = DefaultReplayBytes
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Server is an http.Handler serving the JSON-RPC API.
type Server struct {
	svc    syncer.Service
	opts   Options
	log    *slog.Logger
	mux    assigner
	bridge jhttp.Bridge
	large  *semaphore.Weighted
	stash  paramStash

	peerSlots     peerSlots
	largeInFlight atomic.Int64
	blobSlots     blobSlots
	blobsInFlight atomic.Int64
	heavy         *heavy
	blobFetch     chan struct{} // network fetches on a blob miss (fetchMissingBlob)
}

type parsedKey struct{}

// New builds a Server for svc. Close it to stop its dispatcher.
func New(svc syncer.Service, opts Options) (*Server, error) {
	if svc == nil {
		return nil, errors.New("rpc: nil Service")
	}
	opts = opts.withDefaults()
	s := &Server{svc: svc, opts: opts, log: opts.Logger, large: semaphore.NewWeighted(int64(opts.MaxLargeInFlight)), blobFetch: make(chan struct{}, blobFetchSlots),
		blobSlots: blobSlots{all: semaphore.NewWeighted(int64(opts.MaxBlobUploads))},
		heavy:     newHeavy(opts.HeavyMemoryBytes, opts.ReplayBytes, DefaultReplayCacheEntries)}
	s.mux = assigner{s.methods()}
	s.bridge = jhttp.NewBridge(s.mux, &jhttp.BridgeOptions{
		Server: &jrpc2.ServerOptions{
			// rpc.* names go to our map: we serve rpc.discover ourselves.
			DisableBuiltin: true,
			Concurrency:    opts.Concurrency,
		},
		ParseRequest: func(r *http.Request) ([]*jrpc2.ParsedRequest, error) {
			reqs, ok := r.Context().Value(parsedKey{}).([]*jrpc2.ParsedRequest)
			if !ok {
				return nil, errors.New("rpc: request was not pre-parsed")
			}
			return reqs, nil
		},
	})
	return s, nil
}

// Methods lists the served method names in lexical order.
func (s *Server) Methods() []string {
	names := s.mux.m.Names()
	sort.Strings(names)
	return names
}

// Close stops the dispatcher.
func (s *Server) Close() error { return s.bridge.Close() }

// ServeHTTP implements http.Handler: POST application/json bodies holding
// one request or a batch.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if refuseCrossOrigin(w, r, s.opts.AllowedOrigins) {
		return
	}
	if strings.HasPrefix(r.URL.Path, BlobPath) {
		s.serveBlob(w, r)
		return
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && s.opts.Pages != nil {
		s.opts.Pages.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeRaw(w, http.StatusMethodNotAllowed, rawError(nil, newError(CodeInvalidRequest, nil, "HTTP method %s not allowed: send JSON-RPC requests with POST", r.Method)))
		return
	}
	// Content-Type is required: without it (or with a form type) a browser
	// page on any origin could POST here without a CORS preflight.
	if ct := r.Header.Get("Content-Type"); ct == "" {
		writeRaw(w, http.StatusUnsupportedMediaType, rawError(nil, newError(CodeInvalidRequest, nil, "Content-Type missing: send JSON-RPC requests with Content-Type: application/json")))
		return
	} else {
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" || (params["charset"] != "" && params["charset"] != "utf-8" && params["charset"] != "utf8") {
			writeRaw(w, http.StatusUnsupportedMediaType, rawError(nil, newError(CodeInvalidRequest, nil, "Content-Type %q not supported: use application/json", ct)))
			return
		}
	}
	max := s.opts.MaxRequestBytes
	if r.ContentLength > max {
		s.tooLarge(w, r.ContentLength)
		return
	}
	var body []byte
	var err error
	if r.ContentLength < 0 || r.ContentLength > s.opts.LargeRequestBytes {
		release, ok := s.acquireLarge(w, r)
		if !ok {
			return
		}
		defer release()
		// The rate clock starts with the slot: time spent queueing is not
		// the client's.
		rr := &rateReader{r: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: s.opts.LargeGrace, minRate: s.opts.LargeMinRate}
		if r.ContentLength < 0 {
			body, err = readLimited(rr, s.opts.MaxChunkedBytes)
			max = s.opts.MaxChunkedBytes
		} else {
			body, err = readBody(w, r, rr, max)
		}
		rr.disarm()
	} else {
		body, err = readBody(w, r, r.Body, max)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			w.Header().Set("Connection", "close")
			s.tooLargeLimit(w, -1, max)
			return
		}
		if errors.Is(err, errTooSlow) {
			w.Header().Set("Connection", "close")
			writeRaw(w, http.StatusRequestTimeout, rawError(nil, newError(CodeInvalidRequest, &errData{Limit: s.opts.LargeMinRate}, "%v", err)))
			return
		}
		writeRaw(w, http.StatusBadRequest, rawError(nil, newError(CodeInvalidRequest, nil, "reading request body: %v", err)))
		return
	}
	// Two members with one name in the envelope ("method" twice): encoding/json
	// keeps the last, another reader the first. Params are checked (with
	// their own path in the message) when they are decoded.
	// Other scan errors are left to the parser below, which says precisely
	// what is malformed.
	if err := wire.CheckStrictJSON(body, wire.StrictJSONOptions{TopLevelOnly: true}); errors.Is(err, wire.ErrDuplicateMember) {
		writeRaw(w, http.StatusOK, rawError(nil, newError(CodeInvalidRequest, nil, "invalid request: %v", err)))
		return
	}
	var reqs []*jrpc2.ParsedRequest
	if int64(len(body)) > s.opts.LargeRequestBytes {
		if req, refID, ok := parseLarge(body, &s.stash); ok {
			reqs = []*jrpc2.ParsedRequest{req}
			if refID != "" {
				defer s.stash.drop(refID)
			}
		}
	}
	if reqs == nil {
		status, parsed, perr := s.parse(body)
		if perr != nil {
			writeRaw(w, status, perr)
			return
		}
		reqs = parsed
	}
	refuseHeavyInBatch(reqs)
	body = nil // the parsed requests (or the stash) hold what is needed
	s.bridge.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), parsedKey{}, reqs)))
}

// parse checks the body and splits it into requests. It returns a complete
// error response when the body as a whole is refused.
func (s *Server) parse(body []byte) (int, []*jrpc2.ParsedRequest, []byte) {
	reqs, err := jrpc2.ParseRequests(body)
	if err != nil {
		// Find the precise syntax error; Unmarshal checks validity before
		// it allocates, so this is cheap on invalid input.
		var raw json.RawMessage
		msg := "body is not a JSON object or array"
		if jerr := json.Unmarshal(body, &raw); jerr != nil {
			msg = jerr.Error()
			var se *json.SyntaxError
			if errors.As(jerr, &se) {
				msg = fmt.Sprintf("%s (at byte offset %d)", se.Error(), se.Offset)
			}
		}
		return http.StatusOK, nil, rawError(nil, newError(CodeParseError, nil, "parse error: %s", msg))
	}
	if len(reqs) == 0 {
		return http.StatusOK, nil, rawError(nil, newError(CodeInvalidRequest, nil, "invalid request: empty batch"))
	}
	if len(reqs) > s.opts.MaxBatch {
		return http.StatusOK, nil, rawError(nil, newError(CodeInvalidRequest, &errData{Limit: int64(s.opts.MaxBatch)},
			"invalid request: batch of %d requests exceeds the limit of %d", len(reqs), s.opts.MaxBatch))
	}
	for _, q := range reqs {
		if q.Error != nil && q.Error.Code == jrpc2.ParseError {
			// A batch element that is valid JSON but not a request object
			// is an invalid request, not a parse error (JSON-RPC 2.0 §6).
			q.Error = &jrpc2.Error{Code: jrpc2.InvalidRequest, Message: "invalid request: " + q.Error.Message}
		}
	}
	return http.StatusOK, reqs, nil
}

func (s *Server) tooLarge(w http.ResponseWriter, n int64) {
	s.tooLargeLimit(w, n, s.opts.MaxRequestBytes)
}

func (s *Server) tooLargeLimit(w http.ResponseWriter, n, limit int64) {
	size := "body"
	if n >= 0 {
		size = fmt.Sprintf("body of %d bytes", n)
	}
	how := "node flag --max-request-bytes"
	if limit != s.opts.MaxRequestBytes {
		how = "bodies without Content-Length; send Content-Length for larger ones"
	}
	writeRaw(w, http.StatusRequestEntityTooLarge, rawError(nil, newError(CodeInvalidRequest, &errData{Limit: limit},
		"request %s exceeds the limit of %d bytes (%s)", size, limit, how)))
}

func readBody(w http.ResponseWriter, r *http.Request, body io.Reader, max int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, io.NopCloser(body), max)
	defer rd.Close()
	if r.ContentLength >= 0 {
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		// Anything beyond the declared length is refused by net/http.
		return buf, nil
	}
	return io.ReadAll(rd)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Serve serves HTTP on ln until ctx ends, then shuts down gracefully
// (waiting up to 10 s for in-flight requests).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/", s)
	for pattern, h := range s.opts.Routes {
		mux.Handle(pattern, SameOrigin(h, s.opts.AllowedOrigins))
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Minute,
		WriteTimeout:      10 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("rpc: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("rpc: shutdown: %w", err)
	}
	return nil
}

// assigner resolves method names; unknown names get a precise -32601.
type assigner struct{ m handler.Map }

func (a assigner) Assign(_ context.Context, method string) jrpc2.Handler {
	if h, ok := a.m[method]; ok {
		return h
	}
	return func(context.Context, *jrpc2.Request) (any, error) {
		return nil, newError(CodeMethodNotFound, &errData{Method: trunc(method)}, "method %q not found (rpc.discover lists the served methods)", trunc(method))
	}
}

// Names implements jrpc2.Namer.
func (a assigner) Names() []string { return a.m.Names() }

func trunc(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
