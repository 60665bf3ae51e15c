package chain

import (
	"context"
	"encoding/json"
	"fmt"

	abci "github.com/cometbft/cometbft/abci/types"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Broadcaster submits a transaction and waits for its block: CometBFT's
// in-process local client, or its HTTP client.
type Broadcaster interface {
	BroadcastTxCommit(ctx context.Context, tx cmttypes.Tx) (*ctypes.ResultBroadcastTxCommit, error)
}

// Service serves the node's JSON-RPC methods (syncer.Service) from the
// chain: writes become transactions, broadcast and answered once committed;
// reads come from this node's committed state, so every node answers alike.
// Methods whose state is not on chain yet (weights, receipts, transcripts,
// payloads, attestation nonces, finalizeRound) answer KindDisabled, and so
// does the faucet: funds come only from genesis. Payload bytes are hashed and
// dropped (there is no blob store on a chain node yet).
type Service struct {
	app *App
	bc  Broadcaster
}

var _ syncer.Service = (*Service)(nil)

// NewService serves app's state and broadcasts through bc.
func NewService(app *App, bc Broadcaster) *Service { return &Service{app: app, bc: bc} }

func kindOf(code uint32) syncer.Kind {
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
	}
	return syncer.KindInternal
}

func notYet(what string) error {
	return syncer.Errf(syncer.KindDisabled, "%s is not served by a chain node yet (issue 9): it is not part of the replicated state", what)
}

// submit broadcasts tx and decodes its result into out.
func (s *Service) submit(ctx context.Context, tx []byte, err error, out any) error {
	if err != nil {
		return syncer.Errf(syncer.KindInvalid, "%v", err)
	}
	res, err := s.bc.BroadcastTxCommit(ctx, tx)
	if err != nil {
		return fmt.Errorf("broadcast: %w", err)
	}
	if res.CheckTx.Code != CodeOK {
		return syncer.Errf(kindOf(res.CheckTx.Code), "%s", res.CheckTx.Log)
	}
	if res.TxResult.Code != CodeOK {
		return syncer.Errf(kindOf(res.TxResult.Code), "%s", res.TxResult.Log)
	}
	if err := json.Unmarshal(res.TxResult.Data, out); err != nil {
		return fmt.Errorf("result of the transaction at height %d: %w", res.Height, err)
	}
	return nil
}

func (s *Service) query(ctx context.Context, path, arg string) ([]byte, error) {
	res, err := s.app.Query(ctx, &abci.RequestQuery{Path: path, Data: []byte(arg)})
	if err != nil {
		return nil, err
	}
	if res.Code != CodeOK {
		return nil, syncer.Errf(kindOf(res.Code), "%s", res.Log)
	}
	return res.Value, nil
}

// PostTask implements syncer.Service.
func (s *Service) PostTask(ctx context.Context, p *wire.PostTaskParams) (*wire.PostTaskResult, error) {
	_, canon, err := wire.ParseSpec(p.Spec)
	if err != nil {
		return nil, syncer.Errf(syncer.KindInvalid, "%v", err)
	}
	var wh wire.Hash
	if len(p.InitWeights) > 0 {
		wh = wire.ContentHash(p.InitWeights)
	}
	tx, err := EncodeTx(TxPostTask, PostTask{Spec: canon, InitWeightsHash: wh, Signed: p.Signed})
	var out wire.PostTaskResult
	return &out, s.submit(ctx, tx, err, &out)
}

// SetInitWeights implements syncer.Service.
func (s *Service) SetInitWeights(context.Context, *wire.SetInitWeightsParams) (*wire.PostTaskResult, error) {
	return nil, notYet("setInitWeights")
}

func (s *Service) runs(ctx context.Context) ([]runRecord, error) {
	var out []runRecord
	err := s.app.scanCommitted(ctx, "run/", func(_ string, v []byte) error {
		var r runRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return err
		}
		spec, _, err := wire.ParseSpec(r.Spec)
		if err != nil {
			return err
		}
		r.spec = spec
		out = append(out, r)
		return nil
	})
	return out, err
}

