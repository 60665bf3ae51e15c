package chain

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/cometbft/cometbft/crypto/ed25519"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Machine-level tests of challenges (docs/protocol/challenges.md): the
// window, the bond, votes counted by power, duplicates, unknown validators,
// double votes, the decisions, the rollback's state and conservation of the
// ledger after every block.

// valKey is a validator's consensus key.
type valKey struct{ priv ed25519.PrivKey }

func (v valKey) Address() []byte                 { return v.priv.PubKey().Address() }
func (v valKey) Sign(msg []byte) ([]byte, error) { return v.priv.Sign(msg) }

// cworld is a run with a challenge window on a chain of four validators of
// powers 40, 30, 20, 10: two syncer candidates, two trainers, a challenger.
type cworld struct {
	t                            *testing.T
	h                            *harness
	twin                         *harness // an on-disk app fed the same blocks: same app hashes
	sponsor, t1, t2, chal, chal2 *did.Key
	cands                        []*did.Key
	vals                         []valKey
	task                         string
	spec                         []byte
	nonce                        uint64
	syncers                      []*did.Key // the succession's keys, ticket order
}

const (
	cBond     = "100"
	cCandFund = "1000"
)

func newCWorld(t *testing.T, rounds int, extra string) *cworld {
	return newCWorldSpec(t, rounds, `,"challenge_window_blocks":5,"vote_window_blocks":20,"challenge_bond":"`+cBond+`","syncer_slash":"5000bps"`+extra)
}

// newCWorldSpec is newCWorld with the spec's challenge fields given whole.
func newCWorldSpec(t *testing.T, rounds int, challengeFields string) *cworld {
	w := &cworld{t: t, sponsor: testKey(t, did.KindHuman, 31), t1: testKey(t, did.KindMachine, 32), t2: testKey(t, did.KindMachine, 33),
		chal: testKey(t, did.KindHuman, 34), chal2: testKey(t, did.KindHuman, 35),
		cands: []*did.Key{testKey(t, did.KindMachine, 36), testKey(t, did.KindMachine, 37)}, task: "ch-run", nonce: 100}
	powers := []int64{40, 30, 20, 10}
	var ups []abci.ValidatorUpdate
	for i, p := range powers {
		seed := []byte(fmt.Sprintf("validator-%d", i))
		v := valKey{ed25519.GenPrivKeyFromSecret(seed)}
		w.vals = append(w.vals, v)
		ups = append(ups, abci.Ed25519ValidatorUpdate(v.priv.PubKey().Bytes(), p))
	}
	w.h, w.twin = newHarness(t, ""), newHarness(t, t.TempDir())
	acc := func(k *did.Key, v string) GenesisAccount { return GenesisAccount{DID: k.DID.String(), Balance: v} }
	g := GenesisState{Accounts: []GenesisAccount{acc(w.sponsor, "100000000000000"), acc(w.t1, "500"), acc(w.t2, "500"), acc(w.chal, "1000"), acc(w.chal2, "1000")},
		Candidates: []GenesisAccount{acc(w.cands[0], cCandFund), acc(w.cands[1], cCandFund)}, Faucet: true, Params: freeParams(0)}
	st, _ := json.Marshal(g)
	var gh [2][]byte
	for i, h := range []*harness{w.h, w.twin} {
		res, err := h.app.InitChain(context.Background(), &abci.RequestInitChain{ChainId: ManualChainID, InitialHeight: 1, Time: genesisTime, AppStateBytes: st, Validators: ups})
		if err != nil {
			t.Fatal(err)
		}
		gh[i] = res.AppHash
	}
	if string(gh[0]) != string(gh[1]) {
		t.Fatalf("genesis app hashes differ: %x vs %x", gh[0], gh[1])
	}
	w.spec = testSpec(w.task, w.sponsor.DID.String(), 2, 2, 2, rounds, challengeFields)
	w.ok(must(PostTaskTx(ManualChainID, w.sponsor, w.spec, testLayout(2, "ch"), meanRules(t), w.n())))
	for _, c := range w.cands {
		w.ok(must(ElectionProofTx(ManualChainID, c, w.task, vrfProof(t, c, w.task, w.spec), w.n())))
	}
	w.ok(must(EnrollTx(ManualChainID, w.t1, w.task, "100", w.n())), must(EnrollTx(ManualChainID, w.t2, w.task, "100", w.n())))
	r := w.h.run(w.task)
	if r.Status != wire.StatusRunning || len(r.Succession) != 2 {
		t.Fatalf("run %s with %d entrants, want running with 2", r.Status, len(r.Succession))
	}
	for _, d := range r.Succession {
		for _, c := range w.cands {
			if c.DID.String() == d {
				w.syncers = append(w.syncers, c)
			}
		}
	}
	return w
}

