package wire_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestSpecShardHolders: shard_holders is absent (one holder, and the spec's
// canonical bytes and hash are those of a spec written before the field
// existed) or 2 in a scored run of M ≥ 3 and S ≥ 3 over a finite corpus;
// any other value (an explicit 1 too), 2 with M or S below 3, over a
// synth:// corpus or without scoring is refused with the field's name and
// what it needs.
func TestSpecShardHolders(t *testing.T) {
	base := validSpecForCopies(t)
	const scoring = `,"scoring":{"evaluator":"TimesFMScore"}`
	for _, tc := range []struct {
		name, member, ref, err string
		m, holders             int
	}{
		{"absent", ``, "x", "", 1, 1},
		{"absent, scored", scoring, "x", "", 2, 1},
		{"two", `,"shard_holders":2` + scoring, "x", "", 3, 2},
		{"two, more shards than trainers", `,"shard_holders":2,"shard_count":7` + scoring, "x", "", 3, 2},
		{"two, series", `,"shard_holders":2,"shard_split":"series"` + scoring, "x", "", 12, 2},
		{"explicit one", `,"shard_holders":1` + scoring, "x", "shard_holders is 1", 2, 0},
		{"three", `,"shard_holders":3` + scoring, "x", "shard_holders is 3", 4, 0},
		{"zero", `,"shard_holders":0` + scoring, "x", "shard_holders is 0", 2, 0},
		{"negative", `,"shard_holders":-2` + scoring, "x", "shard_holders is -2", 2, 0},
		{"one trainer", `,"shard_holders":2` + scoring, "x", "needs trainer_count (M) ≥ 3, got 1", 1, 0},
		{"two trainers", `,"shard_holders":2` + scoring, "x", "needs trainer_count (M) ≥ 3, got 2", 2, 0},
		{"two shards", `,"shard_holders":2,"shard_count":2` + scoring, "x", "needs at least 3 shards, got shard_count 2", 4, 0},
		{"synth corpus", `,"shard_holders":2` + scoring, "synth://kernelsynth/v1?seed=1", "needs a finite corpus", 3, 0},
		{"unscored", `,"shard_holders":2`, "x", "needs scoring", 3, 0},
		{"scoring null", `,"shard_holders":2,"scoring":null`, "x", "needs scoring", 3, 0},
		{"not an integer", `,"shard_holders":2.5` + scoring, "x", "shard_holders", 2, 0},
		{"a string", `,"shard_holders":"2"` + scoring, "x", "shard_holders", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := strconv.Itoa(tc.m)
			raw := `{"task_id":"t","sponsor_did":"` + base.SponsorDID + `","sponsor_address":"0x11","architecture":{"family":"timesfm","param_count":1,"modality":"Timeseries","fragment_count":1,"dtype":"f32"},"tier":"Open","aggregation":"Mean","trainer_count":` + m + `,"quorum":1,"inner_steps":1,"max_rounds":1,"grace_window_ms":0,"reward_pool":"1","dataset_ref":"` + tc.ref + `","dataset_hash":"0x00","min_throughput":null,"created_at":1` + tc.member + `}`
			s, canon, err := wire.ParseSpec([]byte(raw))
			if err == nil {
				err = s.Validate()
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Holders() != tc.holders {
				t.Fatalf("holders %d, want %d", s.Holders(), tc.holders)
			}
			if !strings.Contains(tc.member, "shard_holders") && strings.Contains(string(canon), "shard_holders") {
				t.Fatalf("a spec without the field canonicalizes with it: %s", canon)
			}
		})
	}
}

// TestSpecShardHoldersHash: a spec without shard_holders has the hash it
// had before the field existed (pinned), and adding the field changes it.
func TestSpecShardHoldersHash(t *testing.T) {
	const body = `{"task_id":"t","sponsor_did":"did:tenzro:human:z6MkvDqGT54cXesYGvABpF1UapVNwjCqRcafi4Px6Thv5T3Z","sponsor_address":"0x11","architecture":{"family":"timesfm","param_count":1,"modality":"Timeseries","fragment_count":1,"dtype":"f32"},"tier":"Open","aggregation":"Mean","trainer_count":3,"quorum":1,"inner_steps":1,"max_rounds":1,"grace_window_ms":0,"reward_pool":"1","dataset_ref":"x","dataset_hash":"0x00","min_throughput":null,"created_at":1,"scoring":{"evaluator":"TimesFMScore"}`
	hash := func(raw string) string {
		s, canon, err := wire.ParseSpec([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		return wire.SpecHash(canon).String()
	}
	without, with := hash(body+`}`), hash(body+`,"shard_holders":2}`)
	if without != specHashBeforeHolders {
		t.Fatalf("a spec without shard_holders hashes %s, before the field %s", without, specHashBeforeHolders)
	}
	if with == without {
		t.Fatal("shard_holders 2 does not change the spec hash")
	}
}

// specHashBeforeHolders is the hash of TestSpecShardHoldersHash's spec as
// main computed it before shard_holders existed (and Python
// sponsor.spec_hash computes it).
const specHashBeforeHolders = "4edb3b270fdfb5cfbd1c3d7aed137a35c1184b33408722bf3735ac2e7409db02"
