package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// DefaultUnbondingDelay is how long a withdrawn syncer stake stays locked:
// long enough that a syncer cannot misbehave in a round and take its stake
// out before a challenge could reach it.
const DefaultUnbondingDelay = 7 * 24 * time.Hour

// Cancellation reasons recorded in the run.
const (
	CancelBySponsor = "cancelled by the sponsor before the run started"
	CancelExpired   = "expired: the enrolment window passed before the run could start"
)

func acctSyncerUnbonding(did string) string { return "syncer-unbonding:" + did }

// CancelRun implements Service: the sponsor (signed) cancels a run that has
// not started. The escrow goes back to the sponsor and every enrolled
// trainer gets its stake back, in one batch.
func (n *Node) CancelRun(ctx context.Context, p *wire.CancelRunParams) (*wire.CancelRunResult, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusAwaiting {
		return nil, Errf(KindConflict, "run %s is %s: only a run still awaiting enrolment can be cancelled", p.TaskID, r.Status)
	}
	var b Batch
	if err := n.checkSigned(ctx, &b, r.spec.SponsorDID, p.Nonce, p.Signature, p.Preimage(r.spec.SponsorDID)); err != nil {
		return nil, err
	}
	res, err := n.endUnstarted(ctx, &b, r, CancelBySponsor)
	if err != nil {
		return nil, err
	}
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	n.log.Info("run cancelled by its sponsor", "task", p.TaskID, "refunded", res.Refunded, "stakes", res.StakesRefunded)
	n.announce(ctx, Event{TaskID: p.TaskID, Kind: "cancelled"})
	return res, nil
}

// maybeExpire ends a run that is still awaiting enrolment when its window
// has passed (called by Tick with the lock held).
func (n *Node) maybeExpire(ctx context.Context, r *runState, now int64) error {
	if r.PostedMs == 0 || now < r.PostedMs+r.spec.EnrollWindow() {
		return nil
	}
	var b Batch
	res, err := n.endUnstarted(ctx, &b, r, CancelExpired)
	if err != nil {
		return err
	}
	if err := n.kv.Commit(ctx, &b); err != nil {
		return err
	}
	n.log.Info("run expired before it started", "task", r.spec.TaskID, "refunded", res.Refunded, "stakes", res.StakesRefunded)
	n.announce(ctx, Event{TaskID: r.spec.TaskID, Kind: "cancelled"})
	return nil
}

// endUnstarted stages the refunds and the cancelled status of a run that
// never started.
func (n *Node) endUnstarted(ctx context.Context, b *Batch, r *runState, why string) (*wire.CancelRunResult, error) {
	lt := newLedgerTx(ctx, n.kv)
	esc, err := lt.balance(acctEscrow(r.spec.TaskID))
	if err != nil {
		return nil, err
	}
	refunded := new(big.Int).Set(esc)
	if err := lt.transfer(acctEscrow(r.spec.TaskID), acctDID(r.spec.SponsorDID), refunded, "run cancelled: escrow refund"); err != nil {
		return nil, err
	}
	stakes := 0
	for _, t := range r.Trainers {
		if t.Status != wire.TrainerActive && t.Status != wire.TrainerJoining {
			continue
		}
		if err := n.refundStake(lt, r, t); err != nil {
			return nil, err
		}
		t.Status = wire.TrainerLeft
		t.Shards = nil
		stakes++
	}
	if err := lt.flush(b); err != nil {
		return nil, err
	}
	r.Status = wire.StatusCancelled
	r.CancelReason = why
	n.putRun(b, r)
	return &wire.CancelRunResult{TaskID: r.spec.TaskID, Status: r.Status, Refunded: refunded.String(), StakesRefunded: stakes}, nil
}

// Unbond implements Service: a syncer candidate (signed) withdraws its whole
// stake. The stake moves to its unbonding account now, the candidate is not
// entered in elections from now on, and Tick returns the stake to the DID
// once the unbonding delay has passed. A candidate that is the elected
// syncer of a running run cannot unbond until that run ends.
func (n *Node) Unbond(ctx context.Context, p *wire.UnbondParams) (*wire.SyncerCandidate, error) {
	if _, err := did.Parse(p.DID); err != nil {
		return nil, Errf(KindInvalid, "did: %v", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	raw, err := n.kv.Get(ctx, KSMeta, candKey(p.DID))
	if errors.Is(err, ErrNotFound) {
		return nil, Errf(KindNotFound, "%s is not a registered syncer candidate", p.DID)
	} else if err != nil {
		return nil, err
	}
	var c wire.SyncerCandidate
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("candidate %s: %w", p.DID, err)
	}
	if c.Unbonding {
		return nil, Errf(KindConflict, "%s is already unbonding; its stake is released at %d (Unix ms)", p.DID, c.ReleaseMs)
	}
	if task, err := n.runSyncedBy(ctx, p.DID); err != nil {
		return nil, err
	} else if task != "" {
		return nil, Errf(KindConflict, "%s is the elected syncer of running run %s: it can unbond once that run ends", p.DID, task)
	}
	var b Batch
	if err := n.checkSigned(ctx, &b, p.DID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	lt := newLedgerTx(ctx, n.kv)
	stake, err := lt.balance(acctSyncerStake(p.DID))
	if err != nil {
		return nil, err
	}
	if err := lt.transfer(acctSyncerStake(p.DID), acctSyncerUnbonding(p.DID), new(big.Int).Set(stake), "syncer unbonding"); err != nil {
		return nil, err
	}
	if err := lt.flush(&b); err != nil {
		return nil, err
	}
	delay := n.cfg.UnbondingDelay
	if delay <= 0 {
		delay = DefaultUnbondingDelay
	}
	c.Unbonding = true
	c.ReleaseMs = n.now().Add(delay).UnixMilli()
	out, _ := json.Marshal(c)
	b.Set(KSMeta, candKey(p.DID), out)
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	n.log.Info("syncer candidate unbonding", "did", p.DID, "stake", c.Stake, "release_ms", c.ReleaseMs)
	return &c, nil
}

// runSyncedBy returns a running run whose elected syncer is d ("" if none).
func (n *Node) runSyncedBy(ctx context.Context, d string) (string, error) {
	var found string
	err := n.kv.Scan(ctx, KSRuns, nil, func(k, v []byte) error {
		var st struct {
			Status string `json:"status"`
			Syncer string `json:"syncer"`
		}
		if found == "" && json.Unmarshal(v, &st) == nil && st.Status == wire.StatusRunning && st.Syncer == d {
			found = string(k)
		}
		return nil
	})
	return found, err
}

// releaseUnbonded returns every unbonding stake whose delay has passed and
// removes the candidacy.
func (n *Node) releaseUnbonded(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cands, err := n.ListSyncers(ctx)
	if err != nil {
		return err
	}
	now := n.now().UnixMilli()
	var b Batch
	lt := newLedgerTx(ctx, n.kv)
	for _, c := range cands {
		if !c.Unbonding || now < c.ReleaseMs {
			continue
		}
		bal, err := lt.balance(acctSyncerUnbonding(c.DID))
		if err != nil {
			return err
		}
		if err := lt.transfer(acctSyncerUnbonding(c.DID), acctDID(c.DID), new(big.Int).Set(bal), "syncer stake released after unbonding"); err != nil {
			return err
		}
		b.Delete(KSMeta, candKey(c.DID))
		n.log.Info("syncer stake released", "did", c.DID, "amount", bal)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := lt.flush(&b); err != nil {
		return err
	}
	return n.kv.Commit(ctx, &b)
}
