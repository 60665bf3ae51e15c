package election

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"sync"

	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Domain is the domain tag of the election input.
const Domain = "tenzro/train/election/v1"

// Arithmetic parameters. They are part of the protocol: changing any of them
// changes tickets.
const (
	// WorkPrec is the mantissa precision, in bits, of every intermediate
	// step of the logarithm. All operations round to nearest, ties to even.
	WorkPrec = 512
	// TicketPrec is the precision of −ln(u) and of the ticket.
	TicketPrec = 256
	// LnTerms is the number of atanh series terms for ln(f), f in (√2/2, √2].
	LnTerms = 110
	// Ln2Terms is the number of atanh series terms for ln 2 = 2·atanh(1/3).
	Ln2Terms = 170
	// TicketDigits is the number of significant decimal digits of a
	// ticket's canonical string (enough to round-trip 256 bits).
	TicketDigits = 80
	// MaxEntrants bounds the candidates of one election.
	MaxEntrants = 10000
	// MaxStakeBits bounds a stake (attoTNZO) to 2^256−1.
	MaxStakeBits = 256
)

// Errors. Every error returned by this package wraps one of these.
var (
	ErrNoEntrants = errors.New("election: no entrants")
	ErrEntrant    = errors.New("election: bad entrant")
	ErrBadProof   = errors.New("election: VRF proof does not verify")
	ErrWinner     = errors.New("election: claimed winner is not the winner")
	ErrRecord     = errors.New("election: stored record does not match")
)

// Alpha is the VRF input of a run's election: the canonical encoding
// Str("tenzro/train/election/v1") ‖ Str(taskID) ‖ Hash(specHash).
func Alpha(taskID string, specHash wire.Hash) []byte {
	return wire.NewCanon(Domain).Str(taskID).Hash(specHash).Out()
}

// Entrant is one candidate: its DID, the Ed25519 key the DID resolves to
// (nil: taken from the DID), its stake in attoTNZO and its VRF proof over
// the election's alpha.
type Entrant struct {
	DID   string
	Key   ed25519.PublicKey
	Stake *big.Int
	Proof []byte
}

// Enter builds a candidate's entrant: it proves alpha with sk, whose public
// key must be the one didStr resolves to.
func Enter(sk ed25519.PrivateKey, didStr string, stake *big.Int, alpha []byte) (Entrant, error) {
	pi, err := vrf.Prove(sk, alpha)
	if err != nil {
		return Entrant{}, fmt.Errorf("election: entrant %s: %w", didStr, err)
	}
	e := Entrant{DID: didStr, Key: sk.Public().(ed25519.PublicKey), Stake: new(big.Int).Set(stake), Proof: pi}
	if _, err := e.key(); err != nil {
		return Entrant{}, err
	}
	return e, nil
}

// key checks the entrant's static fields and returns its public key.
func (e *Entrant) key() (ed25519.PublicKey, error) {
	d, err := did.Parse(e.DID)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrEntrant, e.DID, err)
	}
	if e.Key != nil && !bytes.Equal(e.Key, d.Key) {
		return nil, fmt.Errorf("%w %s: key %x is not the key the DID resolves to", ErrEntrant, e.DID, []byte(e.Key))
	}
	if e.Stake == nil || e.Stake.Sign() <= 0 {
		return nil, fmt.Errorf("%w %s: stake must be positive, got %v", ErrEntrant, e.DID, e.Stake)
	}
	if e.Stake.BitLen() > MaxStakeBits {
		return nil, fmt.Errorf("%w %s: stake has %d bits, limit %d", ErrEntrant, e.DID, e.Stake.BitLen(), MaxStakeBits)
	}
	return d.Key, nil
}

// Ticket is one entrant's result.
type Ticket struct {
	DID string
	// Beta is the 64-byte VRF output.
	Beta []byte
	// Value is −ln(u)/stake with TicketPrec bits of mantissa. Lower wins.
	Value *big.Float
}

// String is the ticket's canonical decimal form: Value in scientific
// notation with TicketDigits significant digits ("d.ddd…e±XX"), rounded
// half to even. It parses back (at TicketPrec bits) to exactly Value.
func (t Ticket) String() string {
	if t.Value == nil {
		return "<nil>"
	}
	return t.Value.Text('e', TicketDigits-1)
}

// Less reports whether t beats o: a lower value, or an equal value and a
// bytewise-lower DID.
func (t Ticket) Less(o Ticket) bool {
	if c := t.Value.Cmp(o.Value); c != 0 {
		return c < 0
	}
	return t.DID < o.DID
}

