package machine

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Ledger, candidate and plugin-record transitions.

const noFaucet = "there is no faucet on this chain: funds come only from genesis allocations (the faucet exists only on a node started with --dev)"

// MaxPluginModuleBytes bounds a published module's recorded size (the
// plugin host's own limit).
const MaxPluginModuleBytes = 16 << 20

func parseDIDField(field, s string) error {
	if _, err := did.Parse(s); err != nil {
		return Errf(KindInvalid, "%s: %v", field, err)
	}
	return nil
}

func parseAmountField(field, s string) (*big.Int, error) {
	v, err := wire.ParseAmount(s)
	if err != nil {
		return nil, Errf(KindInvalid, "%s: %v", field, err)
	}
	return v, nil
}

func (x *mtx) transfer(p *wire.TransferParams) (*wire.Balance, error) {
	if err := parseDIDField("from", p.From); err != nil {
		return nil, err
	}
	if err := parseDIDField("to", p.To); err != nil {
		return nil, err
	}
	amt, err := parseAmountField("amount", p.Amount)
	if err != nil {
		return nil, err
	}
	if amt.Sign() == 0 {
		return nil, Errf(KindInvalid, "amount must be positive")
	}
	if err := x.lt.transfer(AcctDID(p.From), AcctDID(p.To), amt, "transfer"); err != nil {
		return nil, err
	}
	b, err := x.lt.balance(AcctDID(p.From))
	if err != nil {
		return nil, err
	}
	return &wire.Balance{DID: p.From, Balance: b.String()}, nil
}

func (x *mtx) faucet(p *wire.FaucetTx) (*wire.Balance, error) {
	params, err := x.params()
	if err != nil {
		return nil, err
	}
	if !params.Faucet {
		return nil, Errf(KindDisabled, noFaucet)
	}
	if err := parseDIDField("did", p.DID); err != nil {
		return nil, err
	}
	amt, err := parseAmountField("amount", p.Amount)
	if err != nil {
		return nil, err
	}
	if err := x.lt.transfer(acctIssuer, AcctDID(p.DID), amt, "faucet"); err != nil {
		return nil, err
	}
	b, err := x.lt.balance(AcctDID(p.DID))
	if err != nil {
		return nil, err
	}
	return &wire.Balance{DID: p.DID, Balance: b.String()}, nil
}

func (x *mtx) candidate(d string) (*wire.SyncerCandidate, error) {
	var c wire.SyncerCandidate
	ok, err := x.getJSON(KSMeta, CandKey(d), &c)
	if err != nil || !ok {
		return nil, err
	}
	return &c, nil
}

func (x *mtx) registerCandidate(p *wire.RegisterSyncerParams) (*wire.SyncerCandidate, error) {
	if err := parseDIDField("did", p.DID); err != nil {
		return nil, err
	}
	amt, err := parseAmountField("stake", p.Stake)
	if err != nil {
		return nil, err
	}
	if amt.Sign() == 0 {
		return nil, Errf(KindInvalid, "stake must be positive: the election weights candidates by stake")
	}
	if c, err := x.candidate(p.DID); err != nil {
		return nil, err
	} else if c != nil && c.Unbonding {
		return nil, Errf(KindConflict, "%s is unbonding (its stake is released at %d, Unix ms): register again after that", p.DID, c.ReleaseMs)
	}
	if err := x.lt.transfer(AcctDID(p.DID), acctSyncerStake(p.DID), amt, "syncer candidacy"); err != nil {
		return nil, err
	}
	total, err := x.lt.balance(acctSyncerStake(p.DID))
	if err != nil {
		return nil, err
	}
	c := wire.SyncerCandidate{DID: p.DID, Stake: total.String()}
	return &c, x.putJSON(KSMeta, CandKey(p.DID), c)
}

// unbond withdraws a candidate's whole stake: it moves to the unbonding
// account now, the candidate enters no election from now on, and BeginBlock
// returns the stake once the unbonding delay has passed. The elected syncer
// of a running run cannot unbond until that run ends.
func (x *mtx) unbond(p *wire.UnbondParams) (*wire.SyncerCandidate, error) {
	if err := parseDIDField("did", p.DID); err != nil {
		return nil, err
	}
	c, err := x.candidate(p.DID)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, Errf(KindNotFound, "%s is not a registered syncer candidate", p.DID)
	}
	if c.Unbonding {
		return nil, Errf(KindConflict, "%s is already unbonding; its stake is released at %d (Unix ms)", p.DID, c.ReleaseMs)
	}
	if task, err := x.runSyncedBy(p.DID); err != nil {
		return nil, err
	} else if task != "" {
		return nil, Errf(KindConflict, "%s is the elected syncer of running run %s: it can unbond once that run ends", p.DID, task)
	}
	stake, err := x.lt.balance(acctSyncerStake(p.DID))
	if err != nil {
		return nil, err
	}
	if err := x.lt.transfer(acctSyncerStake(p.DID), acctSyncerUnbonding(p.DID), new(big.Int).Set(stake), "syncer unbonding"); err != nil {
		return nil, err
	}
	params, err := x.params()
	if err != nil {
		return nil, err
	}
	c.Unbonding = true
	c.ReleaseMs = x.blk.TimeMs + params.UnbondingDelayMs
	x.set(KSMeta, unbondKey(c.ReleaseMs, p.DID), []byte{})
	return c, x.putJSON(KSMeta, CandKey(p.DID), c)
}

