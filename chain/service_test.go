package chain

import (
	"context"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// harnessBroadcaster puts each transaction in a block of its own on the
// harness, the way a one-validator CometBFT would (the multi-process e2e
// test runs the real one).
type harnessBroadcaster struct{ h *harness }

func (b harnessBroadcaster) BroadcastTxCommit(ctx context.Context, tx cmttypes.Tx) (*ctypes.ResultBroadcastTxCommit, error) {
	ct, err := b.h.app.CheckTx(ctx, &abci.RequestCheckTx{Tx: tx})
	if err != nil || ct.Code != 0 {
		return &ctypes.ResultBroadcastTxCommit{CheckTx: *ct}, err
	}
	res, _ := b.h.block(tx)
	return &ctypes.ResultBroadcastTxCommit{CheckTx: *ct, TxResult: *res[0], Height: b.h.height}, nil
}

// TestService: the JSON-RPC methods served from the chain: signed writes
// become transactions with precise error kinds, reads come from committed
// state, and what is not on chain answers KindDisabled.
func TestService(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.accounts...)
	svc := NewService(h.app, harnessBroadcaster{h})

	reg := &wire.RegisterSyncerParams{DID: w.candA.DID.String(), Stake: "10", Signed: wire.Signed{Nonce: 1}}
	reg.Signature = w.candA.Sign(reg.Preimage())
	if c, err := svc.RegisterSyncer(ctx, reg); err != nil || c.Stake != "10" {
		t.Fatalf("register: %v %+v", err, c)
	}
	if _, err := svc.RegisterSyncer(ctx, reg); syncer.KindOf(err) != syncer.KindUnauthorized {
		t.Fatalf("replayed register: %v", err)
	}
	if cs, err := svc.ListSyncers(ctx); err != nil || len(cs) != 1 {
		t.Fatalf("list syncers: %v %+v", err, cs)
	}
	post := &wire.PostTaskParams{Spec: w.spec, InitWeights: []byte("weights"), Signed: wire.Signed{Nonce: 1}}
	_, canon, _ := wire.ParseSpec(w.spec)
	post.Signature = w.sponsor.Sign(post.Preimage(w.sponsor.DID.String(), wire.SpecHash(canon), wire.ContentHash(post.InitWeights)))
	if r, err := svc.PostTask(ctx, post); err != nil || r.TaskID != w.task {
		t.Fatalf("post: %v %+v", err, r)
	}
	if rs, err := svc.ListRuns(ctx, wire.ListRunsParams{}); err != nil || len(rs) != 1 || rs[0].M != 2 {
		t.Fatalf("list runs: %v %+v", err, rs)
	}
	if v, err := svc.GetRun(ctx, w.task); err != nil || v.Status != wire.StatusAwaiting || v.Escrow != "1000" {
		t.Fatalf("get run: %v %+v", err, v)
	}
	if _, err := svc.GetRun(ctx, "nope"); syncer.KindOf(err) != syncer.KindNotFound {
		t.Fatalf("unknown run: %v", err)
	}
	if b, err := svc.Balance(ctx, w.sponsor.DID.String()); err != nil || b.Balance != "9000" {
		t.Fatalf("balance: %v %+v", err, b)
	}
	if _, err := svc.Faucet(ctx, wire.FaucetParams{DID: w.sponsor.DID.String(), Amount: "1"}); syncer.KindOf(err) != syncer.KindDisabled {
		t.Fatalf("faucet: %v", err)
	}
	if _, err := svc.GetWeights(ctx, wire.GetWeightsParams{TaskID: w.task}); syncer.KindOf(err) != syncer.KindDisabled {
		t.Fatalf("getWeights: %v", err)
	}
	g := &wire.OuterGradient{TaskID: w.task, TrainerDID: w.t1.DID.String(), GradientPayload: []byte("x"), PayloadHash: wire.ContentHash([]byte("y"))}
	if _, err := svc.Submit(ctx, g); syncer.KindOf(err) != syncer.KindInvalid {
		t.Fatalf("submit with a wrong hash: %v", err)
	}
	en := &wire.EnrollParams{TaskID: w.task, TrainerDID: w.t1.DID.String(), Stake: "100000", Signed: wire.Signed{Nonce: 1}}
	en.Signature = w.t1.Sign(en.Preimage())
	if _, err := svc.Enroll(ctx, en); syncer.KindOf(err) != syncer.KindFunds {
		t.Fatalf("enrol beyond the balance: %v", err)
	}
	h.conservation()
}