// ListRuns implements syncer.Service.
func (s *Service) ListRuns(ctx context.Context, p wire.ListRunsParams) ([]wire.RunSummary, error) {
	rs, err := s.runs(ctx)
	if err != nil {
		return nil, err
	}
	out := []wire.RunSummary{}
	for _, r := range rs {
		if p.Status != "" && r.Status != p.Status {
			continue
		}
		out = append(out, wire.RunSummary{TaskID: r.TaskID, Status: r.Status, Round: r.Round, Tier: r.spec.Tier, Trainers: r.members(),
			M: r.spec.TrainerCount, K: r.spec.Quorum, Rounds: r.spec.MaxRounds})
	}
	return out, nil
}

// GetRun implements syncer.Service: the run as committed on chain (no
// fragment tensors or weights: those are not on chain).
func (s *Service) GetRun(ctx context.Context, task string) (*wire.RunView, error) {
	v, err := s.query(ctx, QueryRun, task)
	if err != nil {
		return nil, err
	}
	var r runRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, err
	}
	escrow, err := s.query(ctx, QueryBalanceAcct, acctEscrow(task))
	if err != nil {
		return nil, err
	}
	view := &wire.RunView{TaskID: r.TaskID, TaskSpec: r.Spec, SpecHash: r.SpecHash, Status: r.Status, Round: r.Round,
		RoundStartedMs: r.RoundStartMs, Election: r.Election, Trainers: []wire.TrainerView{}, TrainerMetrics: map[string]wire.TrainerMetrics{},
		Fragments: []wire.FragmentView{}, RoundRoots: r.RoundRoots, Aggregation: json.RawMessage("null"), Escrow: string(escrow)}
	if n := len(r.RoundSyncers); n > 0 {
		view.Syncer = r.RoundSyncers[n-1]
	} else if r.Election != nil {
		view.Syncer = r.Election.Winner
	}
	for _, t := range r.Trainers {
		view.Trainers = append(view.Trainers, wire.TrainerView{DID: t.DID, Status: t.Status, Stake: t.Stake, Slashed: t.Slashed, Shards: []int{}, MissedRun: t.ConsecMissed})
	}
	return view, nil
}

// GetReceipt implements syncer.Service.
func (s *Service) GetReceipt(context.Context, string) (*wire.Receipt, error) {
	return nil, notYet("getReceipt (the chain keeps the run root: tenzro chain run / prove)")
}

// GetTranscript implements syncer.Service.
func (s *Service) GetTranscript(context.Context, string) ([]wire.RoundCommit, error) {
	return nil, notYet("getTranscript")
}

// GetPayload implements syncer.Service.
func (s *Service) GetPayload(context.Context, wire.Hash) ([]byte, error) {
	return nil, notYet("getPayload")
}

// Enroll implements syncer.Service.
func (s *Service) Enroll(ctx context.Context, p *wire.EnrollParams) (*wire.EnrollResult, error) {
	tx, err := EncodeTx(TxEnroll, p)
	var out wire.EnrollResult
	return &out, s.submit(ctx, tx, err, &out)
}

// Leave implements syncer.Service.
func (s *Service) Leave(ctx context.Context, p *wire.LeaveParams) (*wire.EnrollResult, error) {
	tx, err := EncodeTx(TxLeave, p)
	var out wire.EnrollResult
	return &out, s.submit(ctx, tx, err, &out)
}

