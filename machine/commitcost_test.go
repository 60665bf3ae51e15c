package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Syncer DIDs of the commit tests.
var synS, synO, syn0, syn1 = seedDID("S"), seedDID("O"), seedDID("0"), seedDID("1")

func seedDID(s string) string {
	k, err := did.FromSeed(did.KindMachine, []byte(strings.Repeat(s, 32)))
	if err != nil {
		panic(err)
	}
	return k.DID.String()
}

// ksCountKV counts the reads of one key space (heads: the reads of run
// headers among gets, in KSRuns) and keeps the writes committed through it.
type ksCountKV struct {
	KV
	ks                 Keyspace
	gets, scans, heads int
	writes             []string
}

func (c *ksCountKV) Commit(ctx context.Context, b *Batch) error {
	for _, op := range b.Ops {
		c.writes = append(c.writes, fmt.Sprintf("%s %q=%q", op.KS, op.Key, op.Value))
	}
	return c.KV.Commit(ctx, b)
}

func (c *ksCountKV) Get(ctx context.Context, ks Keyspace, k []byte) ([]byte, error) {
	if ks == c.ks {
		c.gets++
		if ks == KSRuns && IsRunKey(k) {
			c.heads++
		}
	}
	return c.KV.Get(ctx, ks, k)
}

func (c *ksCountKV) Scan(ctx context.Context, ks Keyspace, p []byte, fn func(k, v []byte) error) error {
	if ks == c.ks {
		c.scans++
	}
	return c.KV.Scan(ctx, ks, p, fn)
}

// commitState is storeRun's run with an elected syncer synS (ticket
// 0), or more entrants, and recs(f) records in fragment f.
func commitState(t *testing.T, trainers, frags int, recs func(f int) int, succession ...string) (*Overlay, *Run) {
	t.Helper()
	ctx := context.Background()
	state, _ := storeRun(t, trainers, trainers, frags, recs)
	r, err := LoadRun(ctx, state, "st")
	if err != nil {
		t.Fatal(err)
	}
	if len(succession) == 0 {
		succession = []string{synS}
	}
	r.Syncer, r.Succession = succession[0], succession
	x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 2, TimeMs: 6})
	if err := x.putRun(r); err != nil {
		t.Fatal(err)
	}
	if err := x.finish(); err != nil {
		t.Fatal(err)
	}
	return state, r
}

// aggregatedCommit is the commit of fragment f of r by syncer (ticket k):
// every record kept.
func aggregatedCommit(r *Run, f int, syncer string, k uint64) *wire.CommitFragmentTx {
	c := *BaseCommit(r, f)
	c.Syncer, c.Ticket, c.Status = syncer, k, wire.FragAggregated
	c.WeightsAfter = wire.SHA256([]byte(fmt.Sprint("w", f)))
	c.MomentumAfter = wire.SHA256([]byte(fmt.Sprint("m", f)))
	c.AggregateHash = wire.SHA256([]byte(fmt.Sprint("a", f)))
	c.Inputs = RecordInputs(r.Fragments[f].Records)
	return &wire.CommitFragmentTx{TaskID: "st", Round: r.Round, Fragment: uint64(f), Commit: c, SyncerDID: syncer}
}

