package e2e

import (
	"context"
	"crypto/sha256"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/wire/did"
)

// TestMempoolSenderShareOnANode (issue 22, per-sender mempool share): a
// one-validator testnet whose node runs with --mempool-sender-limit 4. One
// funded key floods fee-paying transfers as fast as CometBFT's RPC takes
// them; the node refuses it with code 11 once four of its transactions
// wait, no block ever holds more than four of them (the mempool never
// holds more), and another sender's transfer is admitted and committed
// during the flood. Nothing depends on speed: the flood runs until a
// refusal is seen (2 minutes at most) and the block bound holds whatever
// the rate.
func TestMempoolSenderShareOnANode(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process chain test")
	}
	const limit = 4
	build(t)
	flooder, honest, bob := chainKey(t, did.KindHuman, 41), chainKey(t, did.KindHuman, 42), chainKey(t, did.KindHuman, 43)
	const id = "tenzro-share"
	dir := t.TempDir()
	out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), "testnet", "--validators", "1", "--dir", dir, "--chain-id", id,
		"--base-port", "0", "--block-time", "1s",
		"--alloc", flooder.DID.String()+"=100000000000000000000", "--alloc", honest.DID.String()+"=10000000000000000000").CombinedOutput()
	if err != nil {
		t.Fatalf("testnet: %v\n%s", err, out)
	}
	home := filepath.Join(dir, "node0")
	nc, err := chain.LoadNodeConfig(home)
	if err != nil {
		t.Fatal(err)
	}
	n := &chainNode{name: id, home: home, extra: []string{"--enclave", "none", "--mempool-sender-limit", strconv.Itoa(limit)}}
	n.connect(t, nc.RPCAddr)
	n.start(t)
	t.Cleanup(n.kill)
	waitHeight(t, n, 1, 2*time.Minute)
	start := n.height(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		mu        sync.Mutex
		flood     = map[[32]byte]bool{} // every flooder transaction sent
		codes     = map[uint32]int{}
		busyLog   string
		sawBusy   = make(chan struct{})
		busyOnce  sync.Once
		floodDone = make(chan struct{})
	)
	fctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(floodDone)
		for nonce := uint64(1); fctx.Err() == nil; nonce++ {
			tx, err := chain.TransferTx(id, flooder, bob.DID.String(), "1", nonce)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			flood[sha256.Sum256(tx)] = true
			mu.Unlock()
			res, err := n.rpc.BroadcastTxSync(fctx, tx)
			if err != nil {
				continue // stopping, or a transport error: the next one
			}
			mu.Lock()
			codes[res.Code]++
			if res.Code == chain.CodeSenderBusy {
				busyLog = res.Log
				busyOnce.Do(func() { close(sawBusy) })
			}
			mu.Unlock()
		}
	}()
	select {
	case <-sawBusy:
	case <-time.After(2 * time.Minute):
		stop()
		<-floodDone
		t.Fatalf("the flooder was never refused its share in 2 minutes: codes %v", codes)
	}
	// While the flooder is capped (it keeps sending), another sender gets in.
	tx, err := chain.TransferTx(id, honest, bob.DID.String(), "1000", 1)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
	res, err := n.rpc.BroadcastTxCommit(cctx, tx)
	ccancel()
	if err != nil {
		t.Fatalf("honest transfer during the flood: %v", err)
	}
	if res.CheckTx.Code != chain.CodeOK || res.TxResult.Code != chain.CodeOK {
		t.Fatalf("honest transfer during the flood: check %d %q, block %d %q", res.CheckTx.Code, res.CheckTx.Log, res.TxResult.Code, res.TxResult.Log)
	}
	stop()
	<-floodDone
	if !strings.Contains(busyLog, flooder.DID.String()) || !strings.Contains(busyLog, "at most 4 per sender") || !strings.Contains(busyLog, "--mempool-sender-limit") {
		t.Fatalf("the refusal does not name the sender and its share: %q", busyLog)
	}
	end := n.height(t)
	most, total := 0, 0
	for h := start; h <= end; h++ {
		hh := h
		b, err := n.rpc.Block(ctx, &hh)
		if err != nil {
			t.Fatalf("block %d: %v", h, err)
		}
		k := 0
		for _, btx := range b.Block.Data.Txs {
			if flood[sha256.Sum256(btx)] {
				k++
			}
		}
		most, total = max(most, k), total+k
		if k > limit {
			t.Fatalf("block %d holds %d of the flooder's transactions, over its mempool share of %d", h, k, limit)
		}
	}
	t.Logf("flood: %d sent, codes %v; blocks %d..%d hold %d of them (at most %d in one); the honest transfer committed at height %d",
		len(flood), codes, start, end, total, most, res.Height)
}