func (w *cworld) n() uint64 { w.nonce++; return w.nonce }

// block makes one block of txs on the app and its twin (at the same time)
// and checks that both reach the same app hash and the same results.
func (w *cworld) block(txs ...[]byte) ([]*abci.ExecTxResult, wire.Hash) {
	w.t.Helper()
	w.twin.now = w.h.now
	res, ha := w.h.block(txs...)
	res2, hb := w.twin.block(txs...)
	if ha != hb {
		w.t.Fatalf("block %d: app hash %s, its twin's %s", w.h.height, ha, hb)
	}
	for i := range res {
		if res[i].Code != res2[i].Code || string(res[i].Data) != string(res2[i].Data) {
			w.t.Fatalf("block %d tx %d: results differ between the app and its twin", w.h.height, i)
		}
	}
	return res, ha
}

// ok makes a block of txs that must all succeed; the ledger must conserve.
func (w *cworld) ok(txs ...[]byte) []*abci.ExecTxResult {
	w.t.Helper()
	res, _ := w.block(txs...)
	for i, r := range res {
		if r.Code != 0 {
			w.t.Fatalf("block %d tx %d: code %d: %s", w.h.height, i, r.Code, r.Log)
		}
	}
	w.h.conservation()
	return res
}

// refused makes a block of tx, which must be refused with a log containing want.
func (w *cworld) refused(tx []byte, want string) {
	w.t.Helper()
	res, _ := w.block(tx)
	if res[0].Code == 0 || !strings.Contains(res[0].Log, want) {
		w.t.Fatalf("block %d: code %d %q, want a refusal containing %q", w.h.height, res[0].Code, res[0].Log, want)
	}
	w.h.conservation()
}

// empty makes n empty blocks.
func (w *cworld) empty(n int) {
	for i := 0; i < n; i++ {
		w.ok()
	}
}

// submitRound records both trainers' submissions of every fragment of the
// current round (payload hashes derived from the round and a salt).
func (w *cworld) submitRound(salt string) {
	w.t.Helper()
	r := w.h.run(w.task)
	var txs [][]byte
	for f := 0; f < 2; f++ {
		for _, k := range []*did.Key{w.t1, w.t2} {
			h := wire.ContentHash([]byte(fmt.Sprintf("%s-%d-%d-%s-%s", w.task, r.Round, f, k.DID, salt)))
			txs = append(txs, must(SubmissionTx(ManualChainID, k, w.task, r.Round, uint64(f), h, 64)))
		}
	}
	w.ok(txs...)
}

// commitAll commits every fragment of the current round by the syncer at
// ticket; it returns the heights.
func (w *cworld) commitAll(ticket int) {
	w.t.Helper()
	for f := 0; f < 2; f++ {
		w.ok(w.h.commit(w.task, f, w.syncers[ticket], uint64(ticket), wire.FragAggregated, "", w.n()))
	}
}

