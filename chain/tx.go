package chain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tenzro/train/wire"
)

// MaxTxBytes bounds one transaction (CometBFT's mempool default is the same
// 1 MiB). A receipt with a long transcript is the largest transaction.
const MaxTxBytes = 1 << 20

// Transaction types: the RPC method whose signed request the transaction
// carries, plus the two chain-only ones (submission record, seal).
const (
	TxTransfer       = wire.MethodTransfer
	TxRegisterSyncer = wire.MethodRegisterSyncer
	TxPostTask       = wire.MethodPostTask
	TxEnroll         = wire.MethodEnrollTrainer
	TxElectionProof  = wire.MethodElectionProof
	TxSubmission     = wire.MethodSubmitGradient
	TxSeal           = "tenzro_training_sealRun"
	TxLeave          = wire.MethodLeaveRun
)

// Envelope is a transaction on the wire: {"type": <method>, "params": {...}}.
// Params is the method's request exactly as the JSON-RPC method takes it,
// minus payload bytes.
type Envelope struct {
	Type   string          `json:"type"`
	Params json.RawMessage `json:"params"`
}

// PostTask is a posting as a transaction: the spec and the hash of the
// initial weights (the bytes stay off chain). The signature is the
// postTask request's (PROTOCOL §3), so a client signs once for either path.
type PostTask struct {
	Spec            json.RawMessage `json:"spec"`
	InitWeightsHash wire.Hash       `json:"init_weights_hash"`
	wire.Signed
}

// Submission is the record of one outer-gradient submission: everything of
// tenzro_training_submitOuterGradient except the payload bytes, plus the
// payload's size. Signature is the trainer's over the submission preimage
// (PROTOCOL §4), so the record proves the trainer sent that payload hash.
type Submission struct {
	TaskID        string        `json:"task_id"`
	TrainerDID    string        `json:"trainer_did"`
	Round         uint64        `json:"round"`
	FragmentIndex uint64        `json:"fragment_index"`
	PayloadHash   wire.Hash     `json:"payload_hash"`
	PayloadSize   uint64        `json:"payload_size"`
	Signature     wire.HexBytes `json:"signature"`
}

// Seal carries a sealed run's signed receipt (wire.Receipt JSON).
type Seal struct {
	Receipt json.RawMessage `json:"receipt"`
}

// Tx is a decoded transaction: exactly one of the pointers is set.
type Tx struct {
	Type           string
	Transfer       *wire.TransferParams
	RegisterSyncer *wire.RegisterSyncerParams
	PostTask       *PostTask
	Enroll         *wire.EnrollParams
	ElectionProof  *wire.ElectionProofParams
	Submission     *Submission
	Seal           *Seal
	CommitRound    *CommitRound
	Leave          *wire.LeaveParams
}

// ErrDecode marks a transaction that is not well-formed.
var ErrDecode = errors.New("malformed transaction")

// strict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// DecodeTx parses a transaction strictly: size limit, known type, unknown
// fields and trailing data refused. It does not check signatures or state.
func DecodeTx(b []byte) (*Tx, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrDecode)
	}
	if len(b) > MaxTxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrDecode, len(b), MaxTxBytes)
	}
	var env Envelope
	if err := strict(b, &env); err != nil {
		return nil, fmt.Errorf("%w: envelope: %v", ErrDecode, err)
	}
	if len(env.Params) == 0 || bytes.Equal(env.Params, []byte("null")) {
		return nil, fmt.Errorf("%w: %q has no params", ErrDecode, env.Type)
	}
	tx := &Tx{Type: env.Type}
	var target any
	switch env.Type {
	case TxTransfer:
		tx.Transfer = new(wire.TransferParams)
		target = tx.Transfer
	case TxRegisterSyncer:
		tx.RegisterSyncer = new(wire.RegisterSyncerParams)
		target = tx.RegisterSyncer
	case TxPostTask:
		tx.PostTask = new(PostTask)
		target = tx.PostTask
	case TxEnroll:
		tx.Enroll = new(wire.EnrollParams)
		target = tx.Enroll
	case TxElectionProof:
		tx.ElectionProof = new(wire.ElectionProofParams)
		target = tx.ElectionProof
	case TxSubmission:
		tx.Submission = new(Submission)
		target = tx.Submission
	case TxSeal:
		tx.Seal = new(Seal)
		target = tx.Seal
	case TxCommitRound:
		tx.CommitRound = new(CommitRound)
		target = tx.CommitRound
	case TxLeave:
		tx.Leave = new(wire.LeaveParams)
		target = tx.Leave
	default:
		return nil, fmt.Errorf("%w: unknown type %q", ErrDecode, env.Type)
	}
	if err := strict(env.Params, target); err != nil {
		return nil, fmt.Errorf("%w: %s params: %v", ErrDecode, env.Type, err)
	}
	return tx, nil
}

// EncodeTx renders a transaction of the given type from its params.
func EncodeTx(typ string, params any) ([]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode %s params: %w", typ, err)
	}
	b, err := json.Marshal(Envelope{Type: typ, Params: p})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", typ, err)
	}
	if len(b) > MaxTxBytes {
		return nil, fmt.Errorf("encode %s: %d bytes, limit %d", typ, len(b), MaxTxBytes)
	}
	return b, nil
}
