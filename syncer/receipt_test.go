package syncer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// synthRun is a synthetic sealed run: rounds × frags fragment commits with 6
// inputs each, an election of three candidates, the first half of the rounds
// committed by the winner (ticket 0) and the rest by the next ticket after a
// failover, who signs; eight trainers, two of them slashed.
type synthRun struct {
	in      audit.ReceiptInput
	keys    map[string]*did.Key // candidates by DID
	order   []wire.ElectionEntrant
	rc      *wire.Receipt
	raw     []byte // signed receipt JSON
	blob    []byte // transcript blob
	trainer []*did.Key
}

func newSynthRun(tb testing.TB, rounds, frags int) *synthRun {
	tb.Helper()
	t := &testing.T{}
	s := &synthRun{keys: map[string]*did.Key{}}
	sponsor := key(t, did.KindHuman, 8)
	specRaw := spec("synth", sponsor.DID.String(), 8, 6, frags, rounds)
	_, canon, err := wire.ParseSpec(specRaw)
	if err != nil {
		tb.Fatal(err)
	}
	alpha := election.Alpha("synth", wire.SpecHash(canon))
	var es []election.Entrant
	for i := byte(0); i < 3; i++ {
		k := key(t, did.KindMachine, 240+i)
		s.keys[k.DID.String()] = k
		e, err := election.Enter(k.Priv, k.DID.String(), big.NewInt(1_000_000+int64(i)), alpha)
		if err != nil {
			tb.Fatal(err)
		}
		es = append(es, e)
	}
	el, err := election.Record(alpha, es)
	if err != nil {
		tb.Fatal(err)
	}
	if s.order, err = election.Succession(el); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		s.trainer = append(s.trainer, key(t, did.KindMachine, byte(i+1)))
	}
	var rcs []wire.RoundCommit
	var atts []wire.Hash
	for r := 0; r < rounds; r++ {
		c := wire.RoundCommit{TaskID: "synth", Round: uint64(r), Missed: []string{}, Evicted: []string{}, Joined: []string{}, Left: []string{}, Equivocations: []wire.Hash{}}
		tk := uint64(0)
		if r >= rounds/2 {
			tk = 1
		}
		for f := 0; f < frags; f++ {
			fc := wire.FragmentCommit{Fragment: f, Status: wire.FragAggregated, Rule: "Mean", RuleParams: json.RawMessage(`{}`),
				Syncer: s.order[tk].DID, Ticket: tk, Fuel: uint64(1000 + r*frags + f),
				AggregateHash: wire.ContentHash([]byte(fmt.Sprint("agg", r, f))), WeightsBefore: wire.ContentHash([]byte(fmt.Sprint("w", r, f))),
				WeightsAfter: wire.ContentHash([]byte(fmt.Sprint("w", r+1, f))), MomentumAfter: wire.ContentHash([]byte(fmt.Sprint("m", r+1, f)))}
			for i := 0; i < 6; i++ {
				fc.Inputs = append(fc.Inputs, wire.CommitInput{TrainerDID: s.trainer[i].DID.String(), PayloadHash: wire.ContentHash([]byte(fmt.Sprint(r, f, i))), Selected: true})
				atts = append(atts, wire.SHA256([]byte(fmt.Sprint("evidence", r, f, i))))
			}
			c.Fragments = append(c.Fragments, fc)
		}
		c.ModelHash = wire.ContentHash([]byte(fmt.Sprint("model", r)))
		rcs = append(rcs, c)
	}
	// Settlement: pool 1000 TNZO plus two slashes, shared by weight.
	pool, _ := new(big.Int).SetString("1000000000000000000000", 10)
	slashed := []int64{0, 0, 0, 0, 0, 0, 5_000_000, 7_000_000}
	esc := new(big.Int).Set(pool)
	for _, v := range slashed {
		esc.Add(esc, big.NewInt(v))
	}
	var lines []wire.Payout
	W := big.NewInt(0)
	for i := range s.trainer {
		if i < 6 {
			W.Add(W, big.NewInt(int64(rounds*frags*16)))
		}
	}
	paid := new(big.Int)
	for i, k := range s.trainer {
		w := big.NewInt(0)
		if i < 6 {
			w = big.NewInt(int64(rounds * frags * 16))
		}
		r := new(big.Int).Mul(esc, w)
		r.Quo(r, W)
		paid.Add(paid, r)
		lines = append(lines, wire.Payout{DID: k.DID.String(), Reward: r.String(), Refund: "100", Slashed: big.NewInt(slashed[i]).String(), WeightSum: w.String()})
	}
	sortPayouts(lines)
	s.in = audit.ReceiptInput{TaskSpec: canon, InitModelHash: wire.ContentHash([]byte("init-model")), InitWeightsHash: wire.ContentHash([]byte("init-file")),
		FinalModelHash: rcs[len(rcs)-1].ModelHash, Rounds: rcs, PluginHashes: []wire.Hash{wire.SHA256([]byte("mean.wasm"))},
		Engine: json.RawMessage(`{"engine":"native-go/v1"}`), AttestationDigests: atts, Election: &el, Rewards: lines,
		SponsorRefund: new(big.Int).Sub(esc, paid).String(), SyncerDID: s.order[1].DID}
	s.rebuild(tb)
	return s
}

