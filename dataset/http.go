package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/ipfs/boxo/gateway"
	"github.com/ipfs/go-cid"

	"github.com/tenzro/train/wire"
)

// HTTP API on the node's HTTP port (docs/protocol/datasets.md):
//
//	POST /api/dataset/import?root=<cid>&name=N&layout=L[&encrypted=1][&dataset_hash=H]   body: CARv1 with one root   (signed)
//	POST /api/dataset/fetch?ref=ipfs://<cid>[&max_bytes=N]                                                        (signed or not)
//	GET  /api/dataset/list
//	POST /api/dataset/remove?cid=<cid>                                                                            (signed)
//
// "signed": the request carries a Tenzro-Dataset-Request header
// (wire.DatasetRequest, auth.go) for its operation and CID.
//	GET  /ipfs/<cid>[/path][?format=car|raw|tar]   the path gateway (boxo), local blocks only
//
// Answers are JSON: a Record, a list of Records, or {"error": "..."} with a
// 4xx/5xx status.

// Routes returns the handlers to mount on the node's HTTP mux, by pattern.
func (s *Service) Routes() (map[string]http.Handler, error) {
	be, err := gateway.NewBlocksBackend(s.local)
	if err != nil {
		return nil, fmt.Errorf("dataset: gateway backend: %w", err)
	}
	gw := gateway.NewHandler(gateway.Config{DeserializedResponses: true}, be)
	return map[string]http.Handler{
		"/ipfs/":                   sandboxed(gw),
		"POST /api/dataset/import": http.HandlerFunc(s.serveImport),
		"POST /api/dataset/fetch":  http.HandlerFunc(s.serveFetch),
		"GET /api/dataset/list":    http.HandlerFunc(s.serveList),
		"POST /api/dataset/remove": http.HandlerFunc(s.serveRemove),
	}, nil
}

// sandboxed marks every gateway answer so that a browser never runs what a
// stranger imported with this node's origin: CSP sandbox gives the page an
// opaque origin (no cookies, no same-origin requests to JSON-RPC or the
// dataset API, no scripts), nosniff stops type guessing, and the page may
// not be framed.
func sandboxed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	writeJSON(w, httpStatus(err), map[string]string{"error": err.Error()})
}

func (s *Service) serveImport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if len(q.Get("name")) > 255 || len(q.Get("layout")) > 255 || len(q.Get("dataset_hash")) > 80 {
		writeErr(w, fmt.Errorf("import: name, layout or dataset_hash too long: %w", ErrBadDAG))
		return
	}
	root, err := ParseCID(q.Get("root"))
	if err != nil {
		writeErr(w, fmt.Errorf("import: root=<cid> (the CAR's root, which the request signs): %w", err))
		return
	}
	owner, err := s.authorize(r, wire.DatasetOpImport, root, true)
	if err != nil {
		writeErr(w, fmt.Errorf("import refused: %w", err))
		return
	}
	meta := ImportMeta{Name: q.Get("name"), Layout: q.Get("layout"), Encrypted: q.Get("encrypted") == "1", DatasetHash: q.Get("dataset_hash"),
		Owner: owner, Root: root}
	body := &rateBody{r: http.MaxBytesReader(w, r.Body, s.o.MaxBytes*2+(1<<20)), rc: http.NewResponseController(w),
		start: time.Now(), grace: s.o.ImportGrace, rate: s.o.MinImportRate}
	defer func() { _ = body.rc.SetReadDeadline(time.Time{}) }()
	rec, err := s.Import(r.Context(), body, meta)
	if err != nil {
		if body.slow() {
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusRequestTimeout, map[string]string{"error": fmt.Sprintf(
				"import body slower than %d bytes/s on average after %s (%d bytes in %s); nothing was kept",
				s.o.MinImportRate, s.o.ImportGrace, body.n, time.Since(body.start).Round(time.Millisecond))})
			return
		}
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

func (s *Service) serveFetch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c, _, err := ParseRef(q.Get("ref"))
	if err != nil {
		writeErr(w, err)
		return
	}
	var max int64
	if v := q.Get("max_bytes"); v != "" {
		if max, err = strconv.ParseInt(v, 10, 64); err != nil || max <= 0 {
			writeErr(w, fmt.Errorf("max_bytes %q: want a positive integer: %w", v, ErrBadCID))
			return
		}
	}
	if s.o.SignedFetch && len(r.Header.Values(wire.DatasetRequestHeader)) == 0 {
		writeErr(w, fmt.Errorf("fetch refused: this node (not --dev) takes only signed fetches, with one %s header signed by a funded DID (tenzro dataset get --key; the trainer signs with its key): a fetch pins the dataset for, and charges it to, the DID that asks: %w",
			wire.DatasetRequestHeader, ErrUnsigned))
		return
	}
	owner, err := s.authorize(r, wire.DatasetOpFetch, c, false)
	if err != nil {
		writeErr(w, fmt.Errorf("fetch refused: %w", err))
		return
	}
	rec, err := s.FetchFor(r.Context(), c, max, owner)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

func (s *Service) serveList(w http.ResponseWriter, r *http.Request) {
	l, err := s.List(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Service) serveRemove(w http.ResponseWriter, r *http.Request) {
	c, _, err := ParseRef(r.URL.Query().Get("cid"))
	if err != nil {
		writeErr(w, err)
		return
	}
	owner, err := s.authorize(r, wire.DatasetOpRemove, c, true)
	if err != nil {
		writeErr(w, fmt.Errorf("remove refused: %w", err))
		return
	}
	still, err := s.RemoveFor(r.Context(), c, owner)
	if err != nil {
		writeErr(w, err)
		return
	}
	if len(still) > 0 {
		writeJSON(w, http.StatusOK, map[string]any{"unpinned": c.String(), "did": owner, "still_pinned_by": still})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": c.String()})
}

// rateBody enforces a minimum average rate on an import body: before each
// read the connection's read deadline is set to when the bytes received so
// far plus one more chunk are due (start + grace + (n+chunk)/rate), so a
// client that trickles, or stops, is cut at that deadline.
type rateBody struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	n     int64
	cut   bool
}

const rateChunk = 64 << 10

func (b *rateBody) Read(p []byte) (int, error) {
	due := b.start.Add(b.grace + time.Duration(float64(b.n+rateChunk)/float64(b.rate)*float64(time.Second)))
	_ = b.rc.SetReadDeadline(due)
	k, err := b.r.Read(p)
	b.n += int64(k)
	if err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(due)) {
		b.cut = true
	}
	return k, err
}

// slow reports whether the body was cut for its rate.
func (b *rateBody) slow() bool { return b.cut }

// ParseCID parses a CID string strictly (see ParseRef).
func ParseCID(s string) (cid.Cid, error) {
	c, p, err := ParseRef(s)
	if err == nil && p != "" {
		err = fmt.Errorf("%q: a CID without a path: %w", trunc(s), ErrBadCID)
	}
	return c, err
}
