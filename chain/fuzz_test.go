package chain

import (
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// FuzzDecodeTx: the decoder never panics, refuses what it cannot decode
// with ErrDecode, and what it accepts re-encodes to a transaction that
// decodes to the same type.
func FuzzDecodeTx(f *testing.F) {
	k := testKey(f, did.KindHuman, 1)
	f.Add(must(TransferTx(k, k.DID.String(), "1", 1)))
	f.Add(must(PostTaskTx(k, testSpec("t", k.DID.String(), 1, 1, 1), wire.Hash{}, 2)))
	f.Add(must(SubmissionTx(k, "t", 0, 0, wire.Hash{1}, 5)))
	f.Add(must(SealTx([]byte(`{}`))))
	f.Add(must(CommitRoundTx(k, roundCommit("t", 0, [][]wire.CommitInput{{{TrainerDID: k.DID.String(), Selected: true}}}, "m"), 3)))
	f.Add([]byte(`{"type":"tenzro_ledger_transfer","params":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tx, err := DecodeTx(b)
		if err != nil {
			if codeOf(err) != CodeDecode {
				t.Fatalf("decode error without ErrDecode: %v", err)
			}
			return
		}
		var params any
		switch tx.Type {
		case TxTransfer:
			params = tx.Transfer
		case TxRegisterSyncer:
			params = tx.RegisterSyncer
		case TxPostTask:
			params = tx.PostTask
		case TxEnroll:
			params = tx.Enroll
		case TxElectionProof:
			params = tx.ElectionProof
		case TxSubmission:
			params = tx.Submission
		case TxSeal:
			params = tx.Seal
		case TxCommitRound:
			params = tx.CommitRound
		case TxLeave:
			params = tx.Leave
		default:
			t.Fatalf("decoded unknown type %q", tx.Type)
		}
		re, err := EncodeTx(tx.Type, params)
		if err != nil {
			return // e.g. a seal whose receipt is not valid JSON for re-encoding
		}
		tx2, err := DecodeTx(re)
		if err != nil || tx2.Type != tx.Type {
			t.Fatalf("re-encoded %s does not decode: %v", tx.Type, err)
		}
	})
}
