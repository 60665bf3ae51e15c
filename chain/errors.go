package chain

import (
	"errors"
	"fmt"
)

// Result codes of CheckTx and FinalizeBlock's transaction results. 0 is
// success; every refusal has one of these and a log saying exactly why.
const (
	CodeOK           uint32 = 0
	CodeDecode       uint32 = 1 // not a well-formed transaction
	CodeUnauthorized uint32 = 2 // bad signature or signer
	CodeNonce        uint32 = 3 // nonce not above the signer's last one
	CodeFunds        uint32 = 4 // balance too low
	CodeNotFound     uint32 = 5 // unknown run, candidate or trainer
	CodeConflict     uint32 = 6 // state does not allow it now
	CodeInvalid      uint32 = 7 // a field's value is refused
	CodeInternal     uint32 = 8 // the application failed (store error)
)

// TxError is a refused transaction: a code and the reason.
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
	case errors.Is(err, ErrDecode):
		return CodeDecode
	}
	return CodeInternal
}
