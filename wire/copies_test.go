package wire_test

import (
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// vecCopyResultHash is FragmentResultHash of vecCommit with input did:b a
// copy of did:a (docs/protocol/copies.md §3).
const vecCopyResultHash = "b2d0804df48074eac3b1da58976506c9ca83ec567329095e884ed4c1987f9eb2"

func TestFragmentResultHashCopyVerdict(t *testing.T) {
	c := vecCommit()
	plain := wire.FragmentResultHash(c)
	if plain.String() != vecResultHash {
		t.Fatalf("a commit without copies changed its hash: %s", plain)
	}
	c.Inputs[1].Rejected, c.Inputs[1].CopyOf = "copy of did:a's input", "did:a"
	got := wire.FragmentResultHash(c)
	if got.String() != vecCopyResultHash {
		t.Fatalf("FragmentResultHash with a copy verdict = %s", got)
	}
	// The verdict, not only the rejection, is what a challenge disputes:
	// naming another original is another result.
	c.Inputs[1].CopyOf = "did:c"
	if wire.FragmentResultHash(c) == got {
		t.Fatal("copy_of is not in the result hash")
	}
	c.Inputs[1].CopyOf = ""
	if wire.FragmentResultHash(c) == got {
		t.Fatal("a copy verdict hashes like a plain rejection")
	}
}

func TestSpecCopiesValidated(t *testing.T) {
	ip := func(v int64) *int64 { return &v }
	bp := func(v int) *int { return &v }
	for _, tc := range []struct {
		name string
		c    *wire.CopyRule
		err  string
		ppm  int64
		bps  int
	}{
		{"absent: defaults", nil, "", wire.DefaultCopyMinCosinePpm, wire.DefaultCopySlashBps},
		{"empty object: defaults", &wire.CopyRule{}, "", wire.DefaultCopyMinCosinePpm, wire.DefaultCopySlashBps},
		{"off", &wire.CopyRule{MinCosinePpm: ip(wire.CopyRuleOff), SlashBps: bp(0)}, "", wire.CopyRuleOff, 0},
		{"too loose", &wire.CopyRule{MinCosinePpm: ip(499_999)}, "copies.min_cosine_ppm is 499999", 0, 0},
		{"above off", &wire.CopyRule{MinCosinePpm: ip(1_000_002)}, "copies.min_cosine_ppm is 1000002", 0, 0},
		{"slash over the stake", &wire.CopyRule{SlashBps: bp(10_001)}, "copies.slash_bps is 10001", 0, 0},
		{"negative slash", &wire.CopyRule{SlashBps: bp(-1)}, "copies.slash_bps is -1", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpecForCopies(t)
			s.Copies = tc.c
			err := s.Validate()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.CopyThresholdPpm() != tc.ppm || s.CopySlashBps() != tc.bps {
				t.Fatalf("effective %d ppm %d bps, want %d %d", s.CopyThresholdPpm(), s.CopySlashBps(), tc.ppm, tc.bps)
			}
		})
	}
	// The field parses strictly from JSON (unknown members refused).
	raw := `{"task_id":"t","sponsor_did":"did:tenzro:human:zX","sponsor_address":"0x11","architecture":{"family":"timesfm","param_count":1,"modality":"Timeseries","fragment_count":1,"dtype":"f32"},"tier":"Open","aggregation":"Mean","trainer_count":1,"quorum":1,"inner_steps":1,"max_rounds":1,"grace_window_ms":0,"reward_pool":"1","dataset_ref":"x","dataset_hash":"0x00","min_throughput":null,"created_at":1,"copies":{"min_cosine_ppm":999000,"cosine":1}}`
	if _, _, err := wire.ParseSpec([]byte(raw)); err == nil || !strings.Contains(err.Error(), "cosine") {
		t.Fatalf("unknown copies member: %v", err)
	}
}

