package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"

	"github.com/tenzro/train/wire"
)

// The ante handler (anchor: the Cosmos SDK's): what every transaction
// goes through before its own rules, in CheckTx (against the check state,
// so an account cannot queue more than it can pay) and again at the head
// of its delivery in a block. It checks the chain id the signer signed
// for, the signature, the nonce (above the signer's last) and the fee, and
// then — in a block — uses up the nonce and charges the fee in their own
// all-or-nothing step, before and apart from the transaction's own
// transition. A transaction that passes the ante and then fails its own
// rules therefore still pays and still uses up its nonce (issue 22,
// findings 2 and 3); one that fails the ante changes nothing and, refused
// at CheckTx, never reaches a block.

// Fee defaults (attoTNZO; 1 TNZO = 1e18). See docs/RATIONALE.md "fees:
// every transaction pays per byte and per kind".
var (
	// DefaultTxFeeBase is charged once per transaction.
	DefaultTxFeeBase = big.NewInt(1_000_000_000_000_000) // 0.001 TNZO
	// DefaultTxFeeByte is charged per byte of the encoded transaction:
	// 1 TNZO per MB of block space.
	DefaultTxFeeByte = big.NewInt(1_000_000_000_000) // 1e-6 TNZO
)

// keyChainID is the chain id the machine was created with (KSMeta).
var keyChainID = []byte("chain-id")

// anteInfo is what the ante found: the signer that pays and its nonce.
type anteInfo struct {
	signer string // the DID whose signature was verified ("" for none)
	nonce  uint64
	nonced bool     // the transaction carries a nonce
	fee    *big.Int // charged to signer (nil: exempt)
	// receipt is a sign_receipt's built receipt (nil for other kinds).
	receipt *builtReceipt
}

// ChainID returns the chain id the chain's genesis recorded ("" for a
// machine created without one, as in unit tests).
func ChainID(ctx context.Context, kv KV) (string, error) {
	raw, err := kv.Get(ctx, KSMeta, keyChainID)
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("chain id: %w", err)
	}
	return string(raw), nil
}

func (x *mtx) chainID() (string, error) {
	if x.cid != nil {
		return *x.cid, nil
	}
	id, err := ChainID(x.ctx, x.kv)
	if err != nil {
		return "", err
	}
	x.cid = &id
	return id, nil
}

// TxFee is the fee of a transaction of type typ and size bytes under p:
// tx_fee_base + tx_fee_kind[typ] + size × tx_fee_byte.
func (p *Params) TxFee(typ string, size int) (*big.Int, error) {
	base, err := wire.ParseAmount(or0(p.TxFeeBase))
	if err != nil {
		return nil, fmt.Errorf("params.tx_fee_base: %w", err)
	}
	per, err := wire.ParseAmount(or0(p.TxFeeByte))
	if err != nil {
		return nil, fmt.Errorf("params.tx_fee_byte: %w", err)
	}
	fee := new(big.Int).Add(base, new(big.Int).Mul(per, big.NewInt(int64(size))))
	if k, ok := p.TxFeeKind[typ]; ok {
		v, err := wire.ParseAmount(k)
		if err != nil {
			return nil, fmt.Errorf("params.tx_fee_kind[%s]: %w", typ, err)
		}
		fee.Add(fee, v)
	}
	return fee, nil
}

