package machine

import (
	"context"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// emptyKV is a KV with nothing in it (the overlay above it holds the test's
// writes).
type emptyKV struct{}

func (emptyKV) Get(context.Context, Keyspace, []byte) ([]byte, error) { return nil, ErrNotFound }
func (emptyKV) Scan(context.Context, Keyspace, []byte, func(k, v []byte) error) error {
	return nil
}
func (emptyKV) Commit(context.Context, *Batch) error { return nil }
func (emptyKV) Close() error                         { return nil }

// TestCheckCopyVerdicts: what the chain checks of a commit's copy verdicts
// without the payloads, and which copiers settlement slashes.
func TestCheckCopyVerdicts(t *testing.T) {
	x := NewMachine(MachineConfig{}).begin(context.Background(), emptyKV{}, Block{Height: 10})
	for d, h := range map[string]int64{"A": 3, "B": 5, "C": 5, "D": 7} {
		if err := x.putJSON(KSTranscript, RecordKey("t", 0, 0, d), Record{SubmissionTx: wire.SubmissionTx{TrainerDID: d}, Height: h}); err != nil {
			t.Fatal(err)
		}
	}
	in := func(d, copyOf string) wire.CommitInput {
		c := wire.CommitInput{TrainerDID: d, CopyOf: copyOf}
		if copyOf != "" {
			c.Rejected = "copy of " + copyOf
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		inputs  []wire.CommitInput
		err     string
		copiers []string
	}{
		{"no copies", []wire.CommitInput{in("A", ""), in("B", "")}, "", nil},
		{"later copies an earlier record", []wire.CommitInput{in("A", ""), in("B", "A"), in("D", "A")}, "", []string{"B", "D"}},
		{"same block pair", []wire.CommitInput{in("A", ""), in("B", "C"), in("C", "B")}, "", nil},
		{"names a later record", []wire.CommitInput{in("A", "B"), in("B", "")}, "copy of B's later record", nil},
		{"names itself", []wire.CommitInput{in("A", "A")}, "copy of itself", nil},
		{"names no input", []wire.CommitInput{in("B", "Z")}, "not an input of this fragment", nil},
		{"kept copy", []wire.CommitInput{in("A", ""), {TrainerDID: "B", CopyOf: "A"}}, "but not rejected", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := &wire.FragmentCommit{Fragment: 0, Inputs: tc.inputs}
			err := x.checkCopyVerdicts("t", 0, fc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := x.copiers("t", 0, fc)
			if err != nil || strings.Join(got, ",") != strings.Join(tc.copiers, ",") {
				t.Fatalf("copiers %v (%v), want %v", got, err, tc.copiers)
			}
		})
	}
}