func sortPayouts(p []wire.Payout) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].DID < p[j-1].DID; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}

// rebuild builds and signs the receipt from s.in.
func (s *synthRun) rebuild(tb testing.TB) {
	tb.Helper()
	rc, blob, err := audit.BuildReceipt(s.in)
	if err != nil {
		tb.Fatal(err)
	}
	s.rc, s.blob = rc, blob
	s.sign(tb, s.keys[s.in.SyncerDID])
}

// sign (re-)signs s.rc with k and re-serializes it.
func (s *synthRun) sign(tb testing.TB, k *did.Key) {
	tb.Helper()
	s.rc.SyncerDID = k.DID.String()
	pre, err := audit.ReceiptPreimage(s.rc)
	if err != nil {
		tb.Fatal(err)
	}
	s.rc.Signature = k.Sign(pre)
	if s.raw, err = json.Marshal(s.rc); err != nil {
		tb.Fatal(err)
	}
}

func TestReceiptV2RoundTrip(t *testing.T) {
	s := newSynthRun(t, 16, 12)
	if err := audit.CheckReceipt(s.raw, nil); err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckReceiptFull(s.raw, s.blob); err != nil {
		t.Fatal(err)
	}
	if audit.VerifyReceipt(s.raw, s.rc.RunRoot[:]) != 1 || audit.VerifyReceipt(s.raw, make([]byte, 32)) != 0 {
		t.Fatal("claimed-root check wrong")
	}
	if len(s.rc.Syncers) != 2 || s.rc.Syncers[0].Ticket != 0 || s.rc.Syncers[1].Ticket != 1 || s.rc.SyncerDID != s.rc.Syncers[1].DID {
		t.Fatalf("syncers %+v", s.rc.Syncers)
	}
	// The run root is the one a v1 receipt had: over the same round commit hashes.
	var hashes []wire.Hash
	for i := range s.in.Rounds {
		h, _ := audit.RoundCommitHash(&s.in.Rounds[i])
		hashes = append(hashes, h)
	}
	if audit.RunRoot(s.rc.SpecHash, hashes, s.rc.FinalModelHash) != s.rc.RunRoot {
		t.Fatal("run root is not the RFC 6962 root over spec hash, round commit hashes, final model hash")
	}
	// Attestation list.
	list, h := audit.AttestationList(s.in.AttestationDigests)
	if h != s.rc.AttestationsHash {
		t.Fatal("attestations hash")
	}
	ds, err := audit.CheckAttestations(s.rc, list)
	if err != nil || len(ds) != 16*12*6 {
		t.Fatalf("attestations: %d %v", len(ds), err)
	}
	// Every round is provably in the run root.
	for r := uint64(0); r < 16; r++ {
		if _, _, _, _, err := audit.InclusionProof(s.raw, s.blob, r); err != nil {
			t.Fatal(err)
		}
	}
	// Deterministic: the same input gives the same bytes.
	rc2, blob2, _ := audit.BuildReceipt(s.in)
	p1, _ := audit.ReceiptPreimage(s.rc)
	p2, _ := audit.ReceiptPreimage(rc2)
	if !bytes.Equal(p1, p2) || !bytes.Equal(blob2, s.blob) {
		t.Fatal("BuildReceipt is not deterministic")
	}
}

