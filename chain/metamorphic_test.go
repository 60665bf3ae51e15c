package chain

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestMetamorphic applies seeded random sequences of valid and invalid
// transactions (every transaction type, stale nonces, tampered and garbage
// bytes, clock jumps past deadlines) to two applications on disk, one of
// which restarts at random (after a Commit, or after FinalizeBlock and before
// its Commit, as a crash would). After every block both must give the same
// result codes and app hash, and every ledger's balances must sum to zero.
// TENZRO_META_SEED=n replays one seed; a failure names its seed.
func TestMetamorphic(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if s := os.Getenv("TENZRO_META_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TENZRO_META_SEED: %v", err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			trace := metamorphic(t, seed, 80)
			if want, ok := metaTraces[seed]; ok && trace != want {
				t.Errorf("seed %d: trace digest %s, want %s: a transaction result, commit, receipt or weights hash changed", seed, trace, want)
			}
		})
	}
}

// metaTraces pin each seed's trace digest (metaTrace): every transaction's
// result code and bytes, and at the end every run's round commits, sealed
// state, receipt as the chain builds it and fragment weights hashes. None
// of it depends on how the state is laid out in the tree (the app hash
// does), so a layout change must leave them equal: these were computed
// before runs were stored by key (commit 9c48624) and hold after it.
var metaTraces = map[uint64]string{
	1: "975e685e1c9b2ce8def9ce29deb09f1a830c7cf677c998dd4440a4d38af4520a",
	2: "c3f7716f2ec53fef6d929cf41238ecb5f1ce781a8d29c8bdce31da03b03d01d3",
	3: "34f7fd8c9ce31b5478931737d3bad0e0fd7b3ba77920cf0b241afa3771f16ccc",
}

// metaTrace hashes what the chain answered and built over a sequence.
type metaTrace struct{ h [32]byte }

func (m *metaTrace) add(parts ...[]byte) {
	d := sha256.New()
	d.Write(m.h[:])
	for _, p := range parts {
		d.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		d.Write(p)
	}
	copy(m.h[:], d.Sum(nil))
}

