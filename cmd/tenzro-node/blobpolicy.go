package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"os"
	"sync"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// blobPolicy prices PUT /blobs (docs/protocol/blobs.md, RATIONALE "Who may
// upload a blob"): an upload is admitted from a signed intent of a DID that
// is enrolled in (or sponsors) the active run it names, or whose balance
// covers the price per byte of everything it holds unreferenced; each DID
// holds at most quota unreferenced bytes. Its collector deletes uploads no
// record took up within the TTL, and the payloads of rounds that are final
// (challenge window passed).
type blobPolicy struct {
	svc   syncer.Service
	blobs *store.Blobs
	chain func(context.Context) string
	log   *slog.Logger
	// price is the attoTNZO of balance each unreferenced byte needs.
	price *big.Int
	quota int64
	ttl   time.Duration
	// archive keeps every blob a run references, the payloads of final
	// rounds included (--archive): a node others replay old runs from.
	archive bool

	mu      sync.Mutex
	pending map[string]int64 // DID → unreferenced uploaded bytes (ledger and in flight)
}

func newBlobPolicy(ctx context.Context, svc syncer.Service, blobs *store.Blobs, chainID func(context.Context) string, price *big.Int, quota int64, ttl time.Duration, log *slog.Logger) (*blobPolicy, error) {
	p := &blobPolicy{svc: svc, blobs: blobs, chain: chainID, log: log, price: price, quota: quota, ttl: ttl, pending: map[string]int64{}}
	err := blobs.Uploads(ctx, func(u store.Upload) error {
		p.pending[u.DID] += u.Size
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("blob policy: read the upload ledger: %w", err)
	}
	return p, nil
}

// ChainID implements rpc.BlobAuthorizer.
func (p *blobPolicy) ChainID(ctx context.Context) (string, error) { return p.chain(ctx), nil }

// allowance is how many unreferenced bytes did may hold.
func (p *blobPolicy) allowance(ctx context.Context, did, task string) (int64, string, error) {
	if task != "" {
		run, err := p.svc.GetRun(ctx, task)
		if err == nil && (run.Status == wire.StatusAwaiting || run.Status == wire.StatusRunning) {
			for _, t := range run.Trainers {
				if t.DID == did {
					return p.quota, "enrolled in run " + task, nil
				}
			}
			var spec struct {
				SponsorDID string `json:"sponsor_did"`
			}
			if json.Unmarshal(run.TaskSpec, &spec) == nil && spec.SponsorDID == did {
				return p.quota, "sponsor of run " + task, nil
			}
		} else if err != nil && machine.KindOf(err) != machine.KindNotFound {
			return 0, "", err
		}
	}
	n, basis, err := fundedBytes(ctx, p.svc, p.price, did)
	return min(n, p.quota), basis, err
}

// fundedBytes is how many bytes did's balance funds at price attoTNZO per
// byte, and the balance it read: one rule for unreferenced blob uploads
// and dataset pins (dataset.Options.Funds), so a fresh DID, which costs
// nothing, holds nothing on a node.
func fundedBytes(ctx context.Context, svc syncer.Service, price *big.Int, did string) (int64, string, error) {
	bal, err := svc.Balance(ctx, did)
	if err != nil {
		if machine.KindOf(err) == machine.KindNotFound {
			return 0, "no balance", nil
		}
		return 0, "", err
	}
	b, ok := new(big.Int).SetString(bal.Balance, 10)
	if !ok || b.Sign() <= 0 {
		return 0, "balance " + bal.Balance, nil
	}
	n := new(big.Int).Quo(b, price)
	if n.IsInt64() {
		return n.Int64(), "balance " + bal.Balance, nil
	}
	return math.MaxInt64, "balance " + bal.Balance, nil
}

// Reserve implements rpc.BlobAuthorizer.
func (p *blobPolicy) Reserve(ctx context.Context, did, task string, h wire.Hash, size int64) (func(bool), error) {
	allow, basis, err := p.allowance(ctx, did, task)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	held := p.pending[did]
	if held+size > allow {
		p.mu.Unlock()
		if allow == 0 {
			return nil, machine.Errf(machine.KindFunds, "upload refused: %s funds no upload (%s; each unreferenced byte needs %s attoTNZO of balance, or an enrolment in the active run the intent names); send the payload inline instead",
				did, basis, p.price)
		}
		return nil, machine.Errf(machine.KindFunds, "upload refused: %s holds %d unreferenced bytes; %d more would pass its allowance of %d bytes (%s; at most %d per DID, node flag --blob-did-quota); uploads count until a record references them or they are collected after %s",
			did, held, size, allow, basis, p.quota, p.ttl)
	}
	p.pending[did] = held + size
	p.mu.Unlock()
	return func(created bool) {
		if created {
			if err := p.blobs.MarkUpload(h, did, task); err == nil {
				return
			} else {
				p.log.Warn("blob upload not recorded in the ledger; it is not collected by TTL", "hash", h, "did", did, "err", err)
			}
		}
		p.mu.Lock()
		p.release(did, size)
		p.mu.Unlock()
	}, nil
}

func (p *blobPolicy) release(did string, size int64) {
	if p.pending[did] -= size; p.pending[did] <= 0 {
		delete(p.pending, did)
	}
}

// pendingBytes is the bytes of uploads no record references yet.
func (p *blobPolicy) pendingBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, v := range p.pending {
		n += v
	}
	return n
}