// runSyncedBy returns an active run whose elected syncer is d ("" if none).
func (x *mtx) runSyncedBy(d string) (string, error) {
	var found string
	err := x.kv.Scan(x.ctx, KSMeta, []byte(activePrefix), func(k, _ []byte) error {
		if found != "" {
			return nil
		}
		task := strings.TrimPrefix(string(k), activePrefix)
		r, err := LoadRunHeader(x.ctx, x.kv, task, false) // status and syncer: the header's
		if err != nil {
			return nil // an unreadable run holds no one
		}
		if r.Status == wire.StatusRunning && r.Syncer == d {
			found = task
		}
		return nil
	})
	return found, err
}

// releaseUnbonded returns every unbonding stake whose delay has passed (at
// the block's time) and removes the candidacy.
func (x *mtx) releaseUnbonded() (int, error) {
	type due struct{ key, did string }
	var ds []due
	stop := errors.New("stop")
	err := x.kv.Scan(x.ctx, KSMeta, []byte("unbond/"), func(k, _ []byte) error {
		rest := strings.TrimPrefix(string(k), "unbond/")
		ms, d, ok := strings.Cut(rest, "/")
		t, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil {
			return fmt.Errorf("corrupt unbonding entry %q", k)
		}
		if t > x.blk.TimeMs {
			return stop
		}
		ds = append(ds, due{string(k), d})
		return nil
	})
	if err != nil && !errors.Is(err, stop) {
		return 0, err
	}
	for _, u := range ds {
		bal, err := x.lt.balance(acctSyncerUnbonding(u.did))
		if err != nil {
			return 0, err
		}
		if err := x.lt.transfer(acctSyncerUnbonding(u.did), AcctDID(u.did), new(big.Int).Set(bal), "syncer stake released after unbonding"); err != nil {
			return 0, err
		}
		x.del(KSMeta, []byte(u.key))
		x.del(KSMeta, CandKey(u.did))
		x.m.log.Info("syncer stake released", "did", u.did, "amount", bal)
	}
	return len(ds), nil
}

// publishPlugin records a plugin publication and burns its fee. The module
// was checked and stored by the publisher's node; the record makes its
// hash usable by postings on any node.
func (x *mtx) publishPlugin(p *wire.PublishPluginTx) (*PluginRecord, error) {
	if err := parseDIDField("did", p.DID); err != nil {
		return nil, err
	}
	if p.Size == 0 || p.Size > MaxPluginModuleBytes {
		return nil, Errf(KindInvalid, "size %d: want 1..%d", p.Size, MaxPluginModuleBytes)
	}
	fee, err := x.fee("publish")
	if err != nil {
		return nil, err
	}
	if err := x.lt.transfer(AcctDID(p.DID), acctIssuer, fee, "plugin publication fee (burned)"); err != nil {
		return nil, err
	}
	var rec PluginRecord
	ok, err := x.getJSON(KSMeta, pluginKey(p.Hash), &rec)
	if err != nil {
		return nil, err
	}
	if !ok {
		rec = PluginRecord{Hash: p.Hash, Publisher: p.DID, Size: p.Size, Height: x.blk.Height}
		if err := x.putJSON(KSMeta, pluginKey(p.Hash), rec); err != nil {
			return nil, err
		}
	}
	return &rec, nil
}

// knownPlugin says whether ref's code is a built-in (with that name) or a
// plugin published on chain.
func (x *mtx) knownPlugin(what string, ref RuleRef) error {
	if name, ok := x.m.builtins[ref.Hash]; ok {
		if name != ref.Name {
			return Errf(KindInvalid, "%s: built-in module sha256:%s is %s, not %s", what, ref.Hash, name, ref.Name)
		}
		return nil
	}
	var rec PluginRecord
	ok, err := x.getJSON(KSMeta, pluginKey(ref.Hash), &rec)
	if err != nil {
		return err
	}
	if !ok {
		return Errf(KindInvalid, "%s: %s (sha256:%s) is neither a built-in nor a plugin published on chain", what, ref.Name, ref.Hash)
	}
	return nil
}