func dumpState(t *testing.T, kv KV) string {
	t.Helper()
	var b strings.Builder
	for _, ks := range AllKeyspaces {
		if err := kv.Scan(context.Background(), ks, nil, func(k, v []byte) error {
			fmt.Fprintf(&b, "%s %q=%q\n", ks, k, v)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestCommitWritesWhatTheWholeRunWrites: a round's fragment commits, in
// order, out of order, by a later ticket and refused, write the same keys
// and bytes and give the same results whether each loads the header, its
// fragment and the trainers it pays (the commits that leave another
// fragment open) or the whole run (alwaysWholeRun); the state after the
// round, closed and sealed by its last commit, is the same byte for byte.
func TestCommitWritesWhatTheWholeRunWrites(t *testing.T) {
	type step struct {
		f      int
		syncer string
		ticket uint64
		timeMs int64
	}
	full := func(int) int { return 4 }
	for _, tc := range []struct {
		name       string
		recs       func(f int) int
		succession []string
		steps      []step
	}{
		{"in order", full, nil, []step{{0, synS, 0, 10}, {1, synS, 0, 10}, {2, synS, 0, 11}, {3, synS, 0, 12}}},
		{"out of order", full, nil, []step{{2, synS, 0, 10}, {0, synS, 0, 10}, {3, synS, 0, 11}, {1, synS, 0, 12}}},
		{"refused: twice, not due, wrong syncer; then after the grace window", func(f int) int { return []int{4, 2, 4, 4}[f] },
			nil, []step{{0, synS, 0, 10}, {0, synS, 0, 10}, {1, synS, 0, 11}, {2, synO, 0, 11}, {3, synS, 0, 12}, {2, synS, 0, 13}, {1, synS, 0, 2000}}},
		{"a later ticket after a missed turn", full, []string{syn0, syn1},
			[]step{{1, syn0, 0, 10}, {0, syn1, 1, 600_010}, {3, syn1, 1, 600_011}, {2, syn1, 1, 600_012}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := partialAsWhole(t, func() (string, string) {
				state, r := commitState(t, 4, 4, tc.recs, tc.succession...)
				var log strings.Builder
				for n, s := range tc.steps {
					x := NewMachine(MachineConfig{}).begin(context.Background(), state, Block{Height: int64(3 + n), TimeMs: s.timeMs, Hash: []byte{byte(n)}})
					p := aggregatedCommit(r, s.f, s.syncer, s.ticket)
					res, err := x.commitFragment(p)
					out, _ := json.Marshal(res)
					fmt.Fprintf(&log, "step %d: %s err=%v\n", n, out, err)
					if err != nil {
						continue
					}
					for _, op := range x.kv.Batch().Ops {
						fmt.Fprintf(&log, "  %s %q=%q\n", op.KS, op.Key, op.Value)
					}
					if err := x.finish(); err != nil {
						t.Fatal(err)
					}
				}
				return log.String(), dumpState(t, state)
			})
			if !strings.Contains(log, `"round_closed":true`) {
				t.Fatalf("the round did not close:\n%s", log)
			}
		})
	}
}

// partialAsWhole runs apply (it returns a log of what it did and the state
// it left) with the partial loads, then with the whole run at every load
// (alwaysWholeRun), and fails unless both give the same log and state; it
// returns the log.
func partialAsWhole(t *testing.T, apply func() (log, state string)) string {
	t.Helper()
	var logs, states [2]string
	for mode, whole := range []bool{false, true} {
		alwaysWholeRun = whole
		logs[mode], states[mode] = apply()
	}
	alwaysWholeRun = false
	if logs[0] != logs[1] {
		t.Fatalf("partial loads:\n%s\nwhole runs:\n%s", logs[0], logs[1])
	}
	if states[0] != states[1] {
		t.Fatalf("states differ:\n%s\nwhole runs:\n%s", states[0], states[1])
	}
	return logs[0]
}

// TestCommitCostFlat: a fragment commit that leaves another fragment open
// reads the same number of run keys in a run of 16 records and in one of
// 4,000 — the header, its fragment, its records (one scan), the trainers
// it pays and the next fragment's state — and writes the header, its
// fragment and those trainers only; the closing commit loads the whole run.
func TestCommitCostFlat(t *testing.T) {
	ctx := context.Background()
	for _, size := range []struct{ trainers, frags, full int }{{4, 4, 4}, {16, 256, 250}} {
		t.Run(fmt.Sprintf("records=%d", size.trainers*size.full), func(t *testing.T) {
			state, r := commitState(t, size.trainers, size.full, func(int) int { return size.trainers })
			ck := &ksCountKV{KV: state, ks: KSRuns}
			x := NewMachine(MachineConfig{}).begin(ctx, ck, Block{Height: 3, TimeMs: 10})
			if _, err := x.commitFragment(aggregatedCommit(r, 0, synS, 0)); err != nil {
				t.Fatal(err)
			}
			if want := 3 + size.trainers; ck.gets != want || ck.scans != 1 {
				t.Fatalf("commit of fragment 0: %d reads and %d scans of the run's keys, want %d and 1", ck.gets, ck.scans, want)
			}
			var keys []string
			for _, op := range x.kv.Batch().Ops {
				if op.KS == KSRuns {
					keys = append(keys, string(op.Key))
				}
			}
			want := []string{string(RunKey("st")), string(fragKey("st", 0))}
			for i := range size.trainers {
				want = append(want, string(trainerKey("st", fmt.Sprintf("t%03d", i))))
			}
			if strings.Join(keys, "|") != strings.Join(sortedStrings(want), "|") {
				t.Fatalf("commit wrote %q, want %q", keys, sortedStrings(want))
			}
			if err := x.finish(); err != nil {
				t.Fatal(err)
			}
			// Commits of fragments 2.. then 1: the last one closes the round
			// and reads every fragment, trainer and record.
			for f := 2; f < size.full; f++ {
				x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 4, TimeMs: 11})
				if _, err := x.commitFragment(aggregatedCommit(r, f, synS, 0)); err != nil {
					t.Fatal(err)
				}
				if err := x.finish(); err != nil {
					t.Fatal(err)
				}
			}
			ck = &ksCountKV{KV: state, ks: KSRuns}
			x = NewMachine(MachineConfig{}).begin(ctx, ck, Block{Height: 5, TimeMs: 12})
			res, err := x.commitFragment(aggregatedCommit(r, 1, synS, 0))
			if err != nil {
				t.Fatal(err)
			}
			if !res.RoundClosed || res.RunStatus != wire.StatusSealed {
				t.Fatalf("the last commit: %+v, want the round closed and the run sealed", res)
			}
			if ck.scans < 4 {
				t.Fatalf("the closing commit made %d scans of the run's keys: it did not load the whole run", ck.scans)
			}
		})
	}
}

// TestTimerSeedsWriteWhatTheWholeRunWrites: a scored run's timers drawing
// scoring seeds (the fragments all in at one block, one past its grace
// window at a later one) read the header and the fragment states only,
// not its enrolments and records, and leave the state byte for byte as
// the whole run's load does; the round deadline (no-quorum closures)
// still loads the whole run, alike.
func TestTimerSeedsWriteWhatTheWholeRunWrites(t *testing.T) {
	ctx := context.Background()
	blocks := []Block{{Height: 3, TimeMs: 10, Hash: []byte{3}}, {Height: 4, TimeMs: 20, Hash: []byte{4}},
		{Height: 5, TimeMs: 2000, Hash: []byte{5}}, {Height: 6, TimeMs: 700_000, Hash: []byte{6}}}
	var states [2][]string
	for mode, whole := range []bool{false, true} {
		alwaysWholeRun = whole
		state, r := commitState(t, 4, 4, func(f int) int { return []int{4, 4, 2, 0}[f] })
		r.Scorer = &RuleRef{Name: "TimesFMScore", Hash: wire.SHA256([]byte("ev"))}
		x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 2, TimeMs: 6})
		if err := x.putRun(r); err != nil {
			t.Fatal(err)
		}
		x.set(KSMeta, activeKey("st"), []byte{})
		if err := x.finish(); err != nil {
			t.Fatal(err)
		}
		for n, blk := range blocks {
			ck := &ksCountKV{KV: state, ks: KSRuns}
			if err := NewMachine(MachineConfig{}).BeginBlock(ctx, ck, blk); err != nil {
				t.Fatal(err)
			}
			if !whole && n == 0 && (ck.scans != 1 || ck.gets != 1) {
				// The header's bytes (the timer memo's key, then decoded
				// from the bytes read: a fresh machine's memo is empty),
				// the fragments' scan once, then the seeds: no enrolment,
				// record or attestation scan.
				t.Fatalf("block %d: %d reads and %d scans of the run's keys, want 1 and 1", blk.Height, ck.gets, ck.scans)
			}
			states[mode] = append(states[mode], strings.Join(ck.writes, "\n")+"\n--- state:\n"+dumpState(t, state))
		}
	}
	alwaysWholeRun = false
	for n := range blocks {
		if states[0][n] != states[1][n] {
			t.Fatalf("after block %d:\n%s\nwhole runs:\n%s", blocks[n].Height, states[0][n], states[1][n])
		}
	}
	for n, want := range []int{2, 2, 3, 3} {
		_, st, _ := strings.Cut(states[0][n], "--- state:")
		if got := strings.Count(st, `score_seed`); got != want {
			t.Fatalf("after block %d: %d seeds drawn, want %d", blocks[n].Height, got, want)
		}
	}
	if !strings.Contains(states[0][3], "round deadline passed") {
		t.Fatalf("the deadline closed nothing:\n%s", states[0][3])
	}
}

