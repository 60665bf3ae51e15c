package chain

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestJoinTimeBench (TENZRO_JOIN_BENCH=<blocks>): builds a one-validator
// chain of that many blocks (1 ms timeout_commit, a transfer
// every 50 blocks, a snapshot every 1000 heights), then, in the same run on
// the same machine, joins it twice with a fresh non-validator node: by
// replaying every block from genesis (block sync), and by CometBFT state
// sync from the newest snapshot (trust from a header verified against the
// genesis validators). Each join ends when the node has committed the
// height the validator had when the join started and its app hash there is
// the validator's. TENZRO_JOIN_RUNS=<runs> first puts that many runs on the
// chain (posted with initial weights, a syncer elected, 4 trainers
// enrolled, a submission record from each for each of 2 fragments), so the
// state joined holds runs, enrolments and records. Not run in CI.
//
//	TENZRO_JOIN_RUNS=50 TENZRO_JOIN_BENCH=20000 go test ./chain -run TestJoinTimeBench -v -timeout 2h
func TestJoinTimeBench(t *testing.T) {
	n, _ := strconv.ParseInt(os.Getenv("TENZRO_JOIN_BENCH"), 10, 64)
	if n <= 0 {
		t.Skip("set TENZRO_JOIN_BENCH=<blocks>")
	}
	ctx := context.Background()
	dir := t.TempDir()
	k := testKey(t, did.KindHuman, 1)
	runs, _ := strconv.Atoi(os.Getenv("TENZRO_JOIN_RUNS"))
	actors := newJoinActors(t)
	nodes, err := WriteTestnet(TestnetOptions{Validators: 1, Dir: dir, ChainID: "joinbench", TimeoutCommit: time.Millisecond,
		Allocs: append(actors.allocs(), GenesisAccount{DID: k.DID.String(), Balance: "1000000000000"}), Params: nil})
	if err != nil {
		t.Fatal(err)
	}
	nc, _ := LoadNodeConfig(nodes[0].Home)
	nc.SnapshotInterval, nc.SnapshotKeep = 1000, 3
	if err := SaveNodeConfig(nodes[0].Home, nc); err != nil {
		t.Fatal(err)
	}
	v, err := Start(ctx, nodes[0].Home, NodeOptions{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if runs > 0 {
		t0 := time.Now()
		records := actors.putRuns(ctx, t, v, "joinbench", runs)
		t.Logf("put %d runs on the chain (%d submission records) in %s", runs, records, time.Since(t0).Round(time.Second))
	}
	start := time.Now()
	nonce := uint64(0)
	other := testKey(t, did.KindHuman, 2).DID.String()
	for {
		h, _ := v.App.LastCommit()
		if h >= n {
			break
		}
		if h/50 > int64(nonce) {
			nonce++
			tx, _ := TransferTx("joinbench", k, other, "1", nonce)
			if p, err := v.Local.Submit(ctx, tx); err == nil {
				go p.Wait(ctx)
			}
		}
		select {
		case <-v.App.Changed():
		case <-time.After(time.Second):
		}
		if h%5000 == 0 && h > 0 {
			t.Logf("built %d blocks in %s", h, time.Since(start).Round(time.Second))
		}
	}
	build := time.Since(start)
	t.Logf("built %d blocks in %s (%.0f blocks/s), %d transfers", n, build.Round(time.Second), float64(n)/build.Seconds(), nonce)
	genRaw, _ := os.ReadFile(filepath.Join(nodes[0].Home, "config", "genesis.json"))
	gen, _ := LoadGenesis(filepath.Join(nodes[0].Home, "config", "genesis.json"))
	cl, _ := NewClient("http://" + nodes[0].RPCAddr)
	rpc := "http://" + nodes[0].RPCAddr
	join := func(name string, stateSync bool) {
		home := filepath.Join(dir, name)
		if _, err := JoinNode(JoinOptions{Home: home, Genesis: genRaw, Peers: []string{nodes[0].NodeID + "@" + nodes[0].P2PAddr}}); err != nil {
			t.Fatal(err)
		}
		target, _ := v.App.LastCommit()
		t0 := time.Now()
		if stateSync {
			th, hash, err := cl.TrustedHeader(ctx, gen, 1)
			if err != nil {
				t.Fatal(err)
			}
			jc, _ := LoadNodeConfig(home)
			jc.StateSync = &StateSyncConfig{RPCServers: []string{rpc, rpc}, TrustHeight: th, TrustHash: hash}
			if err := SaveNodeConfig(home, jc); err != nil {
				t.Fatal(err)
			}
		}
		j, err := Start(ctx, home, NodeOptions{Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
		defer cancel()
		waitFor(wctx, t, j.App, name, func() bool { h, _ := j.App.LastCommit(); return h >= target })
		d := time.Since(t0)
		h, got := j.App.LastCommit()
		want, err := cl.AppHashAfter(ctx, h)
		if err != nil || want != got {
			t.Fatalf("%s: app hash at %d %s, the validator's %s (%v)", name, h, got, want, err)
		}
		du, _ := dirSize(home)
		t.Logf("%s: reached height %d (target %d) in %s, restored from snapshot at %d, app hash %s equal to the validator's; home %d MB",
			name, h, target, d.Round(10*time.Millisecond), j.App.RestoredHeight(), got, du>>20)
		fmt.Printf("JOIN %s blocks=%d seconds=%.2f\n", name, target, d.Seconds())
	}
	join("replay", false)
	join("statesync", true)
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// joinActors are the keys that put runs on the join bench's chain.
type joinActors struct {
	sponsor, cand *did.Key
	trainers      []*did.Key
	nonces        map[*did.Key]uint64
}

func newJoinActors(t *testing.T) *joinActors {
	a := &joinActors{sponsor: testKey(t, did.KindHuman, 20), cand: testKey(t, did.KindMachine, 21), nonces: map[*did.Key]uint64{}}
	for i := 0; i < 4; i++ {
		a.trainers = append(a.trainers, testKey(t, did.KindMachine, byte(22+i)))
	}
	return a
}

func (a *joinActors) allocs() []GenesisAccount {
	const lots = "1000000000000000000000000000"
	out := []GenesisAccount{{DID: a.sponsor.DID.String(), Balance: lots}, {DID: a.cand.DID.String(), Balance: lots}}
	for _, k := range a.trainers {
		out = append(out, GenesisAccount{DID: k.DID.String(), Balance: lots})
	}
	return out
}

func (a *joinActors) next(k *did.Key) uint64 { a.nonces[k]++; return a.nonces[k] }

// send submits one transaction and waits until its block result is success.
// (Wait answers a refusal in the block as an error).
func (a *joinActors) send(ctx context.Context, t *testing.T, v *Node, what string, tx []byte) {
	t.Helper()
	p, err := v.Local.Submit(ctx, tx)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// putRuns posts runs runs of 2 fragments with 4 trainers (M = K = 4), each
// with an elected syncer, its trainers enrolled and a record from every
// trainer for every fragment of round 0, and returns the records committed.
func (a *joinActors) putRuns(ctx context.Context, t *testing.T, v *Node, chainID string, runs int) int {
	t.Helper()
	rules := meanRules(t)
	a.send(ctx, t, v, "register the syncer", must(RegisterSyncerTx(chainID, a.cand, "1000000000000000000", a.next(a.cand))))
	records := 0
	for r := 0; r < runs; r++ {
		task := fmt.Sprintf("join-run-%d", r)
		spec := bytes.Replace(testSpec(task, a.sponsor.DID.String(), len(a.trainers), len(a.trainers), 2, 2, ""),
			[]byte(`"reward_pool":"1000"`), []byte(`"reward_pool":"1000000000000000000000"`), 1)
		a.send(ctx, t, v, "post "+task, must(PostTaskTx(chainID, a.sponsor, spec, testLayout(2, task), rules, a.next(a.sponsor))))
		a.send(ctx, t, v, "proof "+task, must(ElectionProofTx(chainID, a.cand, task, vrfProof(t, a.cand, task, spec), a.next(a.cand))))
		for _, k := range a.trainers {
			a.send(ctx, t, v, "enrol in "+task, must(EnrollTx(chainID, k, task, "100000000000000000", a.next(k))))
		}
		for f := uint64(0); f < 2; f++ {
			for i, k := range a.trainers {
				h := wire.ContentHash([]byte(fmt.Sprintf("%s-%d-%d", task, f, i)))
				a.send(ctx, t, v, "record in "+task, must(SubmissionTx(chainID, k, task, 0, f, h, 10)))
				records++
			}
		}
	}
	return records
}
