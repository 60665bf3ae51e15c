package machine

import (
	"errors"
	"fmt"
)

// Kind classifies a refusal so the RPC layer can map it to an error code.
type Kind int

// Kinds of refusal.
const (
	KindInternal     Kind = iota // a fault of the node, not of the request
	KindInvalid                  // malformed or out-of-range parameters
	KindNotFound                 // unknown task, DID, fragment, blob
	KindUnauthorized             // bad signature, wrong signer, stale nonce
	KindConflict                 // duplicate, wrong round, closed window, full run
	KindFunds                    // balance too low
	KindDisabled                 // feature off on this node (faucet without --dev)
	KindAttestation              // evidence refused by policy
)

// Error is a refusal with a precise message. Refusals change no state.
type Error struct {
	Kind Kind
	Msg  string
}

// Error returns the refusal's message.
func (e *Error) Error() string { return e.Msg }

// Errf builds an *Error.
func Errf(k Kind, format string, a ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, a...)}
}

// KindOf returns the kind of err (KindInternal when it is not an *Error).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// StaleNonce is the refusal of a nonce that is not above the signer's last
// (it matches ErrStaleNonce and is a KindUnauthorized *Error).
func StaleNonce(msg string) error { return nonceError{e: &Error{Kind: KindUnauthorized, Msg: msg}} }

// ErrSenderBusy marks a node's refusal of a transaction whose signer
// already has its share of the node's mempool waiting (node policy, not a
// state rule: the same transaction is admitted after the next block).
var ErrSenderBusy = errors.New("sender's mempool share used")

// SenderBusy is that refusal (a KindConflict *Error matching ErrSenderBusy).
func SenderBusy(msg string) error { return busyError{e: &Error{Kind: KindConflict, Msg: msg}} }

type busyError struct{ e *Error }

func (e busyError) Error() string   { return e.e.Msg }
func (e busyError) Unwrap() []error { return []error{e.e, ErrSenderBusy} }