// BenchmarkCommitFragment measures a fragment commit's transition (in
// memory, no tree) in a round of N records (16 trainers, N/16 fragments
// of 16 records each): "open" commits fragment 0 while others are open,
// "close" commits the last open fragment (the round closes and the run
// seals); load=part is this tree, load=whole the whole-run load every
// commit made before (alwaysWholeRun).
//
//	go test ./machine -run '^$' -bench CommitFragment -benchtime 20x
func BenchmarkCommitFragment(b *testing.B) {
	ctx := context.Background()
	t := &testing.T{}
	for _, n := range []int{500, 2000, 4000} {
		frags := n / 16
		for _, which := range []string{"open", "close"} {
			for _, whole := range []bool{false, true} {
				load := map[bool]string{false: "part", true: "whole"}[whole]
				b.Run(fmt.Sprintf("N=%d/%s/load=%s", frags*16, which, load), func(b *testing.B) {
					state, r := commitState(t, 16, frags, func(int) int { return 16 })
					if which == "close" {
						for f := 1; f < frags; f++ {
							x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 3, TimeMs: 10})
							if _, err := x.commitFragment(aggregatedCommit(r, f, synS, 0)); err != nil {
								b.Fatal(err)
							}
							if err := x.finish(); err != nil {
								b.Fatal(err)
							}
						}
					}
					p := aggregatedCommit(r, 0, synS, 0)
					alwaysWholeRun = whole
					defer func() { alwaysWholeRun = false }()
					b.ResetTimer()
					for range b.N {
						x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 4, TimeMs: 11})
						res, err := x.commitFragment(p)
						if err != nil {
							b.Fatal(err)
						}
						if res.RoundClosed != (which == "close") {
							b.Fatalf("round closed: %v", res.RoundClosed)
						}
						var bt Batch
						if err := x.lt.flush(&bt); err != nil {
							b.Fatal(err)
						}
						_ = x.kv.Batch()
					}
				})
			}
		}
	}
}