func or0(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// ante runs the ante checks of tx and writes their effects (the nonce,
// the submission's replay mark, the fee) into x. Its refusals are *Error.
func (x *mtx) ante(tx *wire.Tx) (*anteInfo, error) {
	own, err := x.chainID()
	if err != nil {
		return nil, err
	}
	rule, ok := txSigners[tx.Type]
	if !ok {
		return nil, Errf(KindInvalid, "unknown transaction type %q", tx.Type)
	}
	a := &anteInfo{}
	if rule.exempt != nil {
		return a, rule.exempt(x, tx)
	}
	auth, err := rule.did(x, tx, own)
	if err != nil {
		return nil, err
	}
	a.signer, a.nonce, a.nonced, a.receipt = auth.signer, auth.nonce, auth.nonced, auth.receipt
	var subMark []byte
	if tx.Type == wire.TxSubmission {
		s := tx.Submission
		h := sha256.Sum256(auth.pre)
		subMark = subMarkKey(h)
		if _, err := x.kv.Get(x.ctx, KSLedger, subMark); err == nil {
			return nil, Errf(KindConflict, "duplicate submission: this signed submission of %s (round %d fragment %d, payload %s) is already in a block",
				s.TrainerDID, s.Round, s.FragmentIndex, s.PayloadHash)
		} else if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	if auth.chainID != own {
		return nil, Errf(KindUnauthorized, "wrong chain: %s is signed for chain %q, this chain is %q (ask tenzro_node_info for chain_id)", tx.Type, auth.chainID, own)
	}
	if err := verifySig(a.signer, auth.pre, auth.sig); err != nil {
		return nil, err
	}
	if a.nonced {
		if err := x.useNonce(a.signer, a.nonce); err != nil {
			return nil, err
		}
	}
	if subMark != nil {
		x.set(KSLedger, subMark, u64Bytes(uint64(x.blk.Height)))
	}
	p, err := x.params()
	if err != nil {
		return nil, err
	}
	if a.fee, err = p.TxFee(tx.Type, tx.Size); err != nil {
		return nil, err
	}
	if err := x.lt.transfer(AcctDID(a.signer), acctIssuer, a.fee, "transaction fee (burned): "+tx.Type); err != nil {
		if KindOf(err) == KindFunds {
			return nil, Errf(KindFunds, "cannot pay the transaction fee: %s has %s attoTNZO, %s costs %s (%d bytes)",
				a.signer, x.balanceOr0(a.signer), tx.Type, a.fee, tx.Size)
		}
		return nil, err
	}
	return a, nil
}

func (x *mtx) balanceOr0(d string) *big.Int {
	b, err := x.lt.balance(AcctDID(d))
	if err != nil {
		return new(big.Int)
	}
	return b
}

// subMarkKey marks a submission preimage (by its SHA-256) as used.
func subMarkKey(h [32]byte) []byte { return []byte("sub-used/" + hex.EncodeToString(h[:])) }

// useNonce refuses a nonce not above signer's last and records it.
func (x *mtx) useNonce(signer string, nonce uint64) error {
	last, seen, err := LastNonce(x.ctx, x.kv, signer)
	if err != nil {
		return err
	}
	if seen && nonce <= last {
		return nonceError{e: &Error{Kind: KindUnauthorized, Msg: fmt.Sprintf(
			"nonce %d is not above the last one used by %s (%d): replayed or reordered request", nonce, signer, last)}}
	}
	x.set(KSLedger, nonceKey(signer), u64Bytes(nonce))
	return nil
}

// Ante runs the ante checks of tx at blk against kv and writes their
// effects (nonce, fee) into kv: the chain's CheckTx runs it on its check
// state (committed state plus the transactions admitted to the mempool
// since), so a sender's queued transactions are charged one after the
// other. Its refusals are *Error.
func (m *Machine) Ante(ctx context.Context, kv KV, blk Block, tx *wire.Tx) error {
	_, err := m.AnteAdmit(ctx, kv, blk, tx, nil)
	return err
}

// AnteAdmit is Ante with a local admission rule: once tx passed the ante
// (its signer's signature verified, its fee affordable), admit (when not
// nil) is asked about the signer ("" for an exempt kind) and may refuse it;
// only then are the ante's effects written into kv. It returns the signer.
// The chain's CheckTx bounds each sender's share of its mempool with it;
// admit is node policy, never part of a block's rules.
func (m *Machine) AnteAdmit(ctx context.Context, kv KV, blk Block, tx *wire.Tx, admit func(signer string) error) (string, error) {
	x := m.begin(ctx, kv, blk)
	a, err := x.ante(tx)
	if err != nil {
		return "", err
	}
	if admit != nil {
		if err := admit(a.signer); err != nil {
			return "", err
		}
	}
	return a.signer, x.finish()
}