// Submit implements syncer.Service: the submission's record goes on chain;
// the payload is checked against its hash and not kept.
func (s *Service) Submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	if _, ok := g.CheckPayloadHash(); !ok {
		return nil, syncer.Errf(syncer.KindInvalid, "payload does not hash to payload_hash %s", g.PayloadHash)
	}
	if len(g.Attestation) > 0 {
		return nil, syncer.Errf(syncer.KindInvalid, "attestation: submission evidence is not checked on chain yet (tier Open only)")
	}
	rec := Submission{TaskID: g.TaskID, TrainerDID: g.TrainerDID, Round: g.Round, FragmentIndex: g.FragmentIndex,
		PayloadHash: g.PayloadHash, PayloadSize: uint64(len(g.GradientPayload)), Signature: g.Signature}
	tx, err := EncodeTx(TxSubmission, rec)
	var out wire.SubmitResult
	return &out, s.submit(ctx, tx, err, &out)
}

// FinalizeRound implements syncer.Service.
func (s *Service) FinalizeRound(context.Context, *wire.FinalizeParams) (*wire.FinalizeResult, error) {
	return nil, notYet("finalizeRound (rounds commit by the syncer's commitRound transaction)")
}

// CancelRun implements syncer.Service.
func (s *Service) CancelRun(context.Context, *wire.CancelRunParams) (*wire.CancelRunResult, error) {
	return nil, notYet("cancelRun")
}

// Unbond implements syncer.Service.
func (s *Service) Unbond(context.Context, *wire.UnbondParams) (*wire.SyncerCandidate, error) {
	return nil, notYet("syncer unbonding")
}

// GetWeights implements syncer.Service.
func (s *Service) GetWeights(context.Context, wire.GetWeightsParams) (*wire.Weights, error) {
	return nil, notYet("getWeights")
}

// Balance implements syncer.Service.
func (s *Service) Balance(ctx context.Context, d string) (*wire.Balance, error) {
	v, err := s.query(ctx, QueryBalance, d)
	if err != nil {
		return nil, err
	}
	return &wire.Balance{DID: d, Balance: string(v)}, nil
}

// Faucet implements syncer.Service: there is none on a chain.
func (s *Service) Faucet(context.Context, wire.FaucetParams) (*wire.Balance, error) {
	return nil, syncer.Errf(syncer.KindDisabled, "there is no faucet on a chain node: funds come only from genesis allocations (tenzro-node testnet --alloc)")
}

// RegisterSyncer implements syncer.Service.
func (s *Service) RegisterSyncer(ctx context.Context, p *wire.RegisterSyncerParams) (*wire.SyncerCandidate, error) {
	tx, err := EncodeTx(TxRegisterSyncer, p)
	var out wire.SyncerCandidate
	return &out, s.submit(ctx, tx, err, &out)
}

// ListSyncers implements syncer.Service.
func (s *Service) ListSyncers(ctx context.Context) ([]wire.SyncerCandidate, error) {
	out := []wire.SyncerCandidate{}
	err := s.app.scanCommitted(ctx, "cand/", func(_ string, v []byte) error {
		var c wire.SyncerCandidate
		if err := json.Unmarshal(v, &c); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// SubmitElectionProof implements syncer.Service.
func (s *Service) SubmitElectionProof(ctx context.Context, p *wire.ElectionProofParams) (*wire.ElectionProofResult, error) {
	tx, err := EncodeTx(TxElectionProof, p)
	var out wire.ElectionProofResult
	return &out, s.submit(ctx, tx, err, &out)
}

// Info implements syncer.Service.
func (s *Service) Info(context.Context) wire.NodeInfo {
	return wire.NodeInfo{Version: syncer.Version, Role: "chain", Engine: wire.EngineSummary{Engine: "none"}}
}

// AttestNonce implements syncer.Service.
func (s *Service) AttestNonce(context.Context, wire.NonceParams) (*wire.NonceResult, error) {
	return nil, notYet("attestation nonces")
}

// scanCommitted calls fn for committed state keys with the prefix.
func (a *App) scanCommitted(ctx context.Context, prefix string, fn func(k string, v []byte) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return newOverlay(a.kv, nil).scan(ctx, prefix, fn)
}