// collectStats says what one collection did.
type collectStats struct {
	Adopted, Expired, FinalPayloads int
	FreedBytes                      int64
}

// collect runs one collection at now: uploads a record took up leave the
// ledger (and their DID's quota); uploads older than the TTL that nothing
// references are deleted; payloads referenced only by final rounds are
// deleted once older than the TTL.
func (p *blobPolicy) collect(ctx context.Context, now time.Time) (collectStats, error) {
	var st collectStats
	keep, final, err := p.references(ctx)
	if err != nil {
		return st, err
	}
	var ups []store.Upload
	if err := p.blobs.Uploads(ctx, func(u store.Upload) error { ups = append(ups, u); return nil }); err != nil {
		return st, err
	}
	for _, u := range ups {
		switch {
		case keep[u.Hash] || final[u.Hash]:
			if err := p.blobs.Unmark(u.Hash); err != nil {
				return st, err
			}
			st.Adopted++
		case now.Sub(u.At) > p.ttl:
			if err := p.blobs.Delete(ctx, u.Hash); err != nil {
				return st, err
			}
			st.Expired++
			st.FreedBytes += u.Size
		default:
			continue
		}
		p.mu.Lock()
		p.release(u.DID, u.Size)
		p.mu.Unlock()
	}
	for h := range final {
		if keep[h] {
			continue
		}
		fi, err := os.Stat(p.blobs.Path(h))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("blob collector: %w", err)
		}
		if now.Sub(fi.ModTime()) <= p.ttl {
			continue
		}
		if err := p.blobs.Delete(ctx, h); err != nil {
			return st, err
		}
		st.FinalPayloads++
		st.FreedBytes += fi.Size()
	}
	return st, nil
}

// references lists the blobs runs need (keep) and the payloads only final
// rounds name (final): for every run, its initial weights file and the
// fragments' current weights, the weights before and after every committed
// round (what `tenzro receipt replay` starts from and checks against, and
// getWeights of any round serves), and for every committed round that is
// not final (its challenge window open, docs/protocol/challenges.md) the
// payloads and momentum it names, which a challenge of it reads, and the
// payloads of the StaleLookbackRounds rounds before it (what its stale
// rule compares with) until the run is over. A run without a challenge
// window has every committed round final at once. On
// an archive node final payloads are kept too (final stays empty).
func (p *blobPolicy) references(ctx context.Context) (keep, final map[wire.Hash]bool, err error) {
	keep, final = map[wire.Hash]bool{}, map[wire.Hash]bool{}
	runs, err := p.svc.ListRuns(ctx, wire.ListRunsParams{})
	if err != nil {
		return nil, nil, fmt.Errorf("blob collector: list runs: %w", err)
	}
	for _, rs := range runs {
		run, err := p.svc.GetRun(ctx, rs.TaskID)
		if err != nil {
			return nil, nil, fmt.Errorf("blob collector: run %s: %w", rs.TaskID, err)
		}
		keep[run.InitWeightsHash] = true
		for _, f := range run.Fragments {
			keep[f.WeightsHash] = true
		}
		var spec wire.TaskSpec
		if json.Unmarshal(run.TaskSpec, &spec) == nil {
			if sc, err := spec.ScoringRef(); err == nil && sc != nil {
				keep[sc.Corpus] = true // the evaluator's corpus, for every commit and re-execution
			}
		}
		tr, err := p.svc.GetTranscript(ctx, rs.TaskID)
		if err != nil {
			return nil, nil, fmt.Errorf("blob collector: transcript of %s: %w", rs.TaskID, err)
		}
		finalRounds := run.FinalRounds
		if run.ChallengeWindowBlocks == 0 {
			finalRounds = uint64(len(tr))
		}
		over := run.Status != wire.StatusRunning && finalRounds >= uint64(len(tr))
		for _, rc := range tr {
			isFinal := rc.Round < finalRounds
			// A round's payloads are also what the stale rule of the
			// StaleLookbackRounds rounds after it compares with (copies.md
			// §6): kept until those are final too, or the run is over.
			payloadsFinal := rc.Round+wire.StaleLookbackRounds < finalRounds || (isFinal && over)
			for _, fc := range rc.Fragments {
				keep[fc.WeightsBefore], keep[fc.WeightsAfter] = true, true
				keep[fc.MomentumAfter] = keep[fc.MomentumAfter] || !isFinal || p.archive
				for _, in := range fc.Inputs {
					if payloadsFinal && !p.archive {
						final[in.PayloadHash] = true
					} else {
						keep[in.PayloadHash] = true
					}
				}
			}
		}
	}
	delete(keep, wire.Hash{})
	delete(final, wire.Hash{})
	return keep, final, nil
}

// runCollector collects every interval until ctx ends.
func (p *blobPolicy) runCollector(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		st, err := p.collect(ctx, time.Now())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.log.Warn("blob collector", "err", err)
			continue
		}
		if st.Expired+st.FinalPayloads+st.Adopted > 0 {
			p.log.Info("blob collector", "adopted", st.Adopted, "expired_uploads", st.Expired, "final_payloads", st.FinalPayloads, "freed_bytes", st.FreedBytes)
		}
	}
}