// Elect verifies every entrant's proof over alpha, computes the tickets and
// returns the index of the winner in es and the tickets in the order of es.
// A bad entrant (unparsable DID, key mismatch, zero or negative stake,
// duplicate DID) or a proof that does not verify is an error naming the DID.
func Elect(alpha []byte, es []Entrant) (winner int, tickets []Ticket, err error) {
	if len(es) == 0 {
		return -1, nil, ErrNoEntrants
	}
	if len(es) > MaxEntrants {
		return -1, nil, fmt.Errorf("%w: %d entrants, limit %d", ErrEntrant, len(es), MaxEntrants)
	}
	seen := make(map[string]struct{}, len(es))
	tickets = make([]Ticket, len(es))
	for i := range es {
		e := &es[i]
		pk, err := e.key()
		if err != nil {
			return -1, nil, err
		}
		if _, dup := seen[e.DID]; dup {
			return -1, nil, fmt.Errorf("%w %s: appears twice", ErrEntrant, e.DID)
		}
		seen[e.DID] = struct{}{}
		beta, err := vrf.Verify(pk, e.Proof, alpha)
		if err != nil {
			return -1, nil, fmt.Errorf("%w: entrant %s: %v", ErrBadProof, e.DID, err)
		}
		tickets[i] = Ticket{DID: e.DID, Beta: beta, Value: TicketValue(beta, e.Stake)}
	}
	return winnerOf(tickets), tickets, nil
}

// winnerOf returns the index of the lowest ticket (ties: lowest DID).
func winnerOf(ts []Ticket) int {
	w := 0
	for i := 1; i < len(ts); i++ {
		if ts[i].Less(ts[w]) {
			w = i
		}
	}
	return w
}

// Check re-runs the election and reports whether claimedWinnerDID won it.
func Check(alpha []byte, es []Entrant, claimedWinnerDID string) error {
	w, _, err := Elect(alpha, es)
	if err != nil {
		return err
	}
	if es[w].DID != claimedWinnerDID {
		return fmt.Errorf("%w: %s claimed, %s won", ErrWinner, claimedWinnerDID, es[w].DID)
	}
	return nil
}

// Record runs the election and returns its stored form.
func Record(alpha []byte, es []Entrant) (wire.Election, error) {
	w, ts, err := Elect(alpha, es)
	if err != nil {
		return wire.Election{}, err
	}
	rec := wire.Election{
		Alpha:      append(wire.HexBytes{}, alpha...),
		Winner:     es[w].DID,
		Candidates: make([]wire.ElectionEntrant, len(es)),
	}
	for i, e := range es {
		rec.Candidates[i] = wire.ElectionEntrant{
			DID:    e.DID,
			Stake:  e.Stake.String(),
			Proof:  append(wire.HexBytes{}, e.Proof...),
			Output: ts[i].Beta,
			Ticket: ts[i].String(),
		}
	}
	return rec, nil
}

// CheckRecord re-checks a stored election: every proof verifies, every
// stored output and ticket string equals the recomputed one, and the stored
// winner won. Keys come from the DIDs.
func CheckRecord(rec wire.Election) error {
	if len(rec.Candidates) > MaxEntrants {
		return fmt.Errorf("%w: %d entrants, limit %d", ErrEntrant, len(rec.Candidates), MaxEntrants)
	}
	es := make([]Entrant, len(rec.Candidates))
	for i, c := range rec.Candidates {
		stake, err := ParseStake(c.Stake)
		if err != nil {
			return fmt.Errorf("%w %s: %v", ErrEntrant, c.DID, err)
		}
		es[i] = Entrant{DID: c.DID, Stake: stake, Proof: c.Proof}
	}
	w, ts, err := Elect(rec.Alpha, es)
	if err != nil {
		return err
	}
	for i, c := range rec.Candidates {
		if !bytes.Equal(c.Output, ts[i].Beta) {
			return fmt.Errorf("%w: entrant %s: output %s, recomputed %s", ErrRecord, c.DID,
				hex.EncodeToString(c.Output), hex.EncodeToString(ts[i].Beta))
		}
		if c.Ticket != ts[i].String() {
			return fmt.Errorf("%w: entrant %s: ticket %s, recomputed %s", ErrRecord, c.DID, c.Ticket, ts[i].String())
		}
	}
	if es[w].DID != rec.Winner {
		return fmt.Errorf("%w: %s claimed, %s won", ErrWinner, rec.Winner, es[w].DID)
	}
	return nil
}

