package syncer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/crypto/ed25519"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// Node-level challenge tests: syncer nodes (one of them faulty), a watcher
// and four validator nodes over one chain.Manual, each node with its own
// blob store, fetching what it lacks from the syncer nodes by hash. The
// nodes re-execute with the native engine — the code the syncer runs.

type valSigner struct{ priv ed25519.PrivKey }

func (v valSigner) Address() []byte                 { return v.priv.PubKey().Address() }
func (v valSigner) Sign(msg []byte) ([]byte, error) { return v.priv.Sign(msg) }

// peerFetcher fetches blobs from other nodes' stores (the network).
type peerFetcher struct{ peers *[]syncer.Blobs }

func (f peerFetcher) Fetch(ctx context.Context, h wire.Hash, _ uint64, _ string) ([]byte, error) {
	for _, b := range *f.peers {
		if v, err := b.Get(ctx, h); err == nil {
			return v, nil
		}
	}
	return nil, fmt.Errorf("no peer has %s", h)
}

type cnet struct {
	t        *testing.T
	ctx      context.Context
	now      time.Time
	chain    *chain.Manual
	syncers  []*syncer.Node // by candidate key index
	faults   []*syncer.Fault
	cands    []*did.Key
	vals     []*syncer.Node // validators; vals[0] also watches
	watcher  *did.Key
	sponsor  *did.Key
	tr       []*did.Key
	peers    []syncer.Blobs // the syncer nodes' stores, as peers serve them
	task     string
	nonce    uint64
	ticketOf map[string]int // DID → index in cands
	zeros    map[int]bool   // trainers that submit all-zero gradients
}

func newCNet(t *testing.T, extra string) *cnet { return newCNetWith(t, cnetOpts{extra: extra}) }

// cnetOpts vary the network of newCNetWith: extra spec members, the
// architecture member, dataset_hash, initial weights, blobs every syncer
// holds before the posting, and an engine per node (default: the native
// engine for all).
type cnetOpts struct {
	extra, arch, datasetHash string
	weights                  []byte
	blobs                    [][]byte
	engine                   func(node int) syncer.Engine
}

