package machine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// countKV counts the reads a load makes of the state under it.
type countKV struct {
	KV
	gets, scans int
}

func (c *countKV) Get(ctx context.Context, ks Keyspace, k []byte) ([]byte, error) {
	c.gets++
	return c.KV.Get(ctx, ks, k)
}

func (c *countKV) Scan(ctx context.Context, ks Keyspace, p []byte, fn func(k, v []byte) error) error {
	c.scans++
	return c.KV.Scan(ctx, ks, p, fn)
}

// storeRun is a running run "st" of trainers DIDs t000… (the first active
// ones active, the rest joining) and frags fragments, fragment f holding
// records from its first recs[f] trainers, written into a fresh state.
func storeRun(t *testing.T, trainers, active, frags int, recs func(f int) int) (*Overlay, *Run) {
	t.Helper()
	r := testRun(t, trainers, frags, nil)
	for i := range trainers {
		st := wire.TrainerActive
		if i >= active {
			st = wire.TrainerJoining
		}
		r.Trainers = append(r.Trainers, &RunTrainer{DID: fmt.Sprintf("t%03d", i), Status: st, Stake: "1", Weight: "0"})
	}
	for f := range frags {
		fs := &RunFragment{FragLayout: FragLayout{Dtype: F32, N: 1, Tensors: []wire.TensorInfo{{Name: fmt.Sprint("w", f), Dtype: "F32", Shape: []int64{1}}}},
			WeightsHash: wire.SHA256([]byte{byte(f)})}
		for i := range recs(f) {
			fs.Records = append(fs.Records, RecRef{DID: fmt.Sprintf("t%03d", i), PayloadHash: wire.SHA256([]byte{byte(f), byte(i)})})
		}
		if len(fs.Records) > 0 {
			fs.KthMs = 5
		}
		r.Fragments = append(r.Fragments, fs)
	}
	return putState(t, r), r
}

// testRun is the running run "st" of the runstore tests, with two
// attestations and no trainers or fragments yet, under a spec of M = m
// trainers and frags fragments; set overrides or adds spec members.
func testRun(t *testing.T, m, frags int, set map[string]any) *Run {
	t.Helper()
	spec := map[string]any{}
	if err := json.Unmarshal([]byte(fmt.Sprintf(`{"task_id":"st","sponsor_did":"did:tenzro:human:s","sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,"dtype":"bf16"},
 "tier":"Open","aggregation":"Mean","trainer_count":%d,"quorum":1,"inner_steps":4,"max_rounds":1,"grace_window_ms":1000,
 "reward_pool":"2000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab","min_throughput":null,"created_at":1761350400}`, frags, frags, m)), &spec); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		spec[k] = v
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ts, canon, err := wire.ParseSpec(raw)
	if err != nil {
		t.Fatal(err)
	}
	return &Run{Spec: canon, SpecHash: wire.SpecHash(canon), Status: wire.StatusRunning, spec: ts, Trainers: []*RunTrainer{}, Roots: []wire.Hash{},
		Attestations: []wire.Hash{wire.SHA256([]byte("a0")), wire.SHA256([]byte("a1"))}}
}

// putState writes r into a fresh in-memory state.
func putState(t *testing.T, r *Run) *Overlay {
	t.Helper()
	state := NewOverlay(emptyKV{})
	x := NewMachine(MachineConfig{}).begin(context.Background(), state, Block{Height: 1})
	if err := x.putRun(r); err != nil {
		t.Fatal(err)
	}
	if err := x.finish(); err != nil {
		t.Fatal(err)
	}
	return state
}

