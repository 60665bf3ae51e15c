package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// trainerKeyN is the key of the enrolment tests' trainer n.
func trainerKeyN(n int) *did.Key {
	seed := wire.SHA256([]byte(fmt.Sprint("trainer ", n)))
	k, err := did.FromSeed(did.KindMachine, seed[:])
	if err != nil {
		panic(err)
	}
	return k
}

func trainerDIDN(n int) string { return trainerKeyN(n).DID.String() }

// reportVerifier accepts any envelope; its digest binds the envelope and
// the report data.
type reportVerifier struct{}

func (reportVerifier) VerifyEvidence(_ context.Context, _ string, _, envelope []byte, _ time.Time, rd wire.Hash) (wire.Hash, error) {
	return wire.SHA256(append(append([]byte{}, envelope...), rd[:]...)), nil
}

// enrolEvidence is trainer d's enrolment evidence for r (awaiting: round
// 0, the posting's anchor, the initial model), as reportVerifier digests it.
func enrolEvidence(t *testing.T, r *Run, d string) *wire.EvidenceRef {
	t.Helper()
	prog := wire.SHA256([]byte("program"))
	claim := wire.AttestationClaim{Envelope: json.RawMessage(`{"quote":1}`), Nonce: AttestNonce(r.spec.TaskID, d, r.Round, r.RoundAnchor), ProgramHash: prog}
	raw, err := json.Marshal(claim)
	if err != nil {
		t.Fatal(err)
	}
	rd := wire.AttestReportData(prog, 0, r.InitModel, d, claim.Nonce, wire.Hash{})
	dg, _ := reportVerifier{}.VerifyEvidence(context.Background(), "", nil, claim.Envelope, time.Time{}, rd)
	return &wire.EvidenceRef{Hash: wire.ContentHash(raw), Size: uint64(len(raw)), Digest: dg, Claim: raw}
}

// enrolRun is an awaiting run of M = m trainers (with initial weights
// over 2 fragments when init): trainer n has status st[n] (one of
// Active, Left, Evicted; the test's DIDs, in DID order), each with a
// stake of 1. set adds spec members.
func enrolRun(t *testing.T, m int, init bool, st []string, set map[string]any) *Run {
	t.Helper()
	r := testRun(t, m, 2, set)
	r.Status, r.RoundAnchor, r.Attestations = wire.StatusAwaiting, wire.HexBytes{7}, nil
	for n, s := range st {
		r.Trainers = append(r.Trainers, &RunTrainer{DID: trainerDIDN(n), Status: s, Stake: "1", Weight: "0", Reward: "0", Slashed: "0"})
	}
	r.Trainers = sortedTrainers(r.Trainers)
	if init {
		r.HasInit, r.InitModel, r.RoundModel = true, wire.SHA256([]byte("m")), wire.SHA256([]byte("m"))
		for f := range 2 {
			r.Fragments = append(r.Fragments, &RunFragment{FragLayout: FragLayout{Dtype: F32, N: 1, Tensors: []wire.TensorInfo{{Name: fmt.Sprint("w", f), Dtype: "F32", Shape: []int64{1}}}},
				WeightsHash: wire.SHA256([]byte{byte(f)})})
		}
	}
	return r
}

func sortedTrainers(ts []*RunTrainer) []*RunTrainer {
	r := &Run{}
	for _, t := range ts {
		r.addTrainer(t)
	}
	return r.Trainers
}

// The syncer candidate of the enrolment tests.
var candKey = func() *did.Key {
	k, err := did.FromSeed(did.KindMachine, []byte(strings.Repeat("C", 32)))
	if err != nil {
		panic(err)
	}
	return k
}()

// candidateProof is candKey's election proof for run "st" of spec hash sh.
func candidateProof(t *testing.T, sh wire.Hash) []byte {
	t.Helper()
	e, err := election.Enter(candKey.Priv, candKey.DID.String(), big.NewInt(1e18), election.Alpha("st", sh))
	if err != nil {
		t.Fatal(err)
	}
	return e.Proof
}

// What fundEnrolment does for the syncer candidate.
const (
	noCandidate = iota
	candidate   // registered
	candidateProved
)

// fundEnrolment writes r, funds trainers 0..n-1 and registers the syncer
// candidate (cand: with its election proof for r).
func fundEnrolment(t *testing.T, r *Run, n, cand int) *Overlay {
	t.Helper()
	ctx := context.Background()
	state := putState(t, r)
	x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 1})
	for i := range n {
		if err := x.lt.transfer(acctIssuer, AcctDID(trainerDIDN(i)), big.NewInt(1e18), "fund"); err != nil {
			t.Fatal(err)
		}
	}
	if cand != noCandidate {
		k := candKey.DID.String()
		if err := x.putJSON(KSMeta, CandKey(k), wire.SyncerCandidate{DID: k, Stake: "1000000000000000000"}); err != nil {
			t.Fatal(err)
		}
	}
	if cand == candidateProved {
		x.set(KSMeta, ProofKey("st", candKey.DID.String()), candidateProof(t, r.SpecHash))
	}
	if err := x.finish(); err != nil {
		t.Fatal(err)
	}
	return state
}