// TestReceiptSizeConstant: the receipt does not grow with rounds.
func TestReceiptSizeConstant(t *testing.T) {
	a := newSynthRun(t, 4, 12)
	b := newSynthRun(t, 1024, 12)
	if d := len(b.raw) - len(a.raw); d < -64 || d > 64 || len(b.raw) > audit.MaxReceiptBytes { // a few more digits
		t.Fatalf("receipt of 4 rounds %d bytes, of 1024 rounds %d bytes", len(a.raw), len(b.raw))
	}
	t.Logf("receipt %d bytes (4 rounds), %d bytes (1024 rounds × 12 fragments); transcript %d bytes", len(a.raw), len(b.raw), len(b.blob))
}

// TestReceiptResignedByOtherKeyRefused: a genuine receipt re-signed by a
// key that is not among its elected syncers is refused offline, whether the
// signer DID is swapped in or also added to the syncers with a proof of its
// own (it was not an entrant at that ticket: the order check or the
// transcript check catches it).
func TestReceiptResignedByOtherKeyRefused(t *testing.T) {
	s := newSynthRun(t, 8, 3)
	outsider := key(t, did.KindMachine, 77)
	s.sign(t, outsider)
	if err := audit.CheckReceipt(s.raw, nil); err == nil || !strings.Contains(err.Error(), "not among the run's elected syncers") {
		t.Fatalf("re-signed receipt: %v", err)
	}
	// The third candidate was elected but committed nothing and did not sign:
	// it may sign only if listed, and then --full finds it committed nothing.
	s = newSynthRun(t, 8, 3)
	third := s.keys[s.order[2].DID]
	s.sign(t, third)
	if err := audit.CheckReceipt(s.raw, nil); err == nil {
		t.Fatal("receipt signed by an unlisted entrant verified")
	}
	// An outsider that lists itself, with a valid VRF proof of its own, at a
	// ticket after the real syncers looks, offline, like an entrant that
	// signed late because the committers did not (the chain allows the
	// tickets above every committer to sign, one deadline after another):
	// the transcript check accepts it, audit.SignerCommitted flags it (so
	// 'tenzro receipt verify --full' without --rpc refuses it), and the
	// chain's election record refuses it (TestVerifyReceiptAgainstAnchor).
	s = newSynthRun(t, 8, 3)
	forged := appendOutsider(t, s, outsider)
	rc, rounds, _, err := audit.CheckFull(forged, s.blob)
	if err != nil {
		t.Fatalf("receipt of a signer listed above every committer: %v", err)
	}
	if audit.SignerCommitted(rc, rounds) {
		t.Fatal("a self-listed signer that committed nothing counts as a committer")
	}
}

// TestReceiptNonCommittingSigner: the chain lets the entrants above every
// committer sign a receipt whose committers did not (receiptSigners), and
// --full agrees: such a signer is accepted, one ranked below a committer
// (who would have been that round's syncer first) is refused.
func TestReceiptNonCommittingSigner(t *testing.T) {
	// One round, committed wholly by ticket 1 (ticket 0 missed it).
	s := newSynthRun(t, 1, 2)
	if len(s.rc.Syncers) != 1 || s.rc.Syncers[0].Ticket != 1 {
		t.Fatalf("syncers %+v", s.rc.Syncers)
	}
	for _, c := range []struct {
		ticket int
		ok     bool
	}{{2, true}, {0, false}} {
		in := s.in
		in.SyncerDID = s.order[c.ticket].DID
		rc, blob, err := audit.BuildReceipt(in)
		if err != nil {
			t.Fatal(err)
		}
		s.rc, s.blob = rc, blob
		s.sign(t, s.keys[in.SyncerDID])
		if err := audit.CheckReceipt(s.raw, nil); err != nil {
			t.Fatalf("ticket %d: compact check: %v", c.ticket, err)
		}
		err = audit.CheckReceiptFull(s.raw, s.blob)
		if c.ok && err != nil {
			t.Fatalf("signer at ticket %d above the committer: %v", c.ticket, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "not above every committer")) {
			t.Fatalf("signer at ticket %d below the committer: %v", c.ticket, err)
		}
	}
}