func newCNetWith(t *testing.T, o cnetOpts) *cnet {
	extra := o.extra
	ctx := context.Background()
	c := &cnet{t: t, ctx: ctx, now: time.Unix(1761350400, 0), task: "ch-node", sponsor: key(t, did.KindHuman, 200), watcher: key(t, did.KindHuman, 201),
		cands: []*did.Key{key(t, did.KindMachine, 240), key(t, did.KindMachine, 241)}, nonce: 1000}
	for i := 0; i < 2; i++ {
		c.tr = append(c.tr, key(t, did.KindMachine, byte(i+1)))
	}
	kv, _ := store.OpenInMemory()
	var ups []abci.ValidatorUpdate
	var vkeys []valSigner
	for i := 0; i < 4; i++ {
		v := valSigner{ed25519.GenPrivKeyFromSecret([]byte(fmt.Sprintf("val-%d", i)))}
		vkeys = append(vkeys, v)
		ups = append(ups, chain.ValidatorUpdate(v.priv.PubKey().Bytes(), 10))
	}
	g := &chain.GenesisState{Accounts: []chain.GenesisAccount{}, Faucet: true, Params: freeParams(),
		Candidates: []chain.GenesisAccount{{DID: c.cands[0].DID.String(), Balance: "1000000000000000000"}, {DID: c.cands[1].DID.String(), Balance: "1000000000000000000"}}}
	mc, err := chain.NewManual(ctx, kv, chain.ManualOptions{Genesis: g, Validators: ups, Clock: func() time.Time { return c.now }, App: chain.AppOptions{Log: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	c.chain = mc
	var eng syncer.Engine = syncer.NewNativeEngine()
	clock := func() time.Time { return c.now }
	nodes := 0
	newNode := func(signer *did.Key, cfg syncer.Config) *syncer.Node {
		local, _ := store.OpenInMemory()
		e := eng
		if o.engine != nil {
			e = o.engine(nodes)
		}
		nodes++
		cfg.Chain, cfg.Local, cfg.Engine, cfg.Signer, cfg.Clock, cfg.Logger = mc, local, e, syncer.KeySigner{Key: signer}, clock, quiet
		if cfg.Blobs == nil {
			cfg.Blobs = syncer.KVBlobs{KV: local}
		}
		cfg.Fetcher = peerFetcher{&c.peers}
		n, err := syncer.NewNode(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, k := range c.cands {
		f := &syncer.Fault{}
		local, _ := store.OpenInMemory()
		b := syncer.WithholdingBlobs{Blobs: syncer.KVBlobs{KV: local}, Fault: f}
		for _, blob := range o.blobs {
			if err := b.Put(ctx, wire.ContentHash(blob), blob); err != nil {
				t.Fatal(err)
			}
		}
		c.peers = append(c.peers, b)
		c.faults = append(c.faults, f)
		c.syncers = append(c.syncers, newNode(k, syncer.Config{Blobs: b, Fault: f}))
	}
	for i, v := range vkeys {
		cfg := syncer.Config{Validator: v}
		signer := key(t, did.KindMachine, byte(220+i))
		if i == 0 {
			cfg.Watch, signer = true, c.watcher
		}
		c.vals = append(c.vals, newNode(signer, cfg))
	}
	c.faucet(c.sponsor.DID.String(), "2000000000000000000000")
	c.faucet(c.watcher.DID.String(), "1000")
	for _, k := range c.tr {
		c.faucet(k.DID.String(), "200000000000000000000")
	}
	arch, dh, weights := o.arch, o.datasetHash, o.weights
	if arch == "" {
		arch = `{"family":"timesfm","param_count":32,"modality":"Timeseries","fragment_count":2,
 "dtype":"f32","metadata":{"context_len":32,"horizon":8}}`
	}
	if dh == "" {
		dh = "0xabab"
	}
	if weights == nil {
		weights = initWeights(t, 2, 16)
	}
	raw := []byte(fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":%s,"tier":"Open","aggregation":"Mean",
 "trainer_count":2,"quorum":2,"inner_steps":24,"max_rounds":2,"grace_window_ms":30000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":%q,
 "min_throughput":null,"created_at":1761350400,
 "challenge_window_blocks":12,"vote_window_blocks":10,"challenge_bond":"100","syncer_slash":"5000bps"%s}`, c.task, c.sponsor.DID.String(), arch, dh, extra))
	canon, err := jcsOf(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := &wire.PostTaskParams{Spec: raw, InitWeights: weights}
	p.Nonce, p.ChainID = c.n(), chain.ManualChainID
	p.Signature = c.sponsor.Sign(p.Preimage(c.sponsor.DID.String(), wire.SpecHash(canon), wire.ContentHash(weights)))
	if _, err := c.syncers[0].PostTask(ctx, p); err != nil {
		t.Fatal(err)
	}
	c.tickSyncers() // election proofs
	for i, k := range c.tr {
		e := &wire.EnrollParams{TaskID: c.task, TrainerDID: k.DID.String(), Stake: "100000000000000000000"}
		e.Nonce, e.ChainID = c.n(), chain.ManualChainID
		e.Signature = c.tr[i].Sign(e.Preimage())
		if _, err := c.syncers[0].Enroll(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if r := c.run(); r.Status != wire.StatusRunning {
		t.Fatalf("run %s", r.Status)
	}
	c.ticketOf = map[string]int{}
	for i, k := range c.cands {
		c.ticketOf[k.DID.String()] = i
	}
	return c
}

func (c *cnet) n() uint64 { c.nonce++; return c.nonce }

func (c *cnet) faucet(d, amt string) {
	if _, err := c.syncers[0].Faucet(c.ctx, wire.FaucetParams{DID: d, Amount: amt}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cnet) run() *wire.RunView {
	v, err := c.syncers[0].GetRun(c.ctx, c.task)
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// syncerNode is the node of the run's current syncer.
func (c *cnet) syncerIndex() int { return c.ticketOf[c.run().Syncer] }

// block moves the clock 3 s and makes an empty block; the ledger conserves.
func (c *cnet) block() {
	c.t.Helper()
	c.now = c.now.Add(3 * time.Second)
	if _, err := c.chain.Block(c.ctx); err != nil {
		c.t.Fatal(err)
	}
	var total *big.Int
	_ = c.chain.View(c.ctx, func(v machine.View) error {
		total, _, _ = machine.LedgerTotal(c.ctx, v.KV)
		return nil
	})
	if total.Sign() != 0 {
		c.t.Fatalf("ledger total %s", total)
	}
}

func (c *cnet) tickSyncers() {
	c.t.Helper()
	for _, n := range c.syncers {
		if err := n.Tick(c.ctx); err != nil {
			c.t.Fatal(err)
		}
	}
}

// tickVals runs every validator node once (the first also watches).
func (c *cnet) tickVals() {
	c.t.Helper()
	for _, n := range c.vals {
		if err := n.Tick(c.ctx); err != nil {
			c.t.Fatal(err)
		}
	}
}

// submitRound has both trainers submit every fragment of the current
// round to the current syncer's node.
func (c *cnet) submitRound() {
	c.t.Helper()
	r := c.run()
	n := c.syncers[c.syncerIndex()]
	for f := 0; f < len(r.Fragments); f++ {
		w, err := n.GetWeights(c.ctx, wire.GetWeightsParams{TaskID: c.task, FragmentIndex: uint64(f)})
		if err != nil {
			c.t.Fatal(err)
		}
		for i, k := range c.tr {
			scale := float32(i+1) + float32(r.Round)
			if c.zeros[i] {
				scale = 0
			}
			payload := bindTo(c.t, scaledPayload(c.t, w.Payload, scale), c.task, k.DID.String(), r.Round, uint64(f))
			g := &wire.OuterGradient{ChainID: chain.ManualChainID, TaskID: c.task, TrainerDID: k.DID.String(), Round: r.Round, FragmentIndex: uint64(f),
				GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
			g.Signature = k.Sign(g.Preimage())
			if _, err := n.Submit(c.ctx, g); err != nil {
				c.t.Fatalf("submit round %d fragment %d trainer %d: %v", r.Round, f, i, err)
			}
		}
	}
}

func (c *cnet) challenges() []wire.ChallengeRecord {
	chs, err := c.vals[0].Challenges(c.ctx, c.task)
	if err != nil {
		c.t.Fatal(err)
	}
	return chs
}

func (c *cnet) stake(i int) *big.Int {
	var v *big.Int
	_ = c.chain.View(c.ctx, func(x machine.View) error {
		var err error
		v, err = machine.AccountBalance(c.ctx, x.KV, "syncer-stake:"+c.cands[i].DID.String())
		return err
	})
	return v
}

// untilSealed makes blocks (ticking every node) until the run seals and its
// receipt is signed.
func (c *cnet) untilSealed() *wire.Receipt {
	c.t.Helper()
	for i := 0; i < 60; i++ {
		r := c.run()
		if r.Status == wire.StatusSealed {
			c.tickSyncers()
			rc, err := c.syncers[0].GetReceipt(c.ctx, c.task)
			if err == nil {
				return rc
			}
		} else if r.Status == wire.StatusRunning && !c.allClosed(r) && c.pendingRecords(r) {
			c.tickSyncers()
		} else if r.Status == wire.StatusRunning && !c.allClosed(r) {
			c.submitRound()
			c.tickSyncers()
		}
		c.tickVals()
		c.block()
	}
	c.t.Fatalf("run not sealed: %+v", c.run())
	return nil
}

func (c *cnet) allClosed(r *wire.RunView) bool {
	for _, f := range r.Fragments {
		if !f.Committed {
			return false
		}
	}
	return true
}

func (c *cnet) pendingRecords(r *wire.RunView) bool {
	for _, f := range r.Fragments {
		if !f.Committed && f.Accepted > 0 {
			return true
		}
	}
	return false
}

// TestChallengeNodesWrongAggregate: the first syncer commits a wrong
// aggregate for round 0 fragment 0; the watcher re-executes, challenges;
// the validators re-execute and vote; the syncer is slashed, the run rolls
// back, the next syncer re-does the fragment; the run seals with a receipt
// that records the challenge and verifies.
func TestChallengeNodesWrongAggregate(t *testing.T) {
	c := newCNet(t, "")
	bad := c.syncerIndex()
	c.faults[bad].WrongAggregate = &syncer.FaultAt{Round: 0, Fragment: 0}
	c.submitRound()
	c.tickSyncers()
	if r := c.run(); r.Round != 1 {
		t.Fatalf("round %d after the commits, want 1", r.Round)
	}
	stake0 := c.stake(bad)
	// The watcher re-executes both commits: fragment 1 agrees, fragment 0
	// does not: it challenges.
	if err := c.vals[0].Tick(c.ctx); err != nil {
		t.Fatal(err)
	}
	chs := c.challenges()
	if len(chs) != 1 || chs[0].Round != 0 || chs[0].Fragment != 0 || chs[0].Challenger != c.watcher.DID.String() || chs[0].Syncer != c.cands[bad].DID.String() {
		t.Fatalf("challenges after the watcher: %+v", chs)
	}
	if v := c.run(); v.OpenChallenges != 1 || v.ChallengeWindowBlocks != 12 || v.FinalRounds != 0 {
		t.Fatalf("get-run: window %d, final rounds %d, open challenges %d", v.ChallengeWindowBlocks, v.FinalRounds, v.OpenChallenges)
	}
	re, err := c.vals[1].Reexecute(c.ctx, c.task, 0, 0)
	if err != nil || re.Agrees() || re.Result != chs[0].Claimed {
		t.Fatalf("validator's re-execution %+v (%v), claimed %s", re, err, chs[0].Claimed)
	}
	// A client re-executes it from the state slice a node gives (the
	// bytes fetched by hash): the same result.
	st, err := c.vals[2].FragmentState(c.ctx, &wire.ReplayFragmentParams{TaskID: c.task, Round: 0, Fragment: 0})
	if err != nil {
		t.Fatal(err)
	}
	scratch, _ := store.OpenInMemory()
	if err := syncer.LoadState(c.ctx, scratch, st.Entries); err != nil {
		t.Fatal(err)
	}
	local, _ := store.OpenInMemory()
	client, err := syncer.NewNode(c.ctx, syncer.Config{Chain: syncer.StaticChain{KV: scratch, Block: machine.Block{Height: st.Height}}, Blobs: syncer.KVBlobs{KV: local},
		Local: local, Engine: syncer.NewNativeEngine(), Signer: syncer.KeySigner{Key: key(t, did.KindMachine, 230)}, Fetcher: peerFetcher{&c.peers}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if cre, err := client.Reexecute(c.ctx, c.task, 0, 0); err != nil || cre.Result != re.Result {
		t.Fatalf("client re-execution from the state slice: %+v %v, want %s", cre, err, re.Result)
	}
	c.tickVals()
	ch := c.challenges()[0]
	if ch.Outcome != wire.ChallengeUpheld || len(ch.Votes) < 3 {
		t.Fatalf("after the votes: %s with %d votes", ch.Outcome, len(ch.Votes))
	}
	if got := c.stake(bad); new(big.Int).Sub(stake0, got).String() != ch.SyncerSlashed || ch.SyncerSlashed == "0" {
		t.Fatalf("syncer stake %s → %s, slashed %s", stake0, got, ch.SyncerSlashed)
	}
	if r := c.run(); r.Round != 0 || c.ticketOf[r.Syncer] == bad {
		t.Fatalf("after the rollback: round %d, syncer %s (the slashed one is %s)", r.Round, r.Syncer, c.cands[bad].DID)
	}
	// The next syncer re-does fragment 0 at once (its records are back).
	c.tickSyncers()
	if r := c.run(); r.Round != 1 {
		t.Fatalf("round %d after the re-commit, want 1", r.Round)
	}
	rc := c.untilSealed()
	if v := c.run(); v.FinalRounds != 2 || v.OpenChallenges != 0 {
		t.Fatalf("sealed run: final rounds %d, open challenges %d", v.FinalRounds, v.OpenChallenges)
	}
	raw, _ := json.Marshal(rc)
	if err := audit.CheckReceipt(raw, nil); err != nil {
		t.Fatalf("receipt: %v", err)
	}
	if rc.ChallengeCount != 1 || rc.SyncerDID == c.cands[bad].DID.String() {
		t.Fatalf("receipt: %d challenges, signed by %s", rc.ChallengeCount, rc.SyncerDID)
	}
	// Replay skips nothing: the final transcript reproduces the model.
	var nodes []*syncer.Node
	nodes = append(append(nodes, c.syncers...), c.vals...)
	src := anySource(nodes)
	blob, err := src.GetPayload(c.ctx, rc.TranscriptHash)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := syncer.Replay(c.ctx, raw, blob, src, syncer.NewNativeEngine(), nil)
	if err != nil || !rep.Match || rep.Rounds != 2 {
		t.Fatalf("replay of the receipt: %+v %v", rep, err)
	}
	// The transcript is the final one: round 0 fragment 0 by the next
	// syncer (the slashed one's fragment 1 commit was right and stays).
	tr, err := c.syncers[0].GetTranscript(c.ctx, c.task)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr[0].Fragments[0].Syncer; got == c.cands[bad].DID.String() {
		t.Fatalf("round 0 fragment 0 in the transcript is the slashed syncer's commit")
	}
}

// TestChallengeNodesFrivolous: a challenge with a made-up hash loses its
// bond: every validator's re-execution agrees with the commit.
func TestChallengeNodesFrivolous(t *testing.T) {
	c := newCNet(t, "")
	c.submitRound()
	c.tickSyncers()
	chal := key(t, did.KindHuman, 202)
	c.faucet(chal.DID.String(), "1000")
	p := wire.ChallengeTx{TaskID: c.task, Round: 0, Fragment: 1, ChallengerDID: chal.DID.String(), ResultHash: wire.ContentHash([]byte("made up")), Bond: "100",
		Signed: wire.Signed{ChainID: chain.ManualChainID, Nonce: c.n()}}
	p.Signature = chal.Sign(p.Preimage())
	if _, err := c.vals[2].SubmitChallenge(c.ctx, &p); err != nil {
		t.Fatal(err)
	}
	c.tickVals()
	ch := c.challenges()[0]
	if ch.Outcome != wire.ChallengeRejected || ch.ToEscrow != "100" {
		t.Fatalf("frivolous challenge: %+v", ch)
	}
	b, _ := c.syncers[0].Balance(c.ctx, chal.DID.String())
	if b.Balance != "900" {
		t.Fatalf("challenger balance %s, want 900", b.Balance)
	}
	// Late: past the window the same challenge is refused.
	for i := 0; i < 13; i++ {
		c.block()
	}
	p.Fragment, p.Nonce, p.ChainID = 0, c.n(), chain.ManualChainID
	p.Signature = chal.Sign(p.Preimage())
	if _, err := c.vals[2].SubmitChallenge(c.ctx, &p); err == nil || !strings.Contains(err.Error(), "after the challenge window") {
		t.Fatalf("late challenge: %v", err)
	}
}

// TestChallengeNodesWithholding: the syncer withholds the payloads of a
// fragment it committed; nobody can re-execute it; the watcher challenges
// it as unavailable once half its window passed, the validators vote
// "unavailable" once half the vote window passed; the syncer loses.
func TestChallengeNodesWithholding(t *testing.T) {
	c := newCNet(t, "")
	bad := c.syncerIndex()
	c.faults[bad].Withhold = &syncer.FaultAt{Round: 0, Fragment: 1}
	c.submitRound()
	c.tickSyncers()
	var ch wire.ChallengeRecord
	for i := 0; i < 30; i++ {
		c.tickVals()
		if chs := c.challenges(); len(chs) == 1 && chs[0].Outcome != wire.ChallengeOpen {
			ch = chs[0]
			break
		}
		c.block()
	}
	if ch.Outcome != wire.ChallengeUpheld || !ch.Unavailable || !ch.Claimed.IsZero() || ch.Syncer != c.cands[bad].DID.String() {
		t.Fatalf("withholding: %+v", ch)
	}
	if r := c.run(); r.Round != 0 || c.ticketOf[r.Syncer] == bad {
		t.Fatalf("after the rollback: round %d, syncer %s", r.Round, r.Syncer)
	}
	// The next syncer (slot 0 of the live entrants) waits half its slot for
	// the withheld payloads, then rejects them: fragment 1 is no_quorum.
	c.tickSyncers()
	if r := c.run(); r.Round != 0 {
		t.Fatalf("round %d: the next syncer did not wait for the payloads", r.Round)
	}
	c.now = c.now.Add(301 * time.Second) // half of the 600 s default slot
	c.block()
	c.tickSyncers()
	if r := c.run(); r.Round != 1 {
		t.Fatalf("round %d after half the slot, want the fragment re-done (no_quorum) and round 1", r.Round)
	}
	tr, err := c.syncers[0].GetTranscript(c.ctx, c.task)
	if err != nil || len(tr) != 1 || tr[0].Fragments[1].Status != wire.FragNoQuorum {
		t.Fatalf("transcript after the re-do: %v %+v", err, tr)
	}
}

// scaledPayload is a gradient shaped like the fragment's weights.
func scaledPayload(t *testing.T, weights []byte, scale float32) []byte {
	ts, _, err := safetensors.Parse(weights, safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	var out []safetensors.Tensor
	for _, x := range ts {
		v, _ := safetensors.F32Values(x)
		for j := range v {
			v[j] = scale * 0.001 * float32((j+int(scale))%7) // its own direction per scale: no copies
		}
		out = append(out, safetensors.FromF32(x.Name, x.Shape, v))
	}
	b, err := safetensors.Encode(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// anySource serves a payload from the first node that has it.
type anySource []*syncer.Node

func (s anySource) GetPayload(ctx context.Context, h wire.Hash) ([]byte, error) {
	var last error
	for _, n := range s {
		b, err := n.GetPayload(ctx, h)
		if err == nil {
			return b, nil
		}
		last = err
	}
	return nil, last
}
