package chain

import (
	"errors"
	"fmt"

	"github.com/tenzro/train/machine"
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
	// CodeSenderBusy is a CheckTx refusal only (node policy, never a
	// block's result): the signer already has its share of this node's
	// mempool waiting (AppOptions.MempoolSenderLimit).
	CodeSenderBusy uint32 = 11
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
	case errors.Is(err, machine.ErrStaleNonce):
		return CodeNonce
	}
	var se *machine.Error
	if !errors.As(err, &se) {
		return CodeInternal
	}
	switch se.Kind {
	case machine.KindInvalid:
		return CodeInvalid
	case machine.KindNotFound:
		return CodeNotFound
	case machine.KindUnauthorized:
		return CodeUnauthorized
	case machine.KindConflict:
		return CodeConflict
	case machine.KindFunds:
		return CodeFunds
	case machine.KindDisabled:
		return CodeDisabled
	case machine.KindAttestation:
		return CodeAttestation
	}
	return CodeInternal
}

// KindOf maps a result code back to the machine's refusal kind.
func KindOf(code uint32) machine.Kind {
	switch code {
	case CodeDecode, CodeInvalid:
		return machine.KindInvalid
	case CodeUnauthorized, CodeNonce:
		return machine.KindUnauthorized
	case CodeFunds:
		return machine.KindFunds
	case CodeNotFound:
		return machine.KindNotFound
	case CodeConflict, CodeSenderBusy:
		return machine.KindConflict
	case CodeDisabled:
		return machine.KindDisabled
	case CodeAttestation:
		return machine.KindAttestation
	}
	return machine.KindInternal
}

// Refusal turns a refused transaction's code and log into the machine's
// error, so a caller of the node sees the kind and the precise message.
func Refusal(code uint32, log string) error {
	switch code {
	case CodeNonce:
		return machine.StaleNonce(log)
	case CodeSenderBusy:
		return machine.SenderBusy(log)
	}
	return &machine.Error{Kind: KindOf(code), Msg: log}
}