// ParseStake reads a canonical decimal attoTNZO amount: digits only, no
// sign, no leading zeros, positive, at most MaxStakeBits bits.
func ParseStake(s string) (*big.Int, error) {
	if s == "" || len(s) > 80 {
		return nil, fmt.Errorf("stake %q: want 1 to 80 decimal digits", s)
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return nil, fmt.Errorf("stake %q: not a decimal integer", s)
		}
	}
	if s[0] == '0' {
		return nil, fmt.Errorf("stake %q: must be positive, without leading zeros", s)
	}
	v, _ := new(big.Int).SetString(s, 10)
	if v.BitLen() > MaxStakeBits {
		return nil, fmt.Errorf("stake %q: more than %d bits", s, MaxStakeBits)
	}
	return v, nil
}

// TicketValue is RNE_256(RNE_256(−ln u) / stake) with u = (v+1)/2^64, v the
// big-endian uint64 in beta[0:8]. It panics if beta is shorter than 8 bytes
// or stake is not positive (Elect checks both).
func TicketValue(beta []byte, stake *big.Int) *big.Float {
	if stake.Sign() <= 0 {
		panic("election: non-positive stake")
	}
	l := NegLnU(binary.BigEndian.Uint64(beta[:8]))
	s := new(big.Float).SetInt(stake) // exact: precision = bit length
	return new(big.Float).SetPrec(TicketPrec).SetMode(big.ToNearestEven).Quo(l, s)
}

// NegLnU returns −ln(u), u = (v+1)/2^64, rounded to TicketPrec bits. The
// algorithm (docs/protocol/election.md §3):
//
//	m = v+1 ∈ [1, 2^64]; e = bitlen(m)−1; if m² > 2^(2e+1) then e = e+1
//	f = m/2^e ∈ (√2/2, √2]   (exact)
//	z = (f−1)/(f+1);  ln f = 2·Σ_{k=0}^{LnTerms−1} z^(2k+1)/(2k+1)
//	−ln u = (64−e)·ln2 − ln f
//
// with ln 2 = 2·atanh(1/3) by the same series (Ln2Terms terms), every step
// at WorkPrec bits rounding to nearest-even, and the result rounded once to
// TicketPrec bits.
func NegLnU(v uint64) *big.Float {
	return negLnU(v, WorkPrec, LnTerms, ln2())
}

func negLnU(v uint64, prec uint, terms int, ln2 *big.Float) *big.Float {
	m := new(big.Int).SetUint64(v)
	m.Add(m, big.NewInt(1))
	e := m.BitLen() - 1
	m2 := new(big.Int).Mul(m, m)
	if m2.Cmp(new(big.Int).Lsh(big.NewInt(1), uint(2*e+1))) > 0 {
		e++
	}
	f := newF(prec).SetInt(m)
	f.SetMantExp(f, -e) // exact
	one := newF(prec).SetInt64(1)
	num := newF(prec).Sub(f, one)
	den := newF(prec).Add(f, one)
	z := newF(prec).Quo(num, den)
	lnf := atanh2(z, prec, terms)
	k := newF(prec).SetInt64(int64(64 - e))
	r := newF(prec).Mul(k, ln2)
	r.Sub(r, lnf)
	return newF(TicketPrec).Set(r)
}

// atanh2 returns 2·atanh(z) = 2·Σ_{k=0}^{terms−1} z^(2k+1)/(2k+1), evaluated
// in the documented order: z2 = z·z; p = z; s = z; for k = 1…terms−1:
// p = p·z2; s = s + p/(2k+1); result 2·s (exact).
func atanh2(z *big.Float, prec uint, terms int) *big.Float {
	z2 := newF(prec).Mul(z, z)
	p := newF(prec).Set(z)
	s := newF(prec).Set(z)
	t := newF(prec)
	d := newF(prec)
	for k := 1; k < terms; k++ {
		p.Mul(p, z2)
		d.SetInt64(int64(2*k + 1))
		t.Quo(p, d)
		s.Add(s, t)
	}
	return s.SetMantExp(s, 1)
}

var ln2Once = sync.OnceValue(func() *big.Float {
	third := newF(WorkPrec).Quo(newF(WorkPrec).SetInt64(1), newF(WorkPrec).SetInt64(3))
	return atanh2(third, WorkPrec, Ln2Terms)
})

func ln2() *big.Float { return ln2Once() }

func newF(prec uint) *big.Float { return new(big.Float).SetPrec(prec).SetMode(big.ToNearestEven) }
