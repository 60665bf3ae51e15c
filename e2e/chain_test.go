package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	rpchttp "github.com/cometbft/cometbft/rpc/client/http"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// chainNode is one validator process.
type chainNode struct {
	home string
	rpc  *rpchttp.HTTP
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

func (n *chainNode) start(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(n.home, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	n.log = f
	n.cmd = exec.Command(filepath.Join(binDir, "tenzro-node"), "--home", n.home)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(n.cmd, n.done)
}

// kill sends SIGKILL and waits for the process to be gone.
func (n *chainNode) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.done
	n.log.Close()
	n.cmd = nil
}

func (n *chainNode) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.home, "node.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// waitHeight polls the node's RPC until its app has committed height h.
func waitHeight(t *testing.T, n *chainNode, h int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := n.rpc.ABCIInfo(ctx)
		cancel()
		if err == nil && info.Response.LastBlockHeight >= h {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach height %d within %s (last error %v)\n%s", n.home, h, within, err, n.logTail())
		}
		select {
		case <-n.done:
			t.Fatalf("%s exited\n%s", n.home, n.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func broadcast(t *testing.T, n *chainNode, tx []byte) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := n.rpc.BroadcastTxCommit(ctx, tx)
	if err != nil {
		t.Fatalf("broadcast via %s: %v", n.home, err)
	}
	if res.CheckTx.Code != 0 || res.TxResult.Code != 0 {
		t.Fatalf("tx refused: check %d %q, deliver %d %q", res.CheckTx.Code, res.CheckTx.Log, res.TxResult.Code, res.TxResult.Log)
	}
	return res.Height
}

func query(t *testing.T, n *chainNode, path, arg string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.rpc.ABCIQuery(ctx, path, []byte(arg))
	if err != nil || res.Response.Code != 0 {
		t.Fatalf("query %s %s on %s: %v %s", path, arg, n.home, err, res.Response.Log)
	}
	return string(res.Response.Value), res.Response.Height
}

// appHashAt is the app hash a node's block store holds for the state after
// height h (it is in the header of block h+1, which the node accepted only
// because its own application computed the same).
func appHashAt(t *testing.T, n *chainNode, h int64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := h + 1
	b, err := n.rpc.Block(ctx, &next)
	if err != nil {
		t.Fatalf("block %d on %s: %v", next, n.home, err)
	}
	return b.Block.AppHash.String()
}

func chainKey(t *testing.T, kind string, n byte) *did.Key {
	seed := make([]byte, 32)
	seed[0], seed[1] = n, 0xc4
	k, err := did.FromSeed(kind, seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestChainFourValidators starts 4 validator processes on loopback (real
// TCP, free ports, temp dirs) from `tenzro-node testnet`, sends transfers,
// a posting, an enrolment and a submission record through node 0, reads the
// same balances and app hashes from all four, kills node 3 with SIGKILL,
// keeps committing with three, restarts node 3 and sees it catch up.
func TestChainFourValidators(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process chain test")
	}
	t0 := time.Now()
	build(t)
	t.Logf("binaries ready after %s", time.Since(t0).Round(time.Millisecond))
	sponsor, trainer, other := chainKey(t, did.KindHuman, 1), chainKey(t, did.KindMachine, 2), chainKey(t, did.KindHuman, 3)
	dir := t.TempDir()
	out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), "testnet", "--validators", "4", "--dir", dir,
		"--base-port", "0", "--block-time", "200ms",
		"--alloc", sponsor.DID.String()+"=10000", "--alloc", trainer.DID.String()+"=500").CombinedOutput()
	if err != nil {
		t.Fatalf("testnet: %v\n%s", err, out)
	}
	nodes := make([]*chainNode, 4)
	for i := range nodes {
		home := filepath.Join(dir, fmt.Sprintf("node%d", i))
		nc, err := chain.LoadNodeConfig(home)
		if err != nil {
			t.Fatal(err)
		}
		c, err := rpchttp.New("http://"+nc.RPCAddr, "/websocket")
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &chainNode{home: home, rpc: c}
		nodes[i].start(t)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	const within = 90 * time.Second
	for _, n := range nodes {
		waitHeight(t, n, 1, within)
	}
	t.Logf("4 validators committing after %s", time.Since(t0).Round(time.Millisecond))

	spec := []byte(fmt.Sprintf(`{"task_id":"chain-run","sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":32,"modality":"Timeseries","fragment_count":2,"dtype":"bf16"},
 "tier":"Open","aggregation":"Mean","trainer_count":1,"quorum":1,"inner_steps":4,"max_rounds":1,"grace_window_ms":0,
 "reward_pool":"1000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab","min_throughput":null,"created_at":1761350400}`, sponsor.DID))
	tx := func(b []byte, err error) []byte {
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	broadcast(t, nodes[0], tx(chain.TransferTx(sponsor, other.DID.String(), "250", 1)))
	broadcast(t, nodes[0], tx(chain.PostTaskTx(sponsor, spec, wire.Hash{}, 2)))
	broadcast(t, nodes[0], tx(chain.EnrollTx(trainer, "chain-run", "100", 1)))
	h := broadcast(t, nodes[0], tx(chain.SubmissionTx(trainer, "chain-run", 0, 1, wire.SumBytes([]byte("payload")), 4096)))

	want := map[*did.Key]string{sponsor: "8750", trainer: "400", other: "250"}
	check := func(ns []*chainNode, h int64) {
		t.Helper()
		for _, n := range ns {
			waitHeight(t, n, h+1, within)
		}
		hash0 := appHashAt(t, ns[0], h)
		for _, n := range ns {
			if got := appHashAt(t, n, h); got != hash0 {
				t.Fatalf("app hash after height %d: %s on %s, %s on %s", h, got, n.home, hash0, ns[0].home)
			}
			for k, v := range want {
				if got, _ := query(t, n, chain.QueryBalance, k.DID.String()); got != v {
					t.Fatalf("%s: balance of %s is %s, want %s", n.home, k.DID, got, v)
				}
			}
			run, _ := query(t, n, chain.QueryRun, "chain-run")
			if run0, _ := query(t, ns[0], chain.QueryRun, "chain-run"); run != run0 {
				t.Fatalf("run differs between %s and %s", n.home, ns[0].home)
			}
		}
	}
	check(nodes, h)
	t.Logf("4 transactions committed and read back from 4 nodes after %s", time.Since(t0).Round(time.Millisecond))

	// kill -9 one validator: the other three (30 of 40 voting power) go on.
	nodes[3].kill()
	h = broadcast(t, nodes[1], tx(chain.TransferTx(sponsor, other.DID.String(), "50", 3)))
	want[sponsor], want[other] = "8700", "300"
	check(nodes[:3], h)
	t.Logf("3 of 4 committed after %s", time.Since(t0).Round(time.Millisecond))
	// Restart it: it replays what it missed from its peers and agrees.
	nodes[3].start(t)
	check(nodes, h)
	t.Logf("restarted validator caught up after %s", time.Since(t0).Round(time.Millisecond))
}
