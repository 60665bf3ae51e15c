package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coretypes "github.com/cometbft/cometbft/rpc/core/types"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestReplayAcrossTestnets (issue 22, findings 1 and 2, on real nodes): two
// one-validator testnets with different chain ids and the same
// allocations. A transfer committed on one is refused on the other; an
// unaffordable transfer that entered a block is refused there, pays its
// fee and uses up its nonce, so its bytes rebroadcast once the sender is
// funded are refused too.
func TestReplayAcrossTestnets(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process chain test")
	}
	build(t)
	alice, poor, bob := chainKey(t, did.KindHuman, 31), chainKey(t, did.KindHuman, 32), chainKey(t, did.KindHuman, 33)
	nets := map[string]*chainNode{}
	for _, id := range []string{"tenzro-ante-a", "tenzro-ante-b"} {
		dir := t.TempDir()
		out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), "testnet", "--validators", "1", "--dir", dir, "--chain-id", id,
			"--base-port", "0", "--block-time", "200ms",
			"--alloc", alice.DID.String()+"=10000000000000000000", "--alloc", poor.DID.String()+"=1000000000000000000").CombinedOutput()
		if err != nil {
			t.Fatalf("testnet %s: %v\n%s", id, err, out)
		}
		home := filepath.Join(dir, "node0")
		nc, err := chain.LoadNodeConfig(home)
		if err != nil {
			t.Fatal(err)
		}
		n := &chainNode{name: id, home: home, extra: []string{"--enclave", "none"}}
		n.connect(t, nc.RPCAddr)
		n.start(t)
		t.Cleanup(n.kill)
		nets[id] = n
	}
	a, b := nets["tenzro-ante-a"], nets["tenzro-ante-b"]
	for _, n := range []*chainNode{a, b} {
		waitHeight(t, n, 1, 2*time.Minute)
	}
	send := func(n *chainNode, tx []byte) *coretypes.ResultBroadcastTxCommit {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		res, err := n.rpc.BroadcastTxCommit(ctx, tx)
		if err != nil {
			t.Fatalf("broadcast to %s: %v", n.name, err)
		}
		return res
	}
	code := func(r *coretypes.ResultBroadcastTxCommit) (uint32, string) {
		if r.CheckTx.Code != 0 {
			return r.CheckTx.Code, "check: " + r.CheckTx.Log
		}
		return r.TxResult.Code, "block: " + r.TxResult.Log
	}

	// Cross-chain replay.
	tx, err := chain.TransferTx("tenzro-ante-a", alice, bob.DID.String(), "1000000000000000000", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c, log := code(send(a, tx)); c != chain.CodeOK {
		t.Fatalf("on its own chain: code %d %s", c, log)
	}
	if c, log := code(send(b, tx)); c != chain.CodeUnauthorized || !strings.Contains(log, `signed for chain "tenzro-ante-a", this chain is "tenzro-ante-b"`) {
		t.Fatalf("replayed on the other chain: code %d %s", c, log)
	}

	// Refused-transaction replay.
	unaffordable, err := chain.TransferTx("tenzro-ante-a", poor, bob.DID.String(), "5000000000000000000", 7)
	if err != nil {
		t.Fatal(err)
	}
	r := send(a, unaffordable)
	if r.CheckTx.Code != chain.CodeOK || r.TxResult.Code != chain.CodeFunds {
		t.Fatalf("unaffordable transfer: check %d %q, block %d %q (want it in a block, refused for funds)", r.CheckTx.Code, r.CheckTx.Log, r.TxResult.Code, r.TxResult.Log)
	}
	fund, err := chain.TransferTx("tenzro-ante-a", alice, poor.DID.String(), "8000000000000000000", 2)
	if err != nil {
		t.Fatal(err)
	}
	if c, log := code(send(a, fund)); c != chain.CodeOK {
		t.Fatalf("funding: code %d %s", c, log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.rpc.BroadcastTxSync(ctx, unaffordable)
	switch {
	case err != nil && strings.Contains(err.Error(), "tx already exists in cache"):
		// CometBFT's own cache remembers the bytes; the application's
		// refusal is checked below on a fresh mempool (a restarted node).
	case err != nil:
		t.Fatal(err)
	case res.Code == chain.CodeOK:
		t.Fatalf("the refused transfer's bytes were accepted again after funding: %+v", res)
	}
	last := a.height(t)
	a.kill()
	a.start(t)
	waitHeight(t, a, last+1, 2*time.Minute)
	if c, log := code(send(a, unaffordable)); c != chain.CodeNonce || !strings.Contains(log, "not above the last one") {
		t.Fatalf("refused transfer replayed after funding (fresh mempool): code %d %s", c, log)
	}
	q, err := a.rpc.ABCIQuery(ctx, chain.QueryBalance, []byte(bob.DID.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(q.Response.Value); got != "1000000000000000000" {
		t.Fatalf("bob holds %s on chain a, want only the first transfer", got)
	}
	t.Logf("chain b refused chain a's transfer; chain a refused the replay of its refused transfer (%s)", fmt.Sprint(chain.CodeNonce))
}

// TestReplayedEnrolmentRefusedPrecisely (issue 22 finding 11): the same
// signed enrolment sent twice to a --dev node (its bytes already in the
// chain's mempool cache, or its nonce used) is refused with the reason — a
// replay, or a nonce not above the last one — never "internal error"
// (-32603), and the trainer stays enrolled once.
func TestReplayedEnrolmentRefusedPrecisely(t *testing.T) {
	build(t)
	keys, _, _ := makeKeys(t, 1)
	e := newEnv(t, keys)
	e.start()
	defer e.stop()
	ctx := context.Background()
	c := client.New(e.rpc, client.WithTimeout(60*time.Second))
	sponsor, trainer := loadKey(t, filepath.Join(keys, "sponsor.key")), loadKey(t, filepath.Join(keys, "t0.key"))
	for _, k := range []*did.Key{sponsor, trainer} {
		if _, err := c.Faucet(ctx, wire.FaucetParams{DID: k.DID.String(), Amount: "5000000000000000000000"}); err != nil {
			t.Fatal(err)
		}
	}
	const task = "replayed-enrolment"
	raw := smallSpec(task, sponsor.DID.String(), 2, 2, 1, 2)
	_, canon, err := wire.ParseSpec(raw)
	if err != nil {
		t.Fatal(err)
	}
	w := initWeights(1, 64)
	pp := &wire.PostTaskParams{Spec: raw, InitWeights: w, Signed: wire.Signed{ChainID: "tenzro-dev", Nonce: uint64(time.Now().UnixNano())}}
	pp.Signature = sponsor.Sign(pp.Preimage(sponsor.DID.String(), wire.SpecHash(canon), wire.ContentHash(w)))
	if _, err := c.PostTask(ctx, pp); err != nil {
		t.Fatal(err)
	}
	ep := &wire.EnrollParams{TaskID: task, TrainerDID: trainer.DID.String(), Stake: "100000000000000000000", Signed: wire.Signed{ChainID: "tenzro-dev", Nonce: uint64(time.Now().UnixNano())}}
	ep.Signature = trainer.Sign(ep.Preimage())
	if _, err := c.Enroll(ctx, ep); err != nil {
		t.Fatalf("first enrolment: %v", err)
	}
	for i := 0; i < 2; i++ {
		_, err := c.Enroll(ctx, ep)
		if err == nil {
			t.Fatalf("replay %d accepted", i)
		}
		if code := client.CodeOf(err); code == 0 || code == -32603 || !(strings.Contains(err.Error(), "replayed transaction") || strings.Contains(err.Error(), "not above")) {
			t.Fatalf("replay %d: %v (code %d), want a precise refusal", i, err, code)
		}
		t.Logf("replay %d refused: %v", i, err)
	}
	run, err := c.GetRun(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Trainers) != 1 {
		t.Fatalf("%d trainers after the replays, want 1", len(run.Trainers))
	}
}
