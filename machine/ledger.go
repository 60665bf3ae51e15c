package machine

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
)

// Ledger accounts. Balances are attoTNZO as big integers. The issuer account
// is the only one allowed below zero (the dev faucet mints from it), so the
// sum over every account is always exactly zero: conservation.
const (
	acctIssuer = "issuer"
)

// AcctDID is a DID's spendable ledger account.
func AcctDID(did string) string { return "did:" + did }

// AcctEscrow is a run's escrow ledger account (the sponsor's reward pool).
func AcctEscrow(task string) string         { return "escrow:" + task }
func acctStake(task, did string) string     { return "stake:" + task + ":" + did }
func acctSyncerStake(did string) string     { return "syncer-stake:" + did }
func acctSyncerUnbonding(did string) string { return "syncer-unbonding:" + did }
func ledgerKey(acct string) []byte          { return []byte("bal/" + acct) }
func nonceKey(did string) []byte            { return []byte("nonce/" + did) }
func entryKey(seq uint64) []byte            { return []byte(fmt.Sprintf("entry/%020d", seq)) }
func bigOf(s string) *big.Int               { v, _ := new(big.Int).SetString(s, 10); return orZero(v) }
func orZero(v *big.Int) *big.Int {
	if v == nil {
		return new(big.Int)
	}
	return v
}
func bps(v *big.Int, b int) *big.Int {
	return new(big.Int).Div(new(big.Int).Mul(v, big.NewInt(int64(b))), big.NewInt(10000))
}

// ledgerTx stages double-entry transfers inside one state transition. It
// reads balances from the KV lazily and writes them into the batch at flush.
type ledgerTx struct {
	kv      KV
	ctx     context.Context
	bal     map[string]*big.Int
	entries []string
	seq     uint64
}

func newLedgerTx(ctx context.Context, kv KV) *ledgerTx {
	return &ledgerTx{kv: kv, ctx: ctx, bal: map[string]*big.Int{}}
}

func (l *ledgerTx) balance(acct string) (*big.Int, error) {
	if v, ok := l.bal[acct]; ok {
		return v, nil
	}
	raw, err := l.kv.Get(l.ctx, KSLedger, ledgerKey(acct))
	switch {
	case errors.Is(err, ErrNotFound):
		l.bal[acct] = new(big.Int)
	case err != nil:
		return nil, fmt.Errorf("ledger: read %s: %w", acct, err)
	default:
		v, ok := new(big.Int).SetString(string(raw), 10)
		if !ok {
			return nil, fmt.Errorf("ledger: corrupt balance for %s", acct)
		}
		l.bal[acct] = v
	}
	return l.bal[acct], nil
}

// transfer moves amount from one account to another (one double entry).
func (l *ledgerTx) transfer(from, to string, amount *big.Int, memo string) error {
	if amount.Sign() < 0 {
		return fmt.Errorf("ledger: negative transfer %s", amount)
	}
	if amount.Sign() == 0 {
		return nil
	}
	fb, err := l.balance(from)
	if err != nil {
		return err
	}
	tb, err := l.balance(to)
	if err != nil {
		return err
	}
	if from != acctIssuer && fb.Cmp(amount) < 0 {
		return Errf(KindFunds, "balance of %s is %s attoTNZO, needs %s", strings.TrimPrefix(from, "did:"), fb, amount)
	}
	fb.Sub(fb, amount)
	tb.Add(tb, amount)
	l.entries = append(l.entries, fmt.Sprintf("%s -> %s %s %s", from, to, amount, memo))
	return nil
}

// flush writes the staged balances and journal entries into b.
func (l *ledgerTx) flush(b *Batch) error {
	if len(l.entries) == 0 {
		return nil
	}
	keys := make([]string, 0, len(l.bal))
	for k := range l.bal {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.Set(KSLedger, ledgerKey(k), []byte(l.bal[k].String()))
	}
	seq, err := l.nextSeq()
	if err != nil {
		return err
	}
	for _, e := range l.entries {
		b.Set(KSLedger, entryKey(seq), []byte(e))
		seq++
	}
	b.Set(KSLedger, []byte("seq"), []byte(fmt.Sprint(seq)))
	return nil
}

func (l *ledgerTx) nextSeq() (uint64, error) {
	raw, err := l.kv.Get(l.ctx, KSLedger, []byte("seq"))
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var v uint64
	_, err = fmt.Sscan(string(raw), &v)
	return v, err
}

// LedgerTotal sums every balance in the ledger; conservation means it is 0.
func LedgerTotal(ctx context.Context, kv KV) (*big.Int, int, error) {
	total := new(big.Int)
	n := 0
	err := kv.Scan(ctx, KSLedger, []byte("bal/"), func(k, v []byte) error {
		x, ok := new(big.Int).SetString(string(v), 10)
		if !ok {
			return fmt.Errorf("corrupt balance %q", k)
		}
		total.Add(total, x)
		n++
		return nil
	})
	return total, n, err
}