// end adds every run's commits, seal, receipt and weights hashes.
func (m *metaTrace) end(t *testing.T, h *harness, tasks []string) string {
	for _, task := range tasks {
		run := runOf(h, task)
		if run == nil {
			m.add([]byte(task), []byte("absent"))
			continue
		}
		m.add([]byte(task), []byte(run.Status), binary.BigEndian.AppendUint64(nil, run.Round))
		for _, f := range run.Fragments {
			m.add(f.WeightsHash[:])
		}
		for round := uint64(0); round <= run.Round; round++ {
			code, v := h.query(QueryCommit, fmt.Sprintf("%s/%d", task, round))
			m.add(binary.BigEndian.AppendUint32(nil, code), []byte(v))
		}
		for _, p := range []string{QuerySealed, QueryReceipt} {
			code, v := h.query(p, task)
			m.add([]byte(p), binary.BigEndian.AppendUint32(nil, code), []byte(v))
		}
		err := h.app.View(context.Background(), func(v machine.View) error {
			rc, blob, list, err := machine.ChainReceipt(context.Background(), v.KV, task, "did:tenzro:machine:trace", json.RawMessage(`{"engine":"test"}`), nil)
			if err != nil {
				m.add([]byte("no receipt"))
				return nil
			}
			raw, err := json.Marshal(rc)
			if err != nil {
				return err
			}
			m.add(raw, blob, list)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return hex.EncodeToString(m.h[:])
}

// metaWorld is the keys and the runs a random sequence draws from.
type metaWorld struct {
	rng      *rand.Rand
	sponsor  *did.Key
	trainers []*did.Key
	cands    []*did.Key
	others   []*did.Key
	nonce    map[string]uint64
	tasks    []string
	specs    map[string][]byte
	rules    Rules
	posted   int
}

func (w *metaWorld) all() []*did.Key {
	out := append([]*did.Key{w.sponsor}, w.trainers...)
	out = append(out, w.cands...)
	return append(out, w.others...)
}

func (w *metaWorld) pick(ks []*did.Key) *did.Key { return ks[w.rng.IntN(len(ks))] }

// next is key's next nonce; one in ten transactions reuses a stale one.
func (w *metaWorld) next(k *did.Key) uint64 {
	if w.rng.IntN(10) == 0 {
		return 1
	}
	w.nonce[k.DID.String()]++
	return w.nonce[k.DID.String()]
}

func (w *metaWorld) amount() string {
	return []string{"0", "1", "7", "100", "250", "100000000000000000"}[w.rng.IntN(6)]
}

func metamorphic(t *testing.T, seed uint64, blocks int) string {
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("seed %d (replay with TENZRO_META_SEED=%d): %s", seed, seed, fmt.Sprintf(format, a...))
	}
	rng := rand.New(rand.NewPCG(seed, 0x7e2a))
	w := &metaWorld{rng: rng, sponsor: testKey(t, did.KindHuman, 1), nonce: map[string]uint64{}, specs: map[string][]byte{}, rules: meanRules(t)}
	for i := range 4 {
		w.trainers = append(w.trainers, testKey(t, did.KindMachine, byte(20+i)))
	}
	for i := range 3 {
		w.cands = append(w.cands, testKey(t, did.KindMachine, byte(30+i)))
	}
	w.others = []*did.Key{testKey(t, did.KindHuman, 40), testKey(t, did.KindHuman, 41)}
	g := GenesisState{Faucet: rng.IntN(2) == 0, Params: &machine.GenesisParams{UnbondingDelayMs: 30000}}
	if rng.IntN(2) == 0 {
		// Half the seeds run without fees and floors, so the sequences reach
		// deep into runs; the others price every transaction (issue 22).
		g.Params = freeParams(30000)
	}
	if rng.IntN(2) == 0 {
		win := int64(1 + rng.IntN(3))
		g.Params.ChallengeWindowBlocks = &win
	}
	for _, k := range w.all() {
		g.Accounts = append(g.Accounts, GenesisAccount{DID: k.DID.String(), Balance: "100000000000"})
	}
	g.Candidates = []GenesisAccount{{DID: w.cands[0].DID.String(), Balance: "100"}}

	a, b := newHarness(t, t.TempDir()), newHarness(t, t.TempDir())
	if ha, hb := a.genesis(g), b.genesis(g); ha != hb {
		fail("genesis app hash %s vs %s", ha, hb)
	}
	restart := func(crash [][]byte) {
		if b.height == 0 {
			// Before its first commit a restarted app is given InitChain again
			// by CometBFT (Info says height 0); this harness does not replay it.
			return
		}
		if crash != nil {
			b.finalize(crash...) // FinalizeBlock without Commit: lost at restart
		}
		b.close()
		b = &harness{t: t, dir: b.dir, now: b.now, step: b.step}
		b.open()
	}
	accepted, refused := 0, 0
	var trace metaTrace
	for blk := range blocks {
		adv := time.Duration(0)
		switch rng.IntN(8) {
		case 0:
			adv = time.Duration(5+rng.IntN(70)) * time.Second
		case 1:
			adv = 6 * time.Second
		}
		a.now, b.now = a.now.Add(adv), b.now.Add(adv)
		txs := w.block(t, a)
		switch rng.IntN(10) {
		case 0:
			restart(nil)
		case 1:
			restart(txs)
		}
		ra, ha := a.block(txs...)
		rb, hb := b.block(txs...)
		for i := range ra {
			if ra[i].Code == CodeOK {
				accepted++
			} else {
				refused++
			}
			trace.add(binary.BigEndian.AppendUint32(nil, ra[i].Code), ra[i].Data)
			if ra[i].Code != rb[i].Code || string(ra[i].Data) != string(rb[i].Data) {
				fail("block %d tx %d: code %d (%s) vs %d (%s)", a.height, i, ra[i].Code, ra[i].Log, rb[i].Code, rb[i].Log)
			}
		}
		if ha != hb {
			fail("block %d (step %d): app hash %s vs %s", a.height, blk, ha, hb)
		}
		for _, h := range []*harness{a, b} {
			if err := ledgerZero(h); err != nil {
				fail("block %d: %v", h.height, err)
			}
		}
	}
	sealed := 0
	for _, task := range w.tasks {
		if r := runOf(a, task); r != nil && r.Seal != nil {
			sealed++
		}
	}
	t.Logf("seed %d: %d blocks, %d transactions accepted, %d refused, %d of %d runs sealed", seed, blocks, accepted, refused, sealed, len(w.tasks))
	if accepted == 0 || refused == 0 {
		fail("a sequence must mix accepted and refused transactions (%d accepted, %d refused)", accepted, refused)
	}
	digest := trace.end(t, a, w.tasks)
	t.Logf("seed %d: trace digest %s", seed, digest)
	return digest
}

// ledgerZero checks conservation: every ledger account (balances, escrow,
// stakes, challenge escrow, the issuer's negative balance) sums to zero.
func ledgerZero(h *harness) error {
	return h.app.View(context.Background(), func(v machine.View) error {
		total, n, err := machine.LedgerTotal(context.Background(), v.KV)
		if err != nil {
			return err
		}
		if total.Sign() != 0 {
			return fmt.Errorf("the ledger's %d accounts sum to %s, not zero", n, total)
		}
		return nil
	})
}

// runOf reads a run's state from h (nil when it does not exist).
func runOf(h *harness, task string) *testRun {
	code, raw := h.query(QueryRun, task)
	if code != 0 {
		return nil
	}
	var r testRun
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		h.t.Fatal(err)
	}
	return &r
}

// block draws one block's transactions from ref's committed state.
func (w *metaWorld) block(t *testing.T, ref *harness) [][]byte {
	var txs [][]byte
	n := 1 + w.rng.IntN(5)
	for range n {
		if tx := w.tx(t, ref); tx != nil {
			switch w.rng.IntN(25) {
			case 0: // tampered: one byte flipped
				tx = append([]byte{}, tx...)
				tx[w.rng.IntN(len(tx))] ^= 1 << w.rng.IntN(8)
			case 1: // garbage
				tx = make([]byte, 1+w.rng.IntN(64))
				for i := range tx {
					tx[i] = byte(w.rng.IntN(256))
				}
			}
			txs = append(txs, tx)
		}
	}
	return txs
}

func (w *metaWorld) task() (string, bool) {
	if len(w.tasks) == 0 {
		return "", false
	}
	return w.tasks[w.rng.IntN(len(w.tasks))], true
}

// tx draws one transaction (nil: none this time).
func (w *metaWorld) tx(t *testing.T, ref *harness) []byte {
	r := w.rng
	switch r.IntN(14) {
	case 0:
		k := w.pick(w.all())
		return must(TransferTx(ManualChainID, k, w.pick(w.all()).DID.String(), w.amount(), w.next(k)))
	case 1:
		return must(FaucetTx(w.pick(w.all()).DID.String(), w.amount(), r.Uint64()))
	case 2:
		k := w.pick(w.cands)
		return must(RegisterSyncerTx(ManualChainID, k, w.amount(), w.next(k)))
	case 3:
		k := w.pick(w.cands)
		return must(UnbondTx(ManualChainID, k, w.next(k)))
	case 4:
		if len(w.tasks) >= 3+w.posted/8 {
			w.posted++ // few runs at a time, so that some get far
			return nil
		}
		w.posted++
		task := fmt.Sprintf("mt-%d", w.posted)
		m := 1 + r.IntN(3)
		k := 1 + r.IntN(m)
		if r.IntN(8) == 0 {
			k = m + 1 // invalid: a quorum above the trainer count
		}
		f := 1 + r.IntN(2)
		spec := testSpec(task, w.sponsor.DID.String(), m, k, f, 1+r.IntN(2), "")
		w.tasks = append(w.tasks, task)
		w.specs[task] = spec
		var init *wire.InitLayout
		if r.IntN(3) > 0 {
			init = testLayout(f, task)
		}
		tx, err := PostTaskTx(ManualChainID, w.sponsor, spec, init, w.rules, w.next(w.sponsor))
		if err != nil {
			return nil // the builder refuses what the chain would
		}
		return tx
	case 5:
		task, ok := w.task()
		if !ok {
			return nil
		}
		k := w.pick(w.cands)
		return must(ElectionProofTx(ManualChainID, k, task, vrfProof(t, k, task, w.specs[task]), w.next(k)))
	case 6, 7:
		task, ok := w.task()
		if !ok {
			return nil
		}
		k := w.pick(w.trainers)
		return must(EnrollTx(ManualChainID, k, task, []string{"100", "100", "100", "0"}[r.IntN(4)], w.next(k)))
	case 8, 9:
		task, ok := w.task()
		if !ok {
			return nil
		}
		run := runOf(ref, task)
		round := uint64(r.IntN(2))
		if run != nil && r.IntN(4) > 0 {
			round = run.Round
		}
		payload := wire.ContentHash([]byte{byte(r.IntN(3))})
		return must(SubmissionTx(ManualChainID, w.pick(w.trainers), task, round, uint64(r.IntN(2)), payload, 10))
	case 10, 11:
		task, ok := w.task()
		if !ok {
			return nil
		}
		run := runOf(ref, task)
		if run == nil || len(run.Fragments) == 0 || run.Status != wire.StatusRunning {
			return nil
		}
		key := w.pick(w.cands)
		for _, c := range w.cands {
			if c.DID.String() == run.Syncer && r.IntN(4) > 0 {
				key = c
			}
		}
		status := wire.FragAggregated
		if r.IntN(4) == 0 {
			status = wire.FragRuleFailed
		}
		verdict := ""
		if r.IntN(2) == 0 {
			verdict = wire.VerdictEquivocation
		}
		return ref.commit(task, r.IntN(len(run.Fragments)), key, 0, status, verdict, w.next(key))
	case 12:
		task, ok := w.task()
		if !ok {
			return nil
		}
		switch r.IntN(4) {
		case 0:
			return must(CancelRunTx(ManualChainID, w.sponsor, task, w.next(w.sponsor)))
		case 1:
			k := w.pick(w.trainers)
			return must(LeaveTx(ManualChainID, k, task, w.next(k)))
		case 2:
			return must(SetInitWeightsTx(ManualChainID, w.sponsor, task, *testLayout(1+r.IntN(2), task), w.next(w.sponsor)))
		default:
			k := w.pick(w.others)
			run := runOf(ref, task)
			if run == nil {
				return nil
			}
			return must(ChallengeTx(ManualChainID, k, task, run.Round, 0, wire.ContentHash([]byte("other")), w.amount(), w.next(k)))
		}
	default:
		task, ok := w.task()
		if !ok {
			return nil
		}
		k := w.pick(w.cands)
		var rc *wire.Receipt
		err := ref.app.View(context.Background(), func(v machine.View) error {
			var err error
			rc, _, _, err = machine.ChainReceipt(context.Background(), v.KV, task, k.DID.String(), json.RawMessage(`{"engine":"test"}`), nil)
			return err
		})
		if err != nil {
			return nil // not sealed: nothing to sign
		}
		return must(SignReceiptTx(k, rc, nil))
	}
}