// appendOutsider lists k as a syncer after the receipt's own (a valid VRF
// proof over the run's alpha, a stake that ranks it last) and re-signs.
func appendOutsider(t *testing.T, s *synthRun, k *did.Key) []byte {
	t.Helper()
	e, err := election.Enter(k.Priv, k.DID.String(), big.NewInt(1), s.rc.ElectionAlpha)
	if err != nil {
		t.Fatal(err)
	}
	_, ts, _ := election.Elect(s.rc.ElectionAlpha, []election.Entrant{e})
	s.rc.Syncers = append(s.rc.Syncers, wire.ReceiptSyncer{DID: k.DID.String(), Stake: "1", Proof: e.Proof, Output: ts[0].Beta, Ticket: 2})
	s.sign(t, k)
	if err := audit.CheckReceipt(s.raw, nil); err != nil {
		t.Fatalf("compact check of the appended outsider: %v (the test wants the order to hold)", err)
	}
	return s.raw
}

// TestReceiptTamperedSyncerRefused: a tampered syncer proof, output, stake
// or ticket is refused offline.
func TestReceiptTamperedSyncerRefused(t *testing.T) {
	cases := map[string]func(s *synthRun){
		"proof byte": func(s *synthRun) { s.rc.Syncers[0].Proof[5] ^= 1 },
		"output":     func(s *synthRun) { s.rc.Syncers[1].Output[0] ^= 1 },
		"stake":      func(s *synthRun) { s.rc.Syncers[0].Stake = "1" }, // the winner's ticket no longer ranks first
		"swapped tickets": func(s *synthRun) {
			s.rc.Syncers[0].Ticket, s.rc.Syncers[1].Ticket = 1, 0
			s.rc.Syncers[0], s.rc.Syncers[1] = s.rc.Syncers[1], s.rc.Syncers[0]
		},
		"duplicate ticket": func(s *synthRun) { s.rc.Syncers[1].Ticket = 0 },
		"alpha":            func(s *synthRun) { s.rc.ElectionAlpha[0] ^= 1 },
		"no syncers":       func(s *synthRun) { s.rc.Syncers = nil },
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			s := newSynthRun(t, 4, 2)
			tamper(s)
			s.sign(t, s.keys[s.in.SyncerDID]) // a valid signature over the tampered receipt
			if err := audit.CheckReceipt(s.raw, nil); err == nil {
				t.Fatal("tampered syncers verified")
			}
		})
	}
	// A ticket shifted to a later index keeps the order valid offline, but
	// the transcript names the real ticket: --full refuses it.
	s := newSynthRun(t, 4, 2)
	s.rc.Syncers[1].Ticket = 2
	s.sign(t, s.keys[s.in.SyncerDID])
	if err := audit.CheckReceipt(s.raw, nil); err != nil {
		t.Fatalf("compact: %v", err)
	}
	if err := audit.CheckReceiptFull(s.raw, s.blob); err == nil || !strings.Contains(err.Error(), "at ticket 1") {
		t.Fatalf("full: %v", err)
	}
}

// TestBuildReceiptRefusesWrongCommitter: a fragment commit whose syncer is
// not the entrant at its ticket cannot be built into a receipt.
func TestBuildReceiptRefusesWrongCommitter(t *testing.T) {
	s := newSynthRun(t, 4, 2)
	s.in.Rounds[1].Fragments[0].Ticket = 1 // the winner claims the second ticket
	if _, _, err := audit.BuildReceipt(s.in); err == nil || !strings.Contains(err.Error(), "not the election's entrant") {
		t.Fatal(err)
	}
	s = newSynthRun(t, 4, 2)
	s.in.SyncerDID = key(t, did.KindMachine, 77).DID.String()
	if _, _, err := audit.BuildReceipt(s.in); err == nil || !strings.Contains(err.Error(), "not an entrant") {
		t.Fatal(err)
	}
	s = newSynthRun(t, 4, 2)
	s.in.RoundRoots = make([]wire.Hash, 4)
	if _, _, err := audit.BuildReceipt(s.in); err == nil {
		t.Fatal("round roots not checked")
	}
}