func runBytes(t *testing.T, r *Run) string {
	t.Helper()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestRunStoreRoundTrip: a run written by key loads back equal; written
// back unchanged it writes nothing; a round's records dropped are deleted.
func TestRunStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	state, want := storeRun(t, 5, 4, 3, func(f int) int { return []int{3, 0, 5}[f] })
	got, err := LoadRun(ctx, state, "st")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := runBytes(t, got), runBytes(t, want); a != b {
		t.Fatalf("loaded run differs:\n%s\nwant\n%s", a, b)
	}
	x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 2})
	if err := x.putRun(got); err != nil {
		t.Fatal(err)
	}
	if n := x.kv.Len(); n != 0 {
		t.Fatalf("an unchanged run wrote %d keys", n)
	}
	// A new round: records gone, one trainer's counter changed.
	for _, fs := range got.Fragments {
		fs.Records, fs.KthMs = nil, 0
	}
	got.Round++
	got.Trainers[1].Accepted++
	if err := x.putRun(got); err != nil {
		t.Fatal(err)
	}
	// header, trainer t001, fragments 0 and 2 (their counts), 8 record keys deleted
	if n := x.kv.Len(); n != 1+1+2+8 {
		t.Fatalf("new round wrote %d keys, want 12", n)
	}
	if err := x.finish(); err != nil {
		t.Fatal(err)
	}
	again, err := LoadRun(ctx, state, "st")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := runBytes(t, again), runBytes(t, got); a != b {
		t.Fatalf("after the new round:\n%s\nwant\n%s", a, b)
	}
	n := 0
	_ = state.Scan(ctx, KSRuns, recRefPrefix("st"), func(_, _ []byte) error { n++; return nil })
	if n != 0 {
		t.Fatalf("%d record keys left after the round's records were dropped", n)
	}
}

