package election

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// testKey derives a deterministic machine identity from a label.
func testKey(t testing.TB, label string) *did.Key {
	t.Helper()
	seed := sha256.Sum256([]byte("tenzro/test/election/" + label))
	k, err := did.FromSeed(did.KindMachine, seed[:])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func enter(t testing.TB, k *did.Key, stake int64, alpha []byte) Entrant {
	t.Helper()
	e, err := Enter(k.Priv, k.DID.String(), big.NewInt(stake), alpha)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAlpha(t *testing.T) {
	spec := sha256.Sum256([]byte("spec"))
	got := Alpha("task-1", spec)
	want := append(wire.NewCanon(Domain).Out(), 0, 0, 0, 0, 0, 0, 0, 6)
	want = append(want, "task-1"...)
	want = append(want, 0, 0, 0, 0, 0, 0, 0, 32)
	want = append(want, spec[:]...)
	if hex.EncodeToString(got) != hex.EncodeToString(want) {
		t.Fatalf("Alpha = %x, want %x", got, want)
	}
	if !strings.HasPrefix(string(got[8:]), "tenzro/train/election/v1") {
		t.Fatal("domain tag missing")
	}
}

// TestNegLnUAccuracy checks the 256-bit result against an independent
// evaluation at twice the working precision with more terms: they must be
// bit-identical (the documented algorithm is correctly rounded here).
func TestNegLnUAccuracy(t *testing.T) {
	const hiPrec = 1024
	third := newF(hiPrec).Quo(newF(hiPrec).SetInt64(1), newF(hiPrec).SetInt64(3))
	hiLn2 := atanh2(third, hiPrec, 340)
	vs := []uint64{0, 1, 2, 3, 1 << 32, 1<<63 - 1, 1 << 63, 0x6a09e667f3bcc908, 0xb504f333f9de6484, math.MaxUint64 - 1, math.MaxUint64}
	for i := range 200 {
		h := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		vs = append(vs, binary.BigEndian.Uint64(h[:8]))
	}
	for _, v := range vs {
		got := NegLnU(v)
		want := negLnU(v, hiPrec, 220, hiLn2)
		if got.Cmp(want) != 0 {
			t.Errorf("v=%#x: NegLnU = %s, high-precision = %s", v, got.Text('e', 80), want.Text('e', 80))
		}
		// Loose sanity against float64.
		u := (float64(v) + 1) / math.Exp2(64)
		f, _ := got.Float64()
		if d := math.Abs(f - (-math.Log(u))); d > 1e-12*math.Max(1, f) && !(v == math.MaxUint64 && f == 0) {
			t.Errorf("v=%#x: NegLnU ≈ %g, math.Log gives %g", v, f, -math.Log(u))
		}
	}
	if NegLnU(math.MaxUint64).Sign() != 0 {
		t.Error("u = 1 must give exactly 0")
	}
	if got, want := NegLnU(1<<63-1), newF(TicketPrec).Set(ln2()); got.Cmp(want) != 0 {
		t.Errorf("u = 1/2: %s, want ln 2 = %s", got.Text('e', 80), want.Text('e', 80))
	}
}

func TestTicketStringRoundTrip(t *testing.T) {
	for i := range 100 {
		h := sha256.Sum256([]byte{byte(i)})
		tk := Ticket{Value: TicketValue(h[:], big.NewInt(int64(i)*1e15+1))}
		s := tk.String()
		back, _, err := big.ParseFloat(s, 10, TicketPrec, big.ToNearestEven)
		if err != nil {
			t.Fatal(err)
		}
		if back.Cmp(tk.Value) != 0 {
			t.Fatalf("%s does not round-trip", s)
		}
		if !strings.Contains(s, "e") || len(strings.SplitN(s, "e", 2)[0]) != TicketDigits+1 {
			t.Fatalf("non-canonical form %q", s)
		}
	}
}

func TestElectAndCheck(t *testing.T) {
	alpha := Alpha("task-7", sha256.Sum256([]byte("spec-7")))
	keys := []*did.Key{testKey(t, "a"), testKey(t, "b"), testKey(t, "c")}
	es := []Entrant{enter(t, keys[0], 100, alpha), enter(t, keys[1], 200, alpha), enter(t, keys[2], 300, alpha)}
	w, ts, err := Elect(alpha, es)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ts {
		if i != w && ts[i].Less(ts[w]) {
			t.Fatalf("ticket %d beats the winner %d", i, w)
		}
	}
	if err := Check(alpha, es, es[w].DID); err != nil {
		t.Fatal(err)
	}
	other := es[(w+1)%3].DID
	if err := Check(alpha, es, other); !errors.Is(err, ErrWinner) {
		t.Fatalf("wrong claimed winner: %v", err)
	}
	// Order of entrants does not matter.
	rev := []Entrant{es[2], es[1], es[0]}
	w2, _, err := Elect(alpha, rev)
	if err != nil || rev[w2].DID != es[w].DID {
		t.Fatalf("permuted election chose %v (%v)", rev[w2].DID, err)
	}
	// Keys may be left out: they come from the DIDs.
	noKeys := append([]Entrant{}, es...)
	for i := range noKeys {
		noKeys[i].Key = nil
	}
	if err := Check(alpha, noKeys, es[w].DID); err != nil {
		t.Fatal(err)
	}

	rec, err := Record(alpha, es)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckRecord(rec); err != nil {
		t.Fatal(err)
	}
	tamper := []struct {
		name string
		mut  func(r *wire.Election)
		want error
	}{
		{"winner", func(r *wire.Election) { r.Winner = other }, ErrWinner},
		{"ticket", func(r *wire.Election) { r.Candidates[0].Ticket = "1e+00" }, ErrRecord},
		{"output", func(r *wire.Election) { r.Candidates[1].Output = make([]byte, 64) }, ErrRecord},
		{"stake", func(r *wire.Election) { r.Candidates[2].Stake = "301" }, ErrRecord},
		{"stake syntax", func(r *wire.Election) { r.Candidates[2].Stake = "0300" }, ErrEntrant},
		{"alpha", func(r *wire.Election) { r.Alpha = Alpha("task-8", sha256.Sum256([]byte("spec-7"))) }, ErrBadProof},
		{"proof", func(r *wire.Election) { r.Candidates[0].Proof[5] ^= 1 }, ErrBadProof},
	}
	for _, tc := range tamper {
		t.Run("tamper "+tc.name, func(t *testing.T) {
			r, err := Record(alpha, es)
			if err != nil {
				t.Fatal(err)
			}
			tc.mut(&r)
			if err := CheckRecord(r); !errors.Is(err, tc.want) {
				t.Fatalf("CheckRecord = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestElectRefuses(t *testing.T) {
	alpha := Alpha("task-1", wire.Hash{})
	a, b := testKey(t, "a"), testKey(t, "b")
	good := enter(t, a, 10, alpha)
	goodB := enter(t, b, 10, alpha)
	mut := func(f func(e *Entrant)) Entrant {
		e := good
		e.Proof = append([]byte{}, good.Proof...)
		f(&e)
		return e
	}
	cases := []struct {
		name string
		es   []Entrant
		want error
	}{
		{"none", nil, ErrNoEntrants},
		{"zero stake", []Entrant{mut(func(e *Entrant) { e.Stake = big.NewInt(0) })}, ErrEntrant},
		{"negative stake", []Entrant{mut(func(e *Entrant) { e.Stake = big.NewInt(-5) })}, ErrEntrant},
		{"nil stake", []Entrant{mut(func(e *Entrant) { e.Stake = nil })}, ErrEntrant},
		{"huge stake", []Entrant{mut(func(e *Entrant) { e.Stake = new(big.Int).Lsh(big.NewInt(1), 256) })}, ErrEntrant},
		{"bad DID", []Entrant{mut(func(e *Entrant) { e.DID = "did:example:x" })}, ErrEntrant},
		{"key mismatch", []Entrant{mut(func(e *Entrant) { e.Key = b.DID.Key })}, ErrEntrant},
		{"tampered proof", []Entrant{goodB, mut(func(e *Entrant) { e.Proof[79] ^= 1 })}, ErrBadProof},
		{"proof of other DID", []Entrant{mut(func(e *Entrant) { e.DID, e.Key = b.DID.String(), nil })}, ErrBadProof},
		{"proof over other alpha", []Entrant{enter(t, a, 10, Alpha("task-2", wire.Hash{}))}, ErrBadProof},
		{"duplicate", []Entrant{good, good}, ErrEntrant},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Elect(alpha, c.es)
			if !errors.Is(err, c.want) {
				t.Fatalf("Elect = %v, want %v", err, c.want)
			}
			if c.want == ErrBadProof && !strings.Contains(err.Error(), c.es[len(c.es)-1].DID) {
				t.Fatalf("error %q does not name the DID", err)
			}
		})
	}
}

func TestTieBreak(t *testing.T) {
	zero := newF(TicketPrec)
	one := newF(TicketPrec).SetInt64(1)
	ts := []Ticket{
		{DID: "did:tenzro:machine:zB", Value: one},
		{DID: "did:tenzro:machine:zC", Value: zero},
		{DID: "did:tenzro:machine:zA", Value: one},
		{DID: "did:tenzro:machine:zAb", Value: zero},
		{DID: "did:tenzro:machine:zAa", Value: zero},
	}
	if w := winnerOf(ts); ts[w].DID != "did:tenzro:machine:zAa" {
		t.Fatalf("winner %s, want the lowest DID among equal lowest tickets", ts[w].DID)
	}
	// Equal betas and equal stakes give bit-identical tickets.
	beta := make([]byte, 64)
	beta[0] = 0x80
	x, y := TicketValue(beta, big.NewInt(7)), TicketValue(beta, big.NewInt(7))
	if x.Cmp(y) != 0 {
		t.Fatal("same input, different tickets")
	}
	// Equal ratio: stake ×2 with −ln u ×2 (u = 1/4 vs u = 1/2).
	b4 := make([]byte, 64)
	binary.BigEndian.PutUint64(b4, 1<<62-1) // u = 1/4
	b2 := make([]byte, 64)
	binary.BigEndian.PutUint64(b2, 1<<63-1) // u = 1/2
	if TicketValue(b4, big.NewInt(2)).Cmp(TicketValue(b2, big.NewInt(1))) != 0 {
		t.Fatal("2·ln2/2 must equal ln2/1 exactly")
	}
	tt := []Ticket{
		{DID: "did:tenzro:machine:zZ", Value: TicketValue(b2, big.NewInt(1))},
		{DID: "did:tenzro:machine:zY", Value: TicketValue(b4, big.NewInt(2))},
	}
	if w := winnerOf(tt); w != 1 {
		t.Fatalf("tie went to %s", tt[w].DID)
	}
}

// TestStakeWeighting: a candidate with 3× the stake wins about 3× as often
// (expected 3/4 of the races). Deterministic inputs; loose bounds.
func TestStakeWeighting(t *testing.T) {
	// Full path (VRF proofs, verification) over many alphas.
	big3, small := testKey(t, "big"), testKey(t, "small")
	const n = 300
	wins := 0
	for i := range n {
		alpha := Alpha("task-"+string(rune('A'+i%26))+hex.EncodeToString([]byte{byte(i), byte(i >> 8)}), wire.Hash{})
		es := []Entrant{enter(t, big3, 3000, alpha), enter(t, small, 1000, alpha)}
		w, _, err := Elect(alpha, es)
		if err != nil {
			t.Fatal(err)
		}
		if w == 0 {
			wins++
		}
	}
	// mean 225, sd 7.5
	if wins < 190 || wins > 260 {
		t.Errorf("3× stake won %d of %d full elections, want ≈225", wins, n)
	}

	// Ticket arithmetic alone over many pseudo-random outputs.
	const m = 4000
	wins = 0
	for i := range m {
		h1 := sha256.Sum256(binary.BigEndian.AppendUint64([]byte("x"), uint64(i)))
		h2 := sha256.Sum256(binary.BigEndian.AppendUint64([]byte("y"), uint64(i)))
		if TicketValue(h1[:], big.NewInt(3)).Cmp(TicketValue(h2[:], big.NewInt(1))) < 0 {
			wins++
		}
	}
	// mean 3000, sd 27
	if wins < 2860 || wins > 3140 {
		t.Errorf("3× stake won %d of %d races, want ≈3000", wins, m)
	}
}

func TestParseStake(t *testing.T) {
	for _, s := range []string{"", "0", "00", "-1", "+1", "01", "1.5", "1e3", " 1", strings.Repeat("9", 81)} {
		if _, err := ParseStake(s); err == nil {
			t.Errorf("ParseStake(%q) accepted", s)
		}
	}
	if v, err := ParseStake("1000000000000000000000"); err != nil || v.String() != "1000000000000000000000" {
		t.Errorf("ParseStake: %v %v", v, err)
	}
}

func BenchmarkNegLnU(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		NegLnU(uint64(i) * 0x9e3779b97f4a7c15)
	}
}

func BenchmarkElect8(b *testing.B) {
	alpha := Alpha("bench", wire.Hash{})
	var es []Entrant
	for i := range 8 {
		es = append(es, enter(b, testKey(b, string(rune('a'+i))), int64(i+1)*1e18, alpha))
	}
	for b.Loop() {
		if _, _, err := Elect(alpha, es); err != nil {
			b.Fatal(err)
		}
	}
}
