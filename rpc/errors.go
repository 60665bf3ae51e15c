package rpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/creachadair/jrpc2"

	"github.com/tenzro/train/machine"
)

// JSON-RPC error codes served by this package. The standard codes are the
// JSON-RPC 2.0 ones; the application codes map syncer.Kind one to one (see
// ERRORS.md, which a test keeps in step with this table).
const (
	CodeParseError     = -32700 // body is not valid JSON
	CodeInvalidRequest = -32600 // not a request object, empty batch, batch or body too large
	CodeMethodNotFound = -32601 // unknown method (or an optional service not wired)
	CodeInvalidParams  = -32602 // params do not decode strictly, or syncer.KindInvalid
	CodeInternal       = -32603 // syncer.KindInternal and any unclassified fault (logged, not leaked)

	CodeNotFound     = -32001 // syncer.KindNotFound
	CodeUnauthorized = -32002 // syncer.KindUnauthorized
	CodeConflict     = -32003 // syncer.KindConflict
	CodeFunds        = -32004 // syncer.KindFunds
	CodeDisabled     = -32005 // syncer.KindDisabled
	CodeAttestation  = -32006 // syncer.KindAttestation
	CodeBusy         = -32010 // no slot for a large request within Options.LargeWait
	CodeCancelled    = int(jrpc2.Cancelled)
	CodeDeadline     = int(jrpc2.DeadlineExceeded)
)

// kindCodes maps every syncer.Kind to its code and the stable name carried
// in the error's data ({"kind": name}).
var kindCodes = map[machine.Kind]struct {
	Code int
	Name string
}{
	machine.KindInternal:     {CodeInternal, "internal"},
	machine.KindInvalid:      {CodeInvalidParams, "invalid"},
	machine.KindNotFound:     {CodeNotFound, "not_found"},
	machine.KindUnauthorized: {CodeUnauthorized, "unauthorized"},
	machine.KindConflict:     {CodeConflict, "conflict"},
	machine.KindFunds:        {CodeFunds, "funds"},
	machine.KindDisabled:     {CodeDisabled, "disabled"},
	machine.KindAttestation:  {CodeAttestation, "attestation"},
}

// CodeForKind returns the JSON-RPC code for a refusal kind.
func CodeForKind(k machine.Kind) int {
	if c, ok := kindCodes[k]; ok {
		return c.Code
	}
	return CodeInternal
}

type errData struct {
	Kind   string `json:"kind,omitempty"`
	Method string `json:"method,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Limit  int64  `json:"limit,omitempty"`
}

func newError(code int, data *errData, format string, a ...any) *jrpc2.Error {
	e := &jrpc2.Error{Code: jrpc2.Code(code), Message: fmt.Sprintf(format, a...)}
	if data != nil {
		e = e.WithData(data)
	}
	return e
}

// invalidParams builds the -32602 error for a parameter problem of method.
func invalidParams(method string, format string, a ...any) *jrpc2.Error {
	return newError(CodeInvalidParams, &errData{Kind: "invalid", Method: method}, "invalid params for %s: %s", method, fmt.Sprintf(format, a...))
}

// mapError turns an error from a service into a JSON-RPC error. Refusals
// (*syncer.Error other than KindInternal) keep their message; anything else
// is logged with a reference and answered with a bare "internal error".
func mapError(ctx context.Context, log *slog.Logger, method string, err error) *jrpc2.Error {
	var je *jrpc2.Error
	var se *machine.Error
	switch {
	case errors.As(err, &se) && se.Kind != machine.KindInternal:
		kc, ok := kindCodes[se.Kind]
		if !ok {
			break
		}
		return newError(kc.Code, &errData{Kind: kc.Name}, "%s", se.Msg)
	case errors.As(err, &je):
		return je
	case errors.Is(err, context.Canceled):
		return newError(CodeCancelled, nil, "%s: request cancelled", method)
	case errors.Is(err, context.DeadlineExceeded):
		return newError(CodeDeadline, nil, "%s: request deadline exceeded", method)
	}
	ref := newRef()
	log.ErrorContext(ctx, "rpc: internal error", "method", method, "ref", ref, "err", err)
	return newError(CodeInternal, &errData{Kind: "internal", Ref: ref}, "internal error (node log ref %s)", ref)
}

func newRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rawError renders a JSON-RPC error response object with a null or given id.
func rawError(id json.RawMessage, e *jrpc2.Error) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		V  string          `json:"jsonrpc"`
		ID json.RawMessage `json:"id"`
		E  *jrpc2.Error    `json:"error"`
	}{"2.0", id, e})
	return b
}