func validSpecForCopies(t *testing.T) *wire.TaskSpec {
	t.Helper()
	raw := `{"task_id":"t","sponsor_did":"did:tenzro:human:z6MkvDqGT54cXesYGvABpF1UapVNwjCqRcafi4Px6Thv5T3Z","sponsor_address":"0x11","architecture":{"family":"timesfm","param_count":1,"modality":"Timeseries","fragment_count":1,"dtype":"f32"},"tier":"Open","aggregation":"Mean","trainer_count":1,"quorum":1,"inner_steps":1,"max_rounds":1,"grace_window_ms":0,"reward_pool":"1","dataset_ref":"x","dataset_hash":"0x00","min_throughput":null,"created_at":1}`
	s, _, err := wire.ParseSpec([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSpecSketchDimValidated(t *testing.T) {
	ip := func(v int64) *int64 { return &v }
	bp := func(v int) *int { return &v }
	for _, tc := range []struct {
		name string
		c    *wire.CopyRule
		err  string
		dim  int
	}{
		{"absent: off", nil, "", 0},
		{"zero: off", &wire.CopyRule{SketchDim: bp(0)}, "", 0},
		{"smallest", &wire.CopyRule{SketchDim: bp(wire.MinSketchDim)}, "", wire.MinSketchDim},
		{"largest", &wire.CopyRule{SketchDim: bp(wire.MaxSketchDim)}, "", wire.MaxSketchDim},
		{"256", &wire.CopyRule{SketchDim: bp(256)}, "", 256},
		{"not a power of two", &wire.CopyRule{SketchDim: bp(100)}, "copies.sketch_dim is 100", 0},
		{"too small", &wire.CopyRule{SketchDim: bp(8)}, "copies.sketch_dim is 8", 0},
		{"too large", &wire.CopyRule{SketchDim: bp(2048)}, "copies.sketch_dim is 2048", 0},
		{"negative", &wire.CopyRule{SketchDim: bp(-16)}, "copies.sketch_dim is -16", 0},
		{"with the copy rule off", &wire.CopyRule{SketchDim: bp(64), MinCosinePpm: ip(wire.CopyRuleOff)}, "needs the copy rule on", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpecForCopies(t)
			s.Copies = tc.c
			err := s.Validate()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || s.SketchDim() != tc.dim {
				t.Fatalf("err %v, dim %d, want %d", err, s.SketchDim(), tc.dim)
			}
		})
	}
}

// vecSketchResultHash is FragmentResultHash of vecCommit with input did:a
// carrying the sketch 00 01 ff fe (copies.md §7).
const vecSketchResultHash = "47f7fa96729f6d37bac3c40fc4dbe503cff503786eaec04d60589de409d52cdc"

func TestFragmentResultHashSketch(t *testing.T) {
	c := vecCommit()
	if got := wire.FragmentResultHash(c); got.String() != vecResultHash {
		t.Fatalf("a commit without sketches changed its hash: %s", got)
	}
	c.Inputs[0].Sketch = []byte{0x00, 0x01, 0xff, 0xfe}
	got := wire.FragmentResultHash(c)
	if got.String() != vecSketchResultHash {
		t.Fatalf("FragmentResultHash with a sketch = %s", got)
	}
	// Which input carries it, and its bytes, are the result.
	c.Inputs[0].Sketch[3] = 0xff
	if wire.FragmentResultHash(c) == got {
		t.Fatal("the sketch's bytes are not in the result hash")
	}
	c.Inputs[0].Sketch, c.Inputs[1].Sketch = nil, []byte{0x00, 0x01, 0xff, 0xfe}
	if wire.FragmentResultHash(c) == got {
		t.Fatal("which input carries the sketch is not in the result hash")
	}
}

// TestSketchSeed pins the input sketch's seed derivation (copies.md §7).
func TestSketchSeed(t *testing.T) {
	if got := wire.SketchSeed("task-1", 2); got != 0x8cee441fd3272a55 {
		t.Fatalf("SketchSeed(task-1, 2) = %#016x", got)
	}
	if wire.SketchSeed("task-1", 2) == wire.SketchSeed("task-1", 3) || wire.SketchSeed("task-1", 2) == wire.SketchSeed("task-2", 2) {
		t.Fatal("the seed does not depend on the task and fragment")
	}
}