// TestReceiptSettlementChecked: the conservation check refuses a reward line
// moved, a sponsor refund inflated, a pool or slashed total that is not the
// spec's or the lines'.
func TestReceiptSettlementChecked(t *testing.T) {
	cases := map[string]func(rc *wire.Receipt){
		"reward moved": func(rc *wire.Receipt) {
			a, _ := new(big.Int).SetString(rc.Rewards[0].Reward, 10)
			b, _ := new(big.Int).SetString(rc.Rewards[1].Reward, 10)
			rc.Rewards[0].Reward = a.Add(a, big.NewInt(1)).String()
			rc.Rewards[1].Reward = b.Sub(b, big.NewInt(1)).String()
		},
		"refund inflated": func(rc *wire.Receipt) { rc.SponsorRefund = "1" + rc.SponsorRefund },
		"pool":            func(rc *wire.Receipt) { rc.RewardPool = "2000000000000000000000" },
		"slashed total":   func(rc *wire.Receipt) { rc.SlashedTotal = "0" },
		"slash hidden": func(rc *wire.Receipt) {
			for i := range rc.Rewards {
				rc.Rewards[i].Slashed = "0"
			}
		},
		"not DID order": func(rc *wire.Receipt) { rc.Rewards[0], rc.Rewards[1] = rc.Rewards[1], rc.Rewards[0] },
		"bad amount":    func(rc *wire.Receipt) { rc.Rewards[2].Refund = "-1" },
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			s := newSynthRun(t, 2, 2)
			tamper(s.rc)
			s.sign(t, s.keys[s.in.SyncerDID])
			if err := audit.CheckReceipt(s.raw, nil); err == nil {
				t.Fatal("tampered settlement verified")
			}
		})
	}
	// The builder refuses an input that does not conserve.
	s := newSynthRun(t, 2, 2)
	s.in.SponsorRefund = "0"
	if _, _, err := audit.BuildReceipt(s.in); err == nil || !strings.Contains(err.Error(), "conserve") {
		t.Fatal(err)
	}
}

// TestReceiptTranscriptChecked: --full refuses a transcript that is not the
// receipt's (one byte changed, reordered, re-encoded, a round dropped).
func TestReceiptTranscriptChecked(t *testing.T) {
	s := newSynthRun(t, 6, 2)
	bad := bytes.Replace(s.blob, []byte(`"fuel":1000`), []byte(`"fuel":1001`), 1)
	if err := audit.CheckReceiptFull(s.raw, bad); err == nil {
		t.Fatal("tampered transcript verified")
	}
	var elems []json.RawMessage
	_ = json.Unmarshal(s.blob, &elems)
	indented, _ := json.MarshalIndent(elems, "", " ")
	if err := audit.CheckReceiptFull(s.raw, indented); err == nil {
		t.Fatal("re-encoded transcript verified")
	}
	// A syncer that signs a non-canonical transcript consistently: the
	// content hash and run root match, the canonical-form check does not.
	s.rc.TranscriptHash, s.rc.TranscriptSize = audit.BlobHash(indented), uint64(len(indented))
	s.sign(t, s.keys[s.in.SyncerDID])
	if err := audit.CheckReceiptFull(s.raw, indented); err == nil || !strings.Contains(err.Error(), "canonical") {
		t.Fatalf("non-canonical transcript: %v", err)
	}
}

// TestReceiptV1Refused: a version-1 receipt gets the precise refusal, small
// or large.
func TestReceiptV1Refused(t *testing.T) {
	small := []byte(`{"version":1,"task_id":"x","transcript":[]}`)
	large := append([]byte(`{"version":1,"task_id":"x","transcript":[`), bytes.Repeat([]byte(`{},`), 40000)...)
	large = append(large, []byte(`{}]}`)...)
	for _, b := range [][]byte{small, large} {
		if err := audit.CheckReceipt(b, nil); !errors.Is(err, audit.ErrReceiptV1) {
			t.Fatalf("v1 receipt of %d bytes: %v", len(b), err)
		}
	}
	if err := audit.CheckReceipt([]byte(`{"version":3}`), nil); err == nil || !strings.Contains(err.Error(), "version 3") {
		t.Fatal(err)
	}
}

// TestReceiptStrictParse: unknown or duplicate members, trailing data and
// oversized input are refused.
func TestReceiptStrictParse(t *testing.T) {
	s := newSynthRun(t, 2, 1)
	for name, b := range map[string][]byte{
		"unknown":   bytes.Replace(s.raw, []byte(`{"version":2,`), []byte(`{"version":2,"extra":1,`), 1),
		"duplicate": bytes.Replace(s.raw, []byte(`{"version":2,`), []byte(`{"version":2,"rounds":2,`), 1),
		"trailing":  append(append([]byte{}, s.raw...), []byte(` {}`)...),
		"oversized": append(bytes.Repeat([]byte(" "), audit.MaxReceiptBytes), s.raw...),
	} {
		if err := audit.CheckReceipt(b, nil); err == nil {
			t.Fatalf("%s: verified", name)
		}
	}
}