// enrolStep is one enrolment: trainer n (-1: an invalid DID) with stake;
// evidence attaches its enrolment evidence. Trainer proof is the
// candidate's election proof instead, and stake leaves trainer n leaving.
type enrolStep struct {
	n        int
	stake    string
	evidence bool
}

const (
	proof   = -2
	setInit = -3 // the sponsor sets initLayout
	leaves  = "leaves"
)

// initLayout is initial weights for enrolRun's two fragments.
func initLayout() wire.InitLayout {
	l := wire.InitLayout{File: wire.SHA256([]byte("file"))}
	var hashes []wire.Hash
	for f := range 2 {
		h := wire.SHA256([]byte{byte(f)})
		l.Fragments = append(l.Fragments, wire.FragmentLayout{Tensors: []wire.TensorInfo{{Name: fmt.Sprint("w", f), Dtype: "F32", Shape: []int64{1}}}, Dtype: "F32", N: 1, WeightsHash: h})
		hashes = append(hashes, h)
	}
	l.Model = ModelHash(hashes)
	return l
}

// TestEnrollWritesWhatTheWholeRunWrites: enrolments into runs with no,
// one and many trainers — accepted, re-enrolled after leaving, refused
// (enrolled twice, evicted, below the run's min_stake, the run full, no
// settlement line left, the run over) and the one that starts the run —,
// election proofs and initial weights (before M trainers, the one that
// starts the run, too late) and leaving (before the start and from a running run, active or
// joining; refused when not enrolled) give the same results and write the
// same keys and bytes whether each loads the header and its own enrolment
// or the whole run (alwaysWholeRun).
func TestEnrollWritesWhatTheWholeRunWrites(t *testing.T) {
	const A, L, E = wire.TrainerActive, wire.TrainerLeft, wire.TrainerEvicted
	many := make([]string, wire.MaxTrainers-1)
	for i := range many {
		many[i] = L
	}
	many[3] = A
	for _, tc := range []struct {
		name      string
		m         int
		init      bool
		st        []string
		set       map[string]any
		candidate int
		status    string
		steps     []enrolStep
		want      []string // in the log, in order
	}{
		{name: "no trainers, up to full, then refused", m: 3, steps: []enrolStep{{0, "20000000000000000", false}, {1, "20000000000000000", false},
			{0, "20000000000000000", false}, {2, "30000000000000000", false}, {3, "20000000000000000", false}},
			want: []string{"already enrolled", "is full"}},
		{name: "one trainer; stake refused, then accepted", m: 4, st: []string{A}, set: map[string]any{"min_stake": "50000000000000000"},
			steps: []enrolStep{{1, "0", false}, {1, "40000000000000000", false}, {1, "50000000000000000", false}, {0, "50000000000000000", false}, {-1, "50000000000000000", false}},
			want:  []string{`stake is "0"`, "below the run's min_stake", "already enrolled", "trainer_did"}},
		{name: "many who left and one evicted: rejoin, refused", m: 8, init: true, st: []string{A, L, E, L, A},
			steps: []enrolStep{{1, "20000000000000000", false}, {2, "20000000000000000", false}, {3, "20000000000000000", false}, {5, "20000000000000000", false}},
			want:  []string{"evicted"}},
		{name: "the enrolment that starts the run", m: 3, init: true, st: []string{A}, candidate: candidateProved,
			steps: []enrolStep{{1, "20000000000000000", false}, {2, "20000000000000000", false}, {3, "20000000000000000", false}},
			want:  []string{`"run_status":"running"`, "is full"}},
		{name: "election proofs: before M, the one that starts the run, too late", m: 3, init: true, st: []string{A}, candidate: candidate,
			steps: []enrolStep{{proof, "", false}, {1, "20000000000000000", false}, {proof, "", false}, {2, "20000000000000000", false}, {proof, "", false}},
			want:  []string{`"run_status":"awaiting_enrollment"`, `"run_status":"awaiting_enrollment"`, "its election is over"}},
		{name: "election proofs: M trainers, the proof starts the run", m: 2, init: true, st: []string{A, A}, candidate: candidate,
			steps: []enrolStep{{proof, "", false}, {proof, "", false}}, want: []string{`\"status\":\"running\"`, "its election is over"}},
		{name: "initial weights before M trainers; the enrolment that starts the run", m: 3, st: []string{A}, candidate: candidateProved,
			steps: []enrolStep{{setInit, "", false}, {1, "20000000000000000", false}, {setInit, "", false}, {2, "20000000000000000", false}},
			want:  []string{`"status":"awaiting_enrollment"`, `runs "st/f/`, "already has initial weights", `"run_status":"running"`}},
		{name: "initial weights with M trainers start the run", m: 2, st: []string{A, A}, candidate: candidateProved,
			steps: []enrolStep{{setInit, "", false}, {setInit, "", false}}, want: []string{`"status":"running"`, "already has initial weights"}},
		{name: "M trainers, no election proof yet", m: 2, init: true, st: []string{A},
			steps: []enrolStep{{1, "20000000000000000", false}, {2, "20000000000000000", false}},
			want:  []string{`"run_status":"awaiting_enrollment"`, "is full"}},
		{name: "every settlement line taken", m: wire.MaxTrainers, st: many,
			steps: []enrolStep{{wire.MaxTrainers - 1, "20000000000000000", false}, {wire.MaxTrainers, "20000000000000000", false}, {7, "20000000000000000", false}},
			want:  []string{"settlement lines for 256 trainers"}},
		{name: "Verified tier: evidence counted", m: 4, st: []string{A}, set: map[string]any{"tier": "Verified"},
			steps: []enrolStep{{1, "20000000000000000", true}, {2, "20000000000000000", false}, {2, "20000000000000000", true}, {3, "20000000000000000", true}},
			want:  []string{`runs "st/a/`, "attestation evidence is required", `runs "st/a/`}},
		{name: "a running run: joining", m: 3, init: true, st: []string{A, A}, status: wire.StatusRunning,
			steps: []enrolStep{{2, "20000000000000000", false}, {2, "20000000000000000", false}},
			want:  []string{`"status":"joining"`, "already enrolled"}},
		{name: "a cancelled run", m: 2, st: []string{A}, status: wire.StatusCancelled,
			steps: []enrolStep{{1, "20000000000000000", false}, {0, leaves, false}}, want: []string{"is cancelled", "is cancelled"}},
		{name: "leaving before the start, and rejoining", m: 3, init: true, st: []string{A, L},
			steps: []enrolStep{{2, "20000000000000000", false}, {0, leaves, false}, {0, leaves, false}, {1, leaves, false}, {3, leaves, false},
				{0, "30000000000000000", false}, {2, leaves, false}},
			want: []string{`"status":"left"`, "is not enrolled", "is not enrolled", "is not enrolled", `"status":"active"`, `"status":"left"`}},
		{name: "leaving a running run: active, joining", m: 3, init: true, st: []string{A, A, L}, status: wire.StatusRunning,
			steps: []enrolStep{{3, "20000000000000000", false}, {1, leaves, false}, {3, leaves, false}, {2, leaves, false}},
			want:  []string{`"status":"joining"`, `"status":"left"`, `"status":"left"`, "is not enrolled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := partialAsWhole(t, func() (string, string) {
				r := enrolRun(t, tc.m, tc.init, tc.st, tc.set)
				if tc.status != "" {
					r.Status = tc.status
				}
				funded := len(tc.st)
				for _, s := range tc.steps {
					funded = max(funded, s.n+1)
				}
				state := fundEnrolment(t, r, funded, tc.candidate)
				var log strings.Builder
				for n, s := range tc.steps {
					ck := &ksCountKV{KV: state, ks: KSRuns}
					x := NewMachine(MachineConfig{Evidence: reportVerifier{}}).begin(context.Background(), ck, Block{Height: int64(3 + n), TimeMs: int64(10 + n), Hash: []byte{byte(n)}})
					p := &wire.EnrollTx{TaskID: "st", TrainerDID: "did:tenzro:nobody", Stake: s.stake}
					if s.n >= 0 {
						p.TrainerDID = trainerDIDN(s.n)
					}
					if s.evidence {
						p.Evidence = enrolEvidence(t, r, p.TrainerDID)
					}
					var res any
					var err error
					switch {
					case s.n == proof:
						res, err = x.electionProof(&wire.ElectionProofParams{TaskID: "st", DID: candKey.DID.String(), Proof: candidateProof(t, r.SpecHash)})
					case s.n == setInit:
						res, err = x.setInitWeights(&wire.SetInitWeightsTx{TaskID: "st", Init: initLayout()})
					case s.stake == leaves:
						res, err = x.leave(&wire.LeaveParams{TaskID: "st", TrainerDID: p.TrainerDID})
					default:
						res, err = x.enroll(p)
					}
					out, _ := json.Marshal(res)
					fmt.Fprintf(&log, "step %d: %s err=%v\n", n, out, err)
					if err != nil {
						continue
					}
					if err := x.finish(); err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&log, "  %s\n", strings.Join(ck.writes, "\n  "))
				}
				return log.String(), dumpState(t, state)
			})
			rest := log
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("%q not in the log (in order):\n%s", w, log)
				}
				rest = rest[i:]
			}
		})
	}
}

