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
