package machine

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/tenzro/train/wire"
)

func dealDIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("did:t:%02d", i)
	}
	return out
}

// TestDealShardsOneHolder: without shard_holders the deal is PROTOCOL §5's
// shard s → active trainer s mod n in DID order, whatever the anchor.
func TestDealShardsOneHolder(t *testing.T) {
	for _, n := range []int{1, 2, 5, 12} {
		for _, shards := range []int{1, 5, 12, 13} {
			for _, anchor := range [][]byte{nil, []byte("a"), []byte("b")} {
				got := DealShards("t", 3, anchor, dealDIDs(n), shards, 1)
				want := make([][]int, n)
				for s := 0; s < shards; s++ {
					want[s%n] = append(want[s%n], s)
				}
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Fatalf("n=%d S=%d anchor %q: trainer %d holds %v, want %v", n, shards, anchor, i, got[i], want[i])
					}
				}
			}
		}
	}
	if got := DealShards("t", 0, nil, nil, 4, 2); len(got) != 0 {
		t.Fatalf("no active trainer: %v", got)
	}
}

// TestDealShardsTwoHolders: with two holders every shard has two distinct
// holders (one when a single trainer is active), each trainer's list is
// ascending without repeats, and the load differs by at most two shards.
func TestDealShardsTwoHolders(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 6, 12} {
		for _, shards := range []int{1, 2, 5, 12, 13} {
			deal := DealShards("task", 1, []byte("anchor"), dealDIDs(n), shards, 2)
			holders := make([]int, shards)
			lo, hi := shards*2, 0
			for i, sh := range deal {
				if !slices.IsSorted(sh) || len(slices.Compact(slices.Clone(sh))) != len(sh) {
					t.Fatalf("n=%d S=%d: trainer %d holds %v", n, shards, i, sh)
				}
				for _, s := range sh {
					holders[s]++
				}
				lo, hi = min(lo, len(sh)), max(hi, len(sh))
			}
			for s, h := range holders {
				if h != min(2, n) {
					t.Fatalf("n=%d S=%d: shard %d has %d holders, want %d", n, shards, s, h, min(2, n))
				}
			}
			if n >= 2 && hi-lo > 2 {
				t.Fatalf("n=%d S=%d: loads %d..%d", n, shards, lo, hi)
			}
		}
	}
}

// TestDealShardsDrawnByAnchor: the pairing is a function of (task, round,
// anchor, DIDs) only — the same inputs give the same bytes (pinned) — and
// a new anchor draws a new ring, so a DID chosen at enrolment does not
// choose its co-holders: over 3000 anchors two given trainers of 12 share
// a shard in about 2/(n−1) = 18.2% of rounds (adjacent in the ring), and
// a given shard is held by two given trainers in about 2/(n(n−1)) = 1.5%.
func TestDealShardsDrawnByAnchor(t *testing.T) {
	dids := dealDIDs(12)
	deal := DealShards("t", 7, []byte("anchor"), dids, 12, 2)
	raw, _ := json.Marshal(deal)
	if got := wire.SHA256(raw).String(); got != dealGolden {
		t.Fatalf("deal %s hashes %s, pinned %s", raw, got, dealGolden)
	}
	if again, _ := json.Marshal(DealShards("t", 7, []byte("anchor"), dids, 12, 2)); string(again) != string(raw) {
		t.Fatal("the same inputs deal differently")
	}
	for _, other := range [][][]int{
		DealShards("t", 7, []byte("anchor2"), dids, 12, 2),
		DealShards("t", 8, []byte("anchor"), dids, 12, 2),
		DealShards("u", 7, []byte("anchor"), dids, 12, 2),
	} {
		if o, _ := json.Marshal(other); string(o) == string(raw) {
			t.Fatal("another anchor, round or task dealt the same")
		}
	}
	const rounds = 3000
	pairRounds, shard0 := 0, 0
	for k := 0; k < rounds; k++ {
		d := DealShards("t", 0, []byte(fmt.Sprint(k)), dids, 12, 2)
		shared := false
		for _, s := range d[0] {
			if slices.Contains(d[1], s) {
				shared = true
				if s == 0 {
					shard0++
				}
			}
		}
		if shared {
			pairRounds++
		}
	}
	if f := float64(pairRounds) / rounds; f < 0.16 || f > 0.205 {
		t.Fatalf("trainers 0 and 1 co-hold in %.3f of rounds, want ≈ %.3f", f, 2.0/11)
	}
	if f := float64(shard0) / rounds; f < 0.008 || f > 0.023 {
		t.Fatalf("trainers 0 and 1 hold shard 0 together in %.4f of rounds, want ≈ %.4f", f, 2.0/132)
	}
}

// dealGolden pins DealShards("t", 7, "anchor", 12 DIDs, 12, 2); Python
// recomputes it from scoring.md §3.1 (trainer/tests/test_shard_deal.py).
const dealGolden = "b9bcc5cbb6274ece2f1484649c0cf4bb40ff60d147bfbbc6201fac072e926332"

// TestAssignShardsHolders: a run deals only to its active trainers, by
// its spec's shard_holders and the round's anchor.
func TestAssignShardsHolders(t *testing.T) {
	two := wire.ShardHoldersPaired
	for _, tc := range []struct {
		name    string
		holders *int
	}{{"one", nil}, {"two", &two}} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Run{spec: &wire.TaskSpec{TaskID: "t", TrainerCount: 4, ShardCount: 6, ShardHolders: tc.holders},
				Round: 2, RoundAnchor: wire.HexBytes("block")}
			for i, st := range []string{wire.TrainerActive, wire.TrainerJoining, wire.TrainerActive, wire.TrainerActive} {
				r.Trainers = append(r.Trainers, &RunTrainer{DID: dealDIDs(4)[i], Status: st, Shards: []int{9}})
			}
			r.assignShards()
			want := DealShards("t", 2, []byte("block"), []string{dealDIDs(4)[0], dealDIDs(4)[2], dealDIDs(4)[3]}, 6, r.spec.Holders())
			if r.Trainers[1].Shards != nil {
				t.Fatalf("a joining trainer holds %v", r.Trainers[1].Shards)
			}
			for i, ti := range []int{0, 2, 3} {
				if !slices.Equal(r.Trainers[ti].Shards, want[i]) {
					t.Fatalf("trainer %d holds %v, want %v", ti, r.Trainers[ti].Shards, want[i])
				}
			}
			total := 0
			for _, tr := range r.Trainers {
				total += len(tr.Shards)
			}
			if total != 6*r.spec.Holders() {
				t.Fatalf("%d shard holdings, want %d", total, 6*r.spec.Holders())
			}
		})
	}
}