// TestEnrollCostFlat: an enrolment into an awaiting run reads the same
// number of the run's keys with 16 trainers enrolled and with 254 — the
// header, its own enrolment and (a new DID) one count of the enrolment
// keys, which decodes none of them — and writes the header and its own
// enrolment only; so does leaving.
func TestEnrollCostFlat(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{16, wire.MaxTrainers - 2} {
		t.Run(fmt.Sprintf("trainers=%d", size), func(t *testing.T) {
			st := make([]string, size)
			for i := range st {
				st[i] = wire.TrainerActive
			}
			r := enrolRun(t, wire.MaxTrainers, false, st, nil)
			state := fundEnrolment(t, r, size+1, noCandidate)
			for _, n := range []int{size, 0} { // a new DID, then one enrolled
				ck := &ksCountKV{KV: state, ks: KSRuns}
				x := NewMachine(MachineConfig{}).begin(ctx, ck, Block{Height: 3, TimeMs: 10})
				_, err := x.enroll(&wire.EnrollTx{TaskID: "st", TrainerDID: trainerDIDN(n), Stake: "20000000000000000"})
				scans := map[bool]int{true: 1, false: 0}[n == size]
				if ck.gets != 2 || ck.scans != scans {
					t.Fatalf("enrolment of trainer %d: %d reads and %d scans of the run's keys, want 2 and %d", n, ck.gets, ck.scans, scans)
				}
				if n != size {
					if err == nil || !strings.Contains(err.Error(), "already enrolled") {
						t.Fatalf("re-enrolment: %v", err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				keys := runKeysWritten(x)
				want := sortedStrings([]string{string(RunKey("st")), string(trainerKey("st", trainerDIDN(n)))})
				if strings.Join(keys, "|") != strings.Join(want, "|") {
					t.Fatalf("enrolment wrote %q, want %q", keys, want)
				}
				if err := x.finish(); err != nil {
					t.Fatal(err)
				}
			}
			// Leaving reads and writes the header and its enrolment only.
			ck := &ksCountKV{KV: state, ks: KSRuns}
			x := NewMachine(MachineConfig{}).begin(ctx, ck, Block{Height: 4, TimeMs: 11})
			if _, err := x.leave(&wire.LeaveParams{TaskID: "st", TrainerDID: trainerDIDN(1)}); err != nil {
				t.Fatal(err)
			}
			if ck.gets != 2 || ck.scans != 0 {
				t.Fatalf("leaving: %d reads and %d scans of the run's keys, want 2 and 0", ck.gets, ck.scans)
			}
			if keys := runKeysWritten(x); strings.Join(keys, "|") != strings.Join(sortedStrings([]string{string(RunKey("st")), string(trainerKey("st", trainerDIDN(1)))}), "|") {
				t.Fatalf("leaving wrote %q", keys)
			}
		})
	}
}

// runKeysWritten lists the KSRuns keys x wrote, in key order.
func runKeysWritten(x *mtx) []string {
	var keys []string
	for _, op := range x.kv.Batch().Ops {
		if op.KS == KSRuns {
			keys = append(keys, string(op.Key))
		}
	}
	return keys
}

// BenchmarkEnroll measures one enrolment's transition (in memory, no tree)
// into an awaiting run of T trainers: load=part is this tree, load=whole
// the whole-run load every enrolment made before (alwaysWholeRun).
//
//	go test ./machine -run '^$' -bench Enroll -benchtime 200x
func BenchmarkEnroll(b *testing.B) {
	ctx := context.Background()
	t := &testing.T{}
	for _, n := range []int{16, 128, wire.MaxTrainers - 2} {
		st := make([]string, n)
		for i := range st {
			st[i] = wire.TrainerActive
		}
		state := fundEnrolment(t, enrolRun(t, wire.MaxTrainers, false, st, nil), n+1, noCandidate)
		p := &wire.EnrollTx{TaskID: "st", TrainerDID: trainerDIDN(n), Stake: "20000000000000000"}
		for _, whole := range []bool{false, true} {
			b.Run(fmt.Sprintf("T=%d/load=%s", n, map[bool]string{false: "part", true: "whole"}[whole]), func(b *testing.B) {
				alwaysWholeRun = whole
				defer func() { alwaysWholeRun = false }()
				for range b.N {
					x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 3, TimeMs: 10})
					if _, err := x.enroll(p); err != nil {
						b.Fatal(err)
					}
					var bt Batch
					if err := x.lt.flush(&bt); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