func (w *cworld) record(round uint64, f int) *machine.CommitRecord {
	w.t.Helper()
	var rec *machine.CommitRecord
	err := w.h.app.View(context.Background(), func(v machine.View) error {
		var err error
		rec, err = machine.FragmentCommitRecord(context.Background(), v.KV, w.task, round, f)
		return err
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

func (w *cworld) challenges() []wire.ChallengeRecord {
	w.t.Helper()
	var out []wire.ChallengeRecord
	err := w.h.app.View(context.Background(), func(v machine.View) error {
		var err error
		out, err = machine.RunChallenges(context.Background(), v.KV, w.task)
		return err
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

func (w *cworld) account(name string) *big.Int {
	w.t.Helper()
	code, v := w.h.query(QueryBalanceAcct, name)
	if code != 0 {
		w.t.Fatalf("account %s: %s", name, v)
	}
	b, _ := new(big.Int).SetString(v, 10)
	return b
}

func (w *cworld) bal(k *did.Key) *big.Int { return w.account("did:" + k.DID.String()) }

func (w *cworld) challengeTx(k *did.Key, round uint64, f uint64, claim wire.Hash) []byte {
	return must(ChallengeTx(ManualChainID, k, w.task, round, f, claim, cBond, w.n()))
}

func (w *cworld) vote(v int, id, result wire.Hash, unavailable bool) []byte {
	return must(ChallengeVoteTx(w.vals[v], id, result, unavailable))
}

func (w *cworld) trainer(d *did.Key) (accepted uint64, weight string, status string) {
	for _, t := range w.h.run(w.task).Trainers {
		if t.DID == d.DID.String() {
			return t.Accepted, t.Weight, t.Status
		}
	}
	w.t.Fatalf("no trainer %s", d.DID)
	return
}

// TestChallengeWindow: a commit is challengeable until its window ends;
// effects wait for the round to be final; the refusals of the challenge
// transaction (bond, unknown commit, the committed hash, after the window,
// twice, a chain-made commit).
func TestChallengeWindow(t *testing.T) {
	w := newCWorld(t, 2, "")
	w.submitRound("a")
	w.commitAll(0)
	closed := w.h.height // the block that closed round 0
	rec := w.record(0, 1)
	if rec.FinalAt != rec.Height+5 || rec.Result != wire.FragmentResultHash(&rec.Commit) {
		t.Fatalf("commit record: height %d final at %d, result %s", rec.Height, rec.FinalAt, rec.Result)
	}
	if acc, wt, _ := w.trainer(w.t1); acc != 0 || wt != "0" {
		t.Fatalf("accepted %d weight %s before the round is final, want 0 and 0", acc, wt)
	}
	other := wire.ContentHash([]byte("other result"))
	refusals := []struct {
		tx   []byte
		want string
	}{
		{must(ChallengeTx(ManualChainID, w.chal, w.task, 0, 1, other, "99", w.n())), "challenge_bond is 100"},
		{w.challengeTx(w.chal, 1, 0, other), "unknown commit"},
		{w.challengeTx(w.chal, 0, 7, other), "wrong fragment"},
		{w.challengeTx(w.chal, 0, 1, rec.Result), "is the committed one"},
		{must(ChallengeTx(ManualChainID, w.chal, "no-such-run", 0, 1, other, cBond, w.n())), "no run"},
	}
	var txs [][]byte
	for _, r := range refusals {
		txs = append(txs, r.tx)
	}
	res0, _ := w.block(txs...)
	for i, r := range refusals {
		if res0[i].Code == 0 || !strings.Contains(res0[i].Log, r.want) {
			t.Fatalf("refusal %d: code %d %q, want %q", i, res0[i].Code, res0[i].Log, r.want)
		}
	}
	w.h.conservation()
	if got := w.bal(w.chal); got.String() != "1000" {
		t.Fatalf("challenger balance %s after refusals, want 1000", got)
	}
	// Fragment 0 (committed one block before fragment 1) reaches its end
	// first: at its FinalAt it is refused, fragment 1 still takes one.
	rec0 := w.record(0, 0)
	for w.h.height+1 < rec0.FinalAt {
		w.ok()
	}
	if w.h.height+1 >= rec.FinalAt {
		t.Fatalf("fragment 1's window (final at %d) passed already at %d", rec.FinalAt, w.h.height)
	}
	res, _ := w.block(w.challengeTx(w.chal, 0, 0, other), w.challengeTx(w.chal, 0, 1, other))
	if res[0].Code == 0 || !strings.Contains(res[0].Log, "after the challenge window") || res[1].Code != 0 {
		t.Fatalf("at fragment 0's final height: %d %q; fragment 1: %d %q", res[0].Code, res[0].Log, res[1].Code, res[1].Log)
	}
	w.h.conservation()
	var cr wire.ChallengeResult
	if err := json.Unmarshal(res[1].Data, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Committed != rec.Result || cr.VoteDeadline != w.h.height+20 {
		t.Fatalf("challenge result %+v", cr)
	}
	if got := w.account("challenge:" + cr.ID.String()); got.String() != cBond {
		t.Fatalf("bond account holds %s, want %s", got, cBond)
	}
	w.refused(w.challengeTx(w.chal2, 0, 1, wire.ContentHash([]byte("third"))), "already challenged")
	// The open challenge holds the round: past the window it is not final.
	for w.h.height < closed+6 {
		w.ok()
	}
	if acc, _, _ := w.trainer(w.t1); acc != 0 {
		t.Fatalf("round 0 final with a challenge open (accepted %d)", acc)
	}
	chs := w.challenges()
	if len(chs) != 1 || chs[0].Outcome != wire.ChallengeOpen || len(chs[0].Committee) != 4 || chs[0].TotalPower != 100 {
		t.Fatalf("challenges %+v", chs)
	}
}

// TestChallengeVotes: votes count by power; unknown validators, bad
// signatures, double votes and late votes are refused; a committed-hash
// majority rejects the challenge (the bond goes to the escrow); the round
// is then final and its effects apply.
func TestChallengeVotes(t *testing.T) {
	w := newCWorld(t, 2, "")
	w.submitRound("a")
	w.commitAll(0)
	rec := w.record(0, 0)
	claim := wire.ContentHash([]byte("claimed"))
	res := w.ok(w.challengeTx(w.chal, 0, 0, claim))
	var cr wire.ChallengeResult
	_ = json.Unmarshal(res[0].Data, &cr)
	escrow0 := w.account("escrow:" + w.task)

	stranger := valKey{ed25519.GenPrivKeyFromSecret([]byte("not a validator"))}
	w.refused(must(ChallengeVoteTx(stranger, cr.ID, rec.Result, false)), "is not a validator")
	forged := wire.ChallengeVoteTx{Challenge: cr.ID, ResultHash: rec.Result, Validator: append(wire.HexBytes{}, w.vals[0].Address()...), Signature: make(wire.HexBytes, 64)}
	w.refused(must(wire.EncodeTx(wire.TxChallengeVote, forged)), "does not verify")
	w.refused(must(ChallengeVoteTx(w.vals[0], wire.ContentHash([]byte("no such")), rec.Result, false)), "no challenge")
	// 40 (committed) + 20 (claimed) + 10 (unavailable): nobody has > 2/3.
	w.ok(w.vote(0, cr.ID, rec.Result, false))
	w.refused(w.vote(0, cr.ID, rec.Result, false), "already voted")
	w.refused(w.vote(0, cr.ID, claim, false), "already voted")
	w.ok(w.vote(2, cr.ID, claim, false), w.vote(3, cr.ID, wire.Hash{}, true))
	if chs := w.challenges(); chs[0].Outcome != wire.ChallengeOpen || len(chs[0].Votes) != 3 {
		t.Fatalf("after 40/20/10 split votes: %s with %d votes", chs[0].Outcome, len(chs[0].Votes))
	}
	// 40 + 30 = 70 > 2/3 of 100 on the committed hash: rejected.
	w.ok(w.vote(1, cr.ID, rec.Result, false))
	ch := w.challenges()[0]
	if ch.Outcome != wire.ChallengeRejected || ch.ToEscrow != cBond || ch.Result != rec.Result {
		t.Fatalf("decision %+v", ch)
	}
	if got := new(big.Int).Sub(w.account("escrow:"+w.task), escrow0); got.String() != cBond {
		t.Fatalf("escrow grew by %s, want the bond %s", got, cBond)
	}
	if got := w.bal(w.chal); got.String() != "900" {
		t.Fatalf("challenger balance %s, want 900 (bond forfeited)", got)
	}
	w.refused(w.vote(2, cr.ID, rec.Result, false), "is decided")
	// The decision released the round (its window had passed): final now.
	w.refused(w.challengeTx(w.chal2, 0, 0, claim), "round 0 of ch-run is final")
	// The round becomes final at its window: accepted and weight counted.
	for w.h.height < rec.Height+6 {
		w.ok()
	}
	if acc, wt, _ := w.trainer(w.t1); acc != 2 || wt != "8" {
		t.Fatalf("after finality: accepted %d weight %s, want 2 and 8", acc, wt)
	}
	// The rest of the run: round 1, final, sealed; the receipt lists the challenge.
	w.submitRound("b")
	w.commitAll(0)
	w.empty(6)
	if r := w.h.run(w.task); r.Status != wire.StatusSealed {
		t.Fatalf("run %s after every round is final, want sealed", r.Status)
	}
	w.checkReceipt(1, wire.ChallengeRejected)
}

// checkReceipt signs the sealed run's receipt by the last syncer and checks
// it (offline, with its challenge list, and against the chain's sealed run).
func (w *cworld) checkReceipt(n int, outcome string) *wire.Receipt {
	w.t.Helper()
	code, raw := w.h.query(QueryRun, w.task)
	if code != 0 {
		w.t.Fatal(raw)
	}
	var st struct {
		LastSyncer string `json:"last_syncer"`
	}
	_ = json.Unmarshal([]byte(raw), &st)
	var last *did.Key
	for _, k := range w.cands {
		if k.DID.String() == st.LastSyncer {
			last = k
		}
	}
	w.ok(w.h.signReceipt(w.task, last))
	code, raw = w.h.query(QueryReceipt, w.task)
	if code != 0 {
		w.t.Fatal(raw)
	}
	if err := audit.CheckReceipt([]byte(raw), nil); err != nil {
		w.t.Fatalf("receipt does not verify: %v", err)
	}
	var rc wire.Receipt
	_ = json.Unmarshal([]byte(raw), &rc)
	if rc.ChallengeCount != uint64(n) || rc.ChallengesHash == nil {
		w.t.Fatalf("receipt records %d challenges, want %d", rc.ChallengeCount, n)
	}
	var list []byte
	var sealed *audit.SealedRun
	err := w.h.app.View(context.Background(), func(v machine.View) error {
		var err error
		if list, err = machine.ChainChallengeList(context.Background(), v.KV, w.task); err != nil {
			return err
		}
		sealed, err = machine.SealedRunOf(context.Background(), v.KV, w.task)
		return err
	})
	if err != nil {
		w.t.Fatal(err)
	}
	entries, err := audit.CheckChallenges(&rc, list)
	if err != nil {
		w.t.Fatalf("challenge list: %v", err)
	}
	if entries[len(entries)-1].Outcome != outcome {
		w.t.Fatalf("last challenge %s, want %s", entries[len(entries)-1].Outcome, outcome)
	}
	if _, err := audit.CheckReceiptAgainst(context.Background(), staticAnchor{sealed}, []byte(raw)); err != nil {
		w.t.Fatalf("receipt against the chain: %v", err)
	}
	// A list that is not the receipt's is refused.
	if _, err := audit.CheckChallenges(&rc, []byte("[]")); err == nil {
		w.t.Fatal("an empty challenge list passed for a receipt with challenges")
	}
	return &rc
}

type staticAnchor struct{ s *audit.SealedRun }

func (a staticAnchor) SealedRun(context.Context, string) (*audit.SealedRun, error) { return a.s, nil }

// TestChallengeUpheldRollsBack: rounds 0 and 1 committed; a challenge of
// round 0 fragment 1 with 2/3 on another hash slashes the syncer (half its
// candidate stake: half of that to the challenger, the rest to the escrow),
// voids the challenge open on round 1, rolls the run back to round 0 with
// fragment 1 open and its records back, fragment 0 as committed, round 1's
// records gone; the excluded syncer can no longer commit, the next ticket
// commits fragment 1 again and the run goes on to a receipt that records
// the challenge and verifies.
func TestChallengeUpheldRollsBack(t *testing.T) {
	w := newCWorld(t, 2, "")
	w.submitRound("a")
	w.commitAll(0)
	r0 := w.h.run(w.task)
	w.submitRound("b")
	w.ok(w.h.commit(w.task, 0, w.syncers[0], 0, wire.FragAggregated, "", w.n()))
	if r := w.h.run(w.task); r.Round != 1 || len(r.Roots) != 1 {
		t.Fatalf("round %d with %d roots, want round 1 after round 0", r.Round, len(r.Roots))
	}
	bad := w.record(0, 1)
	later := w.record(1, 0)
	truth := wire.ContentHash([]byte("the correct result"))
	res := w.ok(w.challengeTx(w.chal, 0, 1, truth), w.challengeTx(w.chal2, 1, 0, wire.ContentHash([]byte("x"))))
	var cr, cr2 wire.ChallengeResult
	_ = json.Unmarshal(res[0].Data, &cr)
	_ = json.Unmarshal(res[1].Data, &cr2)
	stake0, esc0, chal0, chal20 := w.account("syncer-stake:"+w.syncers[0].DID.String()), w.account("escrow:"+w.task), w.bal(w.chal), w.bal(w.chal2)
	// 30 + 20 + 10 = 60: not yet; 40 more decides (the validators' hash
	// need not be the claimed one: it is not the committed one).
	w.ok(w.vote(1, cr.ID, truth, false), w.vote(2, cr.ID, truth, false), w.vote(3, cr.ID, truth, false))
	if w.challenges()[0].Outcome != wire.ChallengeOpen {
		t.Fatal("decided with 60 of 100")
	}
	w.ok(w.vote(0, cr.ID, truth, false))
	chs := w.challenges()
	if chs[0].Outcome != wire.ChallengeUpheld || chs[1].Outcome != wire.ChallengeVoid {
		t.Fatalf("outcomes %s and %s, want upheld and void", chs[0].Outcome, chs[1].Outcome)
	}
	slash := new(big.Int).Div(stake0, big.NewInt(2))
	reward := new(big.Int).Div(slash, big.NewInt(2))
	if got := w.account("syncer-stake:" + w.syncers[0].DID.String()); got.Cmp(new(big.Int).Sub(stake0, slash)) != 0 || chs[0].SyncerSlashed != slash.String() {
		t.Fatalf("syncer stake %s (slashed %s), want %s - %s", got, chs[0].SyncerSlashed, stake0, slash)
	}
	if got := w.bal(w.chal); got.Cmp(new(big.Int).Add(chal0, new(big.Int).Add(reward, big.NewInt(100)))) != 0 {
		t.Fatalf("challenger %s, want %s + bond + reward %s", got, chal0, reward)
	}
	if got := w.bal(w.chal2); got.Cmp(new(big.Int).Add(chal20, big.NewInt(100))) != 0 {
		t.Fatalf("voided challenger %s, want its bond back on %s", got, chal20)
	}
	if got := new(big.Int).Sub(w.account("escrow:"+w.task), esc0); got.Cmp(new(big.Int).Sub(slash, reward)) != 0 {
		t.Fatalf("escrow grew by %s, want %s", got, new(big.Int).Sub(slash, reward))
	}
	// The state after the rollback.
	r := w.h.run(w.task)
	if r.Round != 0 || len(r.Roots) != 0 || r.Status != wire.StatusRunning {
		t.Fatalf("after rollback: round %d, %d roots, %s", r.Round, len(r.Roots), r.Status)
	}
	f0, f1 := r.Fragments[0], r.Fragments[1]
	if !f0.Closed || f0.Commit == nil || f0.WeightsHash != r0.Fragments[0].WeightsHash || len(f0.Records) != 2 {
		t.Fatalf("fragment 0 after rollback: closed %v, weights %s (want %s), %d records", f0.Closed, f0.WeightsHash, r0.Fragments[0].WeightsHash, len(f0.Records))
	}
	if f1.Closed || f1.WeightsHash != bad.Commit.WeightsBefore || len(f1.Records) != 2 {
		t.Fatalf("fragment 1 after rollback: closed %v, weights %s (want %s), %d records", f1.Closed, f1.WeightsHash, bad.Commit.WeightsBefore, len(f1.Records))
	}
	if err := w.h.app.View(context.Background(), func(v machine.View) error {
		if _, err := machine.FragmentCommitRecord(context.Background(), v.KV, w.task, 1, 0); machine.KindOf(err) != machine.KindNotFound {
			return fmt.Errorf("round 1's commit record survived the rollback: %v", err)
		}
		n := 0
		err := v.KV.Scan(context.Background(), machine.KSTranscript, []byte("s/"+w.task+"/"), func(k, _ []byte) error { n++; return nil })
		if n != 4 {
			return fmt.Errorf("%d submission records, want round 0's 4", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = later
	// The excluded syncer cannot commit; the next ticket can, at once
	// (fragment 1 is due: its grace window passed long ago).
	w.refused(w.h.commit(w.task, 1, w.syncers[0], 0, wire.FragAggregated, "", w.n()), "may be committed only by")
	w.ok(w.h.commit(w.task, 1, w.syncers[1], 1, wire.FragAggregated, "", w.n()))
	if r := w.h.run(w.task); r.Round != 1 || len(r.Roots) != 1 {
		t.Fatalf("round %d with %d roots after the re-commit", r.Round, len(r.Roots))
	}
	w.submitRound("c")
	w.commitAll(1)
	w.empty(6)
	if r := w.h.run(w.task); r.Status != wire.StatusSealed {
		t.Fatalf("run %s, want sealed", r.Status)
	}
	if acc, wt, _ := w.trainer(w.t1); acc != 4 || wt != "16" {
		t.Fatalf("trainer accepted %d weight %s after the seal, want 4 and 16", acc, wt)
	}
	rc := w.checkReceipt(2, wire.ChallengeVoid)
	if len(rc.Syncers) != 2 || rc.SyncerDID != w.syncers[1].DID.String() {
		t.Fatalf("receipt syncers %+v signed by %s", rc.Syncers, rc.SyncerDID)
	}
	// The commits, seal and receipt after the rollback are those computed
	// before runs were stored by key (commit 9c48624; see metaTraces).
	var tr metaTrace
	got := tr.end(t, w.h, []string{w.task})
	t.Logf("rollback trace digest %s", got)
	if rollbackTrace != "" && got != rollbackTrace {
		t.Fatalf("trace digest %s, want %s: a commit, the seal or the receipt changed", got, rollbackTrace)
	}
}

const rollbackTrace = "e295b340c8a7ca4169432a2483cf4dfc08546faa0cf216be22d7e4a9fd0ec6a1"

// TestChallengeExpiresAndUnavailable: no decision within the vote window
// returns the bond and the commit stands; 2/3 voting "unavailable" upholds
// a challenge that claims the inputs are unavailable.
func TestChallengeExpiresAndUnavailable(t *testing.T) {
	w := newCWorld(t, 1, "")
	w.submitRound("a")
	w.commitAll(0)
	rec := w.record(0, 0)
	res := w.ok(w.challengeTx(w.chal, 0, 0, wire.ContentHash([]byte("y"))), w.challengeTx(w.chal2, 0, 1, wire.Hash{}))
	var a, b wire.ChallengeResult
	_ = json.Unmarshal(res[0].Data, &a)
	_ = json.Unmarshal(res[1].Data, &b)
	w.ok(w.vote(3, a.ID, rec.Result, false)) // 10 of 100: never decides
	w.ok(w.vote(0, b.ID, wire.Hash{}, true), w.vote(1, b.ID, wire.Hash{}, true))
	chs := w.challenges()
	if chs[1].Outcome != wire.ChallengeUpheld || !chs[1].Unavailable {
		t.Fatalf("unavailable challenge: %+v", chs[1])
	}
	for w.h.height <= a.VoteDeadline {
		w.ok()
	}
	if chs := w.challenges(); chs[0].Outcome != wire.ChallengeExpired {
		t.Fatalf("after the vote window: %s", chs[0].Outcome)
	}
	if got := w.bal(w.chal); got.String() != "1000" {
		t.Fatalf("expired challenge: challenger %s, want its bond back (1000)", got)
	}
	w.refused(w.vote(1, a.ID, rec.Result, false), "is decided")
	// Fragment 1 is open again (its records kept): the next ticket commits it.
	w.ok(w.h.commit(w.task, 1, w.syncers[1], 1, wire.FragAggregated, "", w.n()))
	w.empty(6)
	if r := w.h.run(w.task); r.Status != wire.StatusSealed {
		t.Fatalf("run %s, want sealed", r.Status)
	}
	w.checkReceipt(2, wire.ChallengeUpheld)
}

// TestChallengeCommittee: with challenge_committee 2, two validators drawn
// by the block hash decide; a validator off the committee may not vote.
func TestChallengeCommittee(t *testing.T) {
	w := newCWorld(t, 1, `,"challenge_committee":2`)
	w.submitRound("a")
	w.commitAll(0)
	rec := w.record(0, 0)
	res := w.ok(w.challengeTx(w.chal, 0, 0, wire.ContentHash([]byte("z"))))
	var cr wire.ChallengeResult
	_ = json.Unmarshal(res[0].Data, &cr)
	ch := w.challenges()[0]
	if len(ch.Committee) != 2 {
		t.Fatalf("committee of %d, want 2", len(ch.Committee))
	}
	in := map[string]bool{}
	for _, a := range ch.Committee {
		in[string(a)] = true
	}
	var members, others []int
	for i, v := range w.vals {
		if in[string(v.Address())] {
			members = append(members, i)
		} else {
			others = append(others, i)
		}
	}
	w.refused(w.vote(others[0], cr.ID, rec.Result, false), "not on challenge")
	w.ok(w.vote(members[0], cr.ID, rec.Result, false), w.vote(members[1], cr.ID, rec.Result, false))
	if got := w.challenges()[0].Outcome; got != wire.ChallengeRejected {
		t.Fatalf("outcome %s, want rejected by the committee", got)
	}
}

// TestChallengePendingPenalty: a trainer that missed a round cannot leave
// before the round is final (its slash would escape); after, it can.
func TestChallengePendingPenalty(t *testing.T) {
	w := newCWorld(t, 3, `,"slashing":{"max_missed_rounds":5,"missed_round_bps":1000,"eviction_bps":1000,"equivocation_bps":5000}`)
	// Only t1 submits round 0: t2 misses it.
	r := w.h.run(w.task)
	var txs [][]byte
	for f := 0; f < 2; f++ {
		txs = append(txs, must(SubmissionTx(ManualChainID, w.t1, w.task, r.Round, uint64(f), wire.ContentHash([]byte(fmt.Sprint("p", f))), 64)))
	}
	w.ok(txs...)
	w.h.now = w.h.now.Add(61e9) // past the round deadline: both fragments close no_quorum
	w.ok()
	if r := w.h.run(w.task); r.Round != 1 {
		t.Fatalf("round %d after the deadline, want 1", r.Round)
	}
	if rec := w.record(0, 0); !rec.ByChain || rec.FinalAt != rec.Height {
		t.Fatalf("a deadline close: by chain %v, final at %d (height %d)", rec.ByChain, rec.FinalAt, rec.Height)
	}
	w.refused(w.challengeTx(w.chal, 0, 0, wire.ContentHash([]byte("q"))), "closed by the round deadline")
	w.refused(must(LeaveTx(ManualChainID, w.t2, w.task, w.n())), "cannot leave")
	w.empty(6)
	_, _, st := w.trainer(w.t2)
	if st != wire.TrainerActive {
		t.Fatalf("t2 %s", st)
	}
	before := w.bal(w.t2)
	w.ok(must(LeaveTx(ManualChainID, w.t2, w.task, w.n())))
	// 10% of 100 slashed for the missed round: 90 back.
	if got := new(big.Int).Sub(w.bal(w.t2), before); got.String() != "90" {
		t.Fatalf("refund %s, want 90 (100 less the missed-round slash)", got)
	}
}

// TestChallengeNoWindow: a run whose spec sets challenge_window_blocks 0
// takes the deferred path with nothing to wait for: a fragment's effects
// (pay, its equivocation slash) wait for its round, which is final in the
// transaction that closes it (commit records gone, a verdict's trainer free
// to leave), the run seals in the block of its last commit, and no
// challenge is possible. On a chain with the faucet (--dev) that is the
// default.
func TestChallengeNoWindow(t *testing.T) {
	for name, extra := range map[string]string{"spec 0": `,"challenge_window_blocks":0`, "dev default": ""} {
		t.Run(name, func(t *testing.T) {
			w := newCWorldSpec(t, 2, extra)
			w.submitRound("a")
			// t1 sends fragment 0 another payload: a claim, judged by the commit.
			w.ok(must(SubmissionTx(ManualChainID, w.t1, w.task, 0, 0, wire.ContentHash([]byte("t1 again")), 64)))
			w.ok(w.h.commit(w.task, 0, w.syncers[0], 0, wire.FragAggregated, wire.VerdictEquivocation, w.n()))
			if acc, wt, _ := w.trainer(w.t1); acc != 0 || wt != "0" {
				t.Fatalf("accepted %d weight %s with its round open, want 0 and 0", acc, wt)
			}
			if s := w.slashed(w.t1); s != "0" {
				t.Fatalf("t1 slashed %s before its round is final", s)
			}
			if rec := w.record(0, 0); rec.FinalAt != rec.Height || len(rec.Equivocators) != 1 {
				t.Fatalf("commit record: height %d final at %d, equivocators %v", rec.Height, rec.FinalAt, rec.Equivocators)
			}
			w.refused(must(LeaveTx(ManualChainID, w.t1, w.task, w.n())), "cannot leave")
			w.refused(w.challengeTx(w.chal, 0, 0, wire.ContentHash([]byte("x"))), "has no challenge window")
			w.ok(w.h.commit(w.task, 1, w.syncers[0], 0, wire.FragAggregated, "", w.n()))
			if r := w.h.run(w.task); r.Round != 1 {
				t.Fatalf("round %d after both commits, want 1", r.Round)
			}
			if acc, wt, _ := w.trainer(w.t1); acc != 2 || wt != "8" {
				t.Fatalf("accepted %d weight %s once the round closed, want 2 and 8", acc, wt)
			}
			if s := w.slashed(w.t1); s != "50" {
				t.Fatalf("t1 slashed %s once the round closed, want 50 (equivocation_bps of 100)", s)
			}
			err := w.h.app.View(context.Background(), func(v machine.View) error {
				_, err := machine.FragmentCommitRecord(context.Background(), v.KV, w.task, 0, 0)
				return err
			})
			if machine.KindOf(err) != machine.KindNotFound {
				t.Fatalf("round 0's commit record after its close: %v, want not found", err)
			}
			w.submitRound("b")
			w.commitAll(0)
			r := w.h.run(w.task)
			if r.Status != wire.StatusSealed || r.Seal == nil || r.Seal.Height != w.h.height {
				t.Fatalf("run %s (seal %+v) after its last commit at height %d, want sealed in that block", r.Status, r.Seal, w.h.height)
			}
			w.refused(w.challengeTx(w.chal, 0, 0, wire.ContentHash([]byte("x"))), "is sealed")
		})
	}
}

func (w *cworld) slashed(d *did.Key) string {
	for _, t := range w.h.run(w.task).Trainers {
		if t.DID == d.DID.String() {
			return t.Slashed
		}
	}
	w.t.Fatalf("no trainer %s", d.DID)
	return ""
}