type fakeAnchor struct {
	run *audit.SealedRun
	err error
}

func (a fakeAnchor) SealedRun(context.Context, string) (*audit.SealedRun, error) {
	return a.run, a.err
}

// TestVerifyReceiptAgainstAnchor: against the chain (root omitted), a
// genuine receipt is valid and the answer carries the chain's root; a
// different committed root, an unsealed run, an outsider that listed itself
// with its own VRF proof, and a syncer whose stake differs from the chain's
// election record are refused; with a claimed root the check is the pure one.
func TestVerifyReceiptAgainstAnchor(t *testing.T) {
	ctx := context.Background()
	s := newSynthRun(t, 8, 3)
	good := fakeAnchor{run: &audit.SealedRun{TaskID: "synth", RunRoot: s.rc.RunRoot, Height: 42, Election: s.in.Election}}
	res := audit.VerifyReceiptAgainst(ctx, good, s.raw, nil)
	if res.Valid != 1 || res.Root == nil || *res.Root != s.rc.RunRoot || res.Height != 42 {
		t.Fatalf("genuine receipt: %+v", res)
	}
	other := good
	other.run = &audit.SealedRun{TaskID: "synth", RunRoot: wire.SHA256([]byte("x")), Height: 42, Election: s.in.Election}
	if res := audit.VerifyReceiptAgainst(ctx, other, s.raw, nil); res.Valid != 0 || !strings.Contains(res.Reason, "not the one committed on chain") || res.Root == nil {
		t.Fatalf("other root: %+v", res)
	}
	if res := audit.VerifyReceiptAgainst(ctx, fakeAnchor{err: errors.New("run synth is running")}, s.raw, nil); res.Valid != 0 {
		t.Fatalf("unsealed: %+v", res)
	}
	// A claimed root: the pure check, the chain is not read.
	if res := audit.VerifyReceiptAgainst(ctx, fakeAnchor{err: errors.New("unused")}, s.raw, s.rc.RunRoot[:]); res.Valid != 1 || res.Root != nil {
		t.Fatalf("claimed root: %+v", res)
	}
	forged := appendOutsider(t, s, key(t, did.KindMachine, 77))
	if res := audit.VerifyReceiptAgainst(ctx, good, forged, nil); res.Valid != 0 || !strings.Contains(res.Reason, "not the entrant the election on chain has") {
		t.Fatalf("outsider: %+v", res)
	}
	s = newSynthRun(t, 8, 3)
	el := *s.in.Election
	el.Candidates = append([]wire.ElectionEntrant{}, el.Candidates...)
	for i := range el.Candidates {
		if el.Candidates[i].DID == s.order[0].DID {
			el.Candidates[i].Stake = "5"
		}
	}
	bad := fakeAnchor{run: &audit.SealedRun{TaskID: "synth", RunRoot: s.rc.RunRoot, Election: &el}}
	if res := audit.VerifyReceiptAgainst(ctx, bad, s.raw, nil); res.Valid != 0 {
		t.Fatalf("election record differs: %+v", res)
	}
}

// TestNodeVerifiesAgainstItsState: a single node is its own anchor.
func TestNodeVerifiesAgainstItsState(t *testing.T) {
	kv, _ := store.OpenInMemory()
	h, raw := fullRun(t, kv, nil)
	res := audit.VerifyReceiptAgainst(h.ctx, h.node, raw, nil)
	if res.Valid != 1 || res.Root == nil {
		t.Fatalf("%+v", res)
	}
	var rc wire.Receipt
	_ = json.Unmarshal(raw, &rc)
	if *res.Root != rc.RunRoot {
		t.Fatal("root")
	}
}

