package wire_test

import (
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestSpecShardSplit: shard_split is absent (contiguous, and the spec's
// canonical bytes and hash are those of a spec written before the field
// existed) or "series"; any other value, an explicit "", and "series" with
// a synth:// corpus are refused with the field's name.
func TestSpecShardSplit(t *testing.T) {
	base := validSpecForCopies(t)
	for _, tc := range []struct {
		name, member, ref, err, split string
	}{
		{"absent", ``, "x", "", ""},
		{"series", `,"shard_split":"series"`, "x", "", wire.ShardSplitSeries},
		{"explicit empty", `,"shard_split":""`, "x", `shard_split is ""`, ""},
		{"contiguous spelled out", `,"shard_split":"contiguous"`, "x", `shard_split is "contiguous"`, ""},
		{"unknown", `,"shard_split":"interleaved"`, "x", `shard_split is "interleaved"`, ""},
		{"series over synth", `,"shard_split":"series"`, "synth://kernelsynth/v1?seed=1", "needs a corpus of series", ""},
		{"not a string", `,"shard_split":1`, "x", "shard_split", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := `{"task_id":"t","sponsor_did":"` + base.SponsorDID + `","sponsor_address":"0x11","architecture":{"family":"timesfm","param_count":1,"modality":"Timeseries","fragment_count":1,"dtype":"f32"},"tier":"Open","aggregation":"Mean","trainer_count":1,"quorum":1,"inner_steps":1,"max_rounds":1,"grace_window_ms":0,"reward_pool":"1","dataset_ref":"` + tc.ref + `","dataset_hash":"0x00","min_throughput":null,"created_at":1` + tc.member + `}`
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
			if s.Split() != tc.split {
				t.Fatalf("split %q, want %q", s.Split(), tc.split)
			}
			if tc.member == "" && strings.Contains(string(canon), "shard_split") {
				t.Fatalf("a spec without the field canonicalizes with it: %s", canon)
			}
		})
	}
}
