package chain

import (
	"errors"
	"fmt"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Result codes of CheckTx and FinalizeBlock's transaction results. 0 is
// success; every refusal has one of these and a log saying exactly why.
// They follow the machine's refusal kinds (syncer.Kind).
const (
	CodeOK           uint32 = 0
	CodeDecode       uint32 = 1  // not a well-formed transaction
	CodeUnauthorized uint32 = 2  // bad signature or signer
	CodeNonce        uint32 = 3  // nonce not above the signer's last one
	CodeFunds        uint32 = 4  // balance too low
	CodeNotFound     uint32 = 5  // unknown run, candidate or trainer
	CodeConflict     uint32 = 6  // state does not allow it now
	CodeInvalid      uint32 = 7  // a field's value is refused
	CodeInternal     uint32 = 8  // the application failed (store error)
	CodeDisabled     uint32 = 9  // not on this chain (the faucet without --dev)
	CodeAttestation  uint32 = 10 // attestation evidence missing or refused
)

// TxError is a refused query or transaction: a code and the reason.
type TxError struct {
	Code uint32
	Msg  string
}

func (e *TxError) Error() string { return e.Msg }

func errf(code uint32, format string, a ...any) error {
	return &TxError{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// codeOf maps an error to its result code.
func codeOf(err error) uint32 {
	var te *TxError
	switch {
	case err == nil:
		return CodeOK
	case errors.As(err, &te):
		return te.Code
	case errors.Is(err, wire.ErrDecode):
		return CodeDecode
	case errors.Is(err, syncer.ErrStaleNonce):
		return CodeNonce
	}
	var se *syncer.Error
	if !errors.As(err, &se) {
		return CodeInternal
	}
	switch se.Kind {
	case syncer.KindInvalid:
		return CodeInvalid
	case syncer.KindNotFound:
		return CodeNotFound
	case syncer.KindUnauthorized:
		return CodeUnauthorized
	case syncer.KindConflict:
		return CodeConflict
	case syncer.KindFunds:
		return CodeFunds
	case syncer.KindDisabled:
		return CodeDisabled
	case syncer.KindAttestation:
		return CodeAttestation
	}
	return CodeInternal
}

// KindOf maps a result code back to the machine's refusal kind.
func KindOf(code uint32) syncer.Kind {
	switch code {
	case CodeDecode, CodeInvalid:
		return syncer.KindInvalid
	case CodeUnauthorized, CodeNonce:
		return syncer.KindUnauthorized
	case CodeFunds:
		return syncer.KindFunds
	case CodeNotFound:
		return syncer.KindNotFound
	case CodeConflict:
		return syncer.KindConflict
	case CodeDisabled:
		return syncer.KindDisabled
	case CodeAttestation:
		return syncer.KindAttestation
	}
	return syncer.KindInternal
}

// Refusal turns a refused transaction's code and log into the machine's
// error, so a caller of the node sees the kind and the precise message.
func Refusal(code uint32, log string) error {
	if code == CodeNonce {
		return syncer.StaleNonce(log)
	}
	return &syncer.Error{Kind: KindOf(code), Msg: log}
}