// TestSubmissionCostFlat: the part of a run a submission record loads and
// writes is the same for a run of 8 records and one of 4,000: three reads,
// no scan, and writes to its fragment, its trainer, its record and (with
// evidence) the header's count and its attestation only;
// the run it leaves loads equal to the same change made on the whole run.
func TestSubmissionCostFlat(t *testing.T) {
	ctx := context.Background()
	for _, size := range []struct{ trainers, frags, full int }{{4, 4, 2}, {16, 256, 250}} {
		t.Run(fmt.Sprintf("records=%d", size.trainers*size.full), func(t *testing.T) {
			last := size.frags - 1 // the fragment the new record lands in: empty so far
			state, _ := storeRun(t, size.trainers, size.trainers, size.frags, func(f int) int {
				if f < size.full {
					return size.trainers
				}
				return 0
			})
			d := fmt.Sprintf("t%03d", size.trainers-1)
			ck := &countKV{KV: state}
			part, err := loadRunFor(ctx, ck, "st", d, uint64(last))
			if err != nil {
				t.Fatal(err)
			}
			if ck.gets != 3 || ck.scans != 0 {
				t.Fatalf("partial load: %d reads and %d scans, want 3 and 0", ck.gets, ck.scans)
			}
			full, err := LoadRun(ctx, state, "st")
			if err != nil {
				t.Fatal(err)
			}
			ref := RecRef{DID: d, PayloadHash: wire.SHA256([]byte("new"))}
			for _, r := range []*Run{part, full} {
				fs, err := r.PrecheckRecord(d, 0, uint64(last), 1)
				if err != nil {
					t.Fatal(err)
				}
				fs.Records = append(fs.Records, ref)
				if fs.accepted() == r.spec.Quorum {
					fs.KthMs = 7
				}
				r.Trainer(d).Submitted++
				r.Attestations = append(r.Attestations, wire.SHA256([]byte("evidence")))
				if r.allIn(fs) {
					t.Fatal("one record of 'trainers' active: not all in")
				}
			}
			xp := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 2})
			if err := xp.putRun(part); err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, op := range xp.kv.Batch().Ops {
				keys = append(keys, string(op.Key))
			}
			want := []string{string(RunKey("st")), string(attKey("st", 2)), string(trainerKey("st", d)), string(fragKey("st", last)), string(recRefKey("st", last, d))}
			if strings.Join(keys, "|") != strings.Join(sortedStrings(want), "|") {
				t.Fatalf("partial save wrote %q, want %q", keys, sortedStrings(want))
			}
			xf := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 2})
			if err := xf.putRun(full); err != nil {
				t.Fatal(err)
			}
			bp, bf := xp.kv.Batch(), xf.kv.Batch()
			if len(bp.Ops) != len(bf.Ops) {
				t.Fatalf("partial save wrote %d keys, the whole run's %d", len(bp.Ops), len(bf.Ops))
			}
			for i := range bp.Ops {
				if !bytes.Equal(bp.Ops[i].Key, bf.Ops[i].Key) || !bytes.Equal(bp.Ops[i].Value, bf.Ops[i].Value) {
					t.Fatalf("write %d: partial %q=%q, whole %q=%q", i, bp.Ops[i].Key, bp.Ops[i].Value, bf.Ops[i].Key, bf.Ops[i].Value)
				}
			}
		})
	}
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestRunStoreCorrupt: parts that disagree with each other are refused
// with the key and what is wrong.
func TestRunStoreCorrupt(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		key  []byte
		val  []byte
		err  string
	}{
		{"record without a count", recRefKey("st", 1, "t000"), make([]byte, 32), "fragment 1 has 1 records, its state says 0"},
		{"record of no fragment", recRefKey("st", 9, "t000"), make([]byte, 32), "record of fragment 9"},
		{"short record", recRefKey("st", 0, "t000"), []byte{1}, "1-byte value"},
		{"fragment gap", fragKey("st", 5), []byte(`{}`), "out of order"},
		{"trainer under another key", trainerKey("st", "zz"), []byte(`{"did":"t000"}`), `holds trainer "t000"`},
		{"trainer not JSON", trainerKey("st", "t000"), []byte(`{`), "corrupt state"},
		{"extra active trainer", trainerKey("st", "t100"), []byte(`{"did":"t100","status":"active"}`), "3 active trainers, the header says 2"},
		{"header not JSON", RunKey("st"), []byte(`[`), "corrupt state"},
		{"attestation gap", attKey("st", 5), make([]byte, 32), "want index 2"},
		{"attestation beyond the count", attKey("st", 2), make([]byte, 32), "3 attestations stored, the header says 2"},
		{"short attestation", attKey("st", 1), []byte{1}, "1-byte value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, _ := storeRun(t, 3, 2, 2, func(f int) int { return 1 - f })
			var b Batch
			b.Set(KSRuns, tc.key, tc.val)
			if err := state.Commit(ctx, &b); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadRun(ctx, state, "st"); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
	state, _ := storeRun(t, 1, 1, 1, func(int) int { return 0 })
	if _, err := LoadRun(ctx, state, "a/b"); KindOf(err) != KindInvalid {
		t.Fatalf("a task id with '/': %v", err)
	}
	if tasks, err := RunTasks(ctx, state); err != nil || len(tasks) != 1 || tasks[0] != "st" {
		t.Fatalf("RunTasks = %q, %v", tasks, err)
	}
}

// FuzzLoadRun: any bytes under a run's keys load or are refused, never a
// panic.
func FuzzLoadRun(f *testing.F) {
	f.Add([]byte(`{"did":"t000","status":"active"}`), []byte(`{"n_records":1}`), make([]byte, 32), "t000")
	f.Add([]byte(`{`), []byte(`{"n_records":-1}`), []byte{}, "")
	f.Fuzz(func(t *testing.T, trainer, frag, rec []byte, d string) {
		ctx := context.Background()
		state, _ := storeRun(t, 1, 1, 1, func(int) int { return 0 })
		var b Batch
		b.Set(KSRuns, trainerKey("st", "t000"), trainer)
		b.Set(KSRuns, fragKey("st", 0), frag)
		b.Set(KSRuns, recRefKey("st", 0, d), rec)
		_ = state.Commit(ctx, &b)
		// The commit's loads refuse or read what they can; none panics.
		if r, err := loadRunForCommit(ctx, state, "st", 0); err == nil {
			_ = loadTrainers(ctx, state, r, []string{d, "t000"})
			_, _ = r.commitNeedsWholeRun(ctx, state, 0, 0, 1)
		}
		_, _ = otherFragmentsClosed(ctx, state, "st", 1, 2)
		_, _ = LoadRunHeader(ctx, state, "st", true)
		_, _ = loadRunWithTrainer(ctx, state, "st", d)
		if r, err := loadRunBeforeStart(ctx, state, "st", d, false); err == nil {
			_, _ = r.settlementLines(ctx, state)
		}
		if _, err := loadRunFor(ctx, state, "st", d, 0); err != nil {
			return
		}
		if _, err := LoadRun(ctx, state, "st"); err != nil {
			return
		}
	})
}

// TestMemoCaches: a cached signature is one that verified, for exactly
// its signer, message and signature; a bad one is never cached; a cached
// spec is a copy.
func TestMemoCaches(t *testing.T) {
	k, err := did.Generate(did.KindMachine, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("memo cache message")
	sig := k.Sign(msg)
	signer := k.DID.String()
	if err := verifySig(signer, msg, sig); err != nil {
		t.Fatal(err)
	}
	if !verifiedBefore(sigKey(signer, msg, sig)) {
		t.Fatal("a verified signature is not remembered")
	}
	bad := append([]byte(nil), sig...)
	bad[0] ^= 1
	for i := 0; i < 2; i++ { // refused, and again: never cached
		if err := verifySig(signer, msg, bad); KindOf(err) != KindUnauthorized {
			t.Fatalf("tampered signature, try %d: %v", i, err)
		}
	}
	if err := verifySig(signer, append(msg, '!'), sig); KindOf(err) != KindUnauthorized {
		t.Fatalf("another message under a cached signature: %v", err)
	}
	if verifiedBefore(sigKey(signer, msg, bad)) || verifiedBefore(sigKey(signer+"x", msg, sig)) {
		t.Fatal("a triple that never verified is cached")
	}
	state, r := storeRun(t, 1, 1, 1, func(int) int { return 0 })
	a, err := LoadRun(context.Background(), state, "st")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadRun(context.Background(), state, "st")
	if err != nil {
		t.Fatal(err)
	}
	if a.spec == b.spec || a.spec.TaskID != r.spec.TaskID || b.spec.Quorum != r.spec.Quorum {
		t.Fatalf("cached specs: %p %p, %+v", a.spec, b.spec, b.spec)
	}
}

// TestLoadRunHeader: the header alone is one read; with fragments, one
// more scan, and Due answers what it answers on the whole run.
func TestLoadRunHeader(t *testing.T) {
	ctx := context.Background()
	state, _ := storeRun(t, 5, 4, 3, func(f int) int { return []int{3, 0, 5}[f] })
	full, err := LoadRun(ctx, state, "st")
	if err != nil {
		t.Fatal(err)
	}
	ck := &countKV{KV: state}
	h, err := LoadRunHeader(ctx, ck, "st", false)
	if err != nil {
		t.Fatal(err)
	}
	if ck.gets != 1 || ck.scans != 0 || len(h.Trainers) != 0 || len(h.Fragments) != 0 || h.Status != wire.StatusRunning || h.activeTrainers() != 4 {
		t.Fatalf("header only: %d reads, %d scans, %d trainers, %d fragments, %s, %d active", ck.gets, ck.scans, len(h.Trainers), len(h.Fragments), h.Status, h.activeTrainers())
	}
	hf, err := LoadRunHeader(ctx, ck, "st", true)
	if err != nil {
		t.Fatal(err)
	}
	if ck.scans != 1 || len(hf.Fragments) != 3 {
		t.Fatalf("with fragments: %d scans, %d fragments", ck.scans, len(hf.Fragments))
	}
	for i, fs := range hf.Fragments {
		if len(fs.Records) != 0 || fs.accepted() != len(full.Fragments[i].Records) {
			t.Fatalf("fragment %d: %d records read, %d counted, want 0 and %d", i, len(fs.Records), fs.accepted(), len(full.Fragments[i].Records))
		}
		for _, now := range []int64{100, 2000} {
			if got, want := hf.Due(fs, now), full.Due(full.Fragments[i], now); got != want {
				t.Fatalf("fragment %d at %d: due %v, the whole run says %v", i, now, got, want)
			}
		}
	}
}