// genericCanon is the generic canonical form: jcs.Transform(json.Marshal(rc)).
func genericCanon(t testing.TB, rc *wire.RoundCommit) []byte {
	raw, err := json.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCanonicalRoundCommitMatchesJCS: the direct encoder gives exactly the
// generic JCS bytes, for the synthetic commits and for every odd value
// (escapes, HTML characters, non-ASCII, control characters, invalid UTF-8,
// integers around 2^53, nil and empty lists, codecs, params).
func TestCanonicalRoundCommitMatchesJCS(t *testing.T) {
	s := newSynthRun(t, 3, 4)
	odd := s.in.Rounds[0]
	odd.Missed, odd.Evicted, odd.Joined, odd.Left, odd.Equivocations = nil, []string{`a"b\c`, "<&>", "é∑😀", "\u2028", "tab\there", "bad\xffutf8"}, []string{""}, nil, nil
	odd.Fragments = append([]wire.FragmentCommit{}, odd.Fragments...)
	odd.Fragments[0].Inputs = nil
	odd.Fragments[1].Inputs = []wire.CommitInput{}
	odd.Fragments[1].Reason = "quorum \x01 not met"
	odd.Fragments[2].Codec = &wire.CodecRef{Name: "int4-block", Hash: wire.SHA256([]byte("c")), Params: json.RawMessage(`{ "block" : 64, "a":[1.50, 2e3] }`)}
	odd.Fragments[2].RuleParams = json.RawMessage(`{"alpha_bps":1000,"z":null,"b":"\u00e9"}`)
	odd.Fragments[3].RuleParams = nil
	odd.Fragments[3].Inputs = append([]wire.CommitInput{}, odd.Fragments[3].Inputs...)
	odd.Fragments[3].Inputs[0].Rejected = "norm > bound"
	odd.Fragments[3].Inputs[1].Sketch = []byte{0xfb, 0xff, 0x00, 0x3e, 0x3f, 0x80} // base64 with '+' and '/'
	odd.Fragments[3].Scoring = &wire.CommitScoring{Evaluator: "TimesFMScore", Hash: wire.SHA256([]byte("e")), Params: json.RawMessage(`{"horizon":16, "context_len":64}`),
		RateBps: 2500, Batch: 8, Seed: wire.SHA256([]byte("seed")), Test: wire.ScoreTestOwnImproves}
	odd.Fragments[3].Inputs[1].Score = &wire.InputScore{OwnBefore: wire.F64Of(0.25), OwnAfter: wire.F64Of(-0.0), CtlBefore: 0x7ff8000000000001, CtlAfter: ^wire.F64(0), Pass: true}
	if len(odd.Fragments[3].Inputs) > 2 {
		odd.Fragments[3].Inputs[2].Score = &wire.InputScore{Failed: "out of fuel \"x\""}
	}
	cases := []wire.RoundCommit{s.in.Rounds[0], s.in.Rounds[2], odd, {}}
	for _, fuel := range []uint64{0, 1 << 53, 1<<53 + 1, 1 << 60, ^uint64(0)} {
		c := s.in.Rounds[1]
		c.Fragments = append([]wire.FragmentCommit{}, c.Fragments...)
		c.Fragments[0].Fuel, c.Round, c.Fragments[1].Ticket = fuel, fuel, fuel
		c.Fragments[2].Fragment = -3
		cases = append(cases, c)
	}
	for i := range cases {
		got, err := audit.CanonicalRoundCommit(&cases[i])
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if want := genericCanon(t, &cases[i]); !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// FuzzCanonicalRoundCommit: for any round commit JSON that decodes, the
// direct encoder and the generic JCS path agree byte for byte.
func FuzzCanonicalRoundCommit(f *testing.F) {
	s := newSynthRun(f, 2, 2)
	for i := range s.in.Rounds {
		raw, _ := json.Marshal(&s.in.Rounds[i])
		f.Add(raw)
	}
	f.Add([]byte(`{"task_id":"<\u0001>","round":9007199254740993,"fragments":[{"fragment":-1,"inputs":null,"rule_params":{"b":1,"a":[]},"codec":{"params":null}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var rc wire.RoundCommit
		if json.Unmarshal(b, &rc) != nil {
			return
		}
		raw, err := json.Marshal(&rc)
		if err != nil {
			return
		}
		want, err := jcs.Transform(raw)
		got, gerr := audit.CanonicalRoundCommit(&rc)
		if (err == nil) != (gerr == nil) {
			t.Fatalf("generic %v, direct %v", err, gerr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}
