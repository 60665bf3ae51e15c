package synth

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

type synthVectors struct {
	Good []struct {
		Ref         string `json:"ref"`
		Canonical   string `json:"canonical"`
		DatasetHash string `json:"dataset_hash"`
	} `json:"good"`
	Bad []string `json:"bad"`
}

func loadSynthVectors(t testing.TB) synthVectors {
	b, err := os.ReadFile("../testdata/synth_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v synthVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The Python generator (tenzro_trainer.synth) wrote these: both sides parse the
// same refs, refuse the same refs and hash the definitions to the same bytes.
func TestSynthVectors(t *testing.T) {
	v := loadSynthVectors(t)
	if len(v.Good) == 0 || len(v.Bad) == 0 {
		t.Fatal("empty vectors")
	}
	for _, g := range v.Good {
		r, err := ParseSynthRef(g.Ref)
		if err != nil {
			t.Fatalf("%s: %v", g.Ref, err)
		}
		for _, ref := range []string{g.Ref, g.Canonical} {
			r2, err := ParseSynthRef(ref)
			if err != nil || r2 != r {
				t.Fatalf("%s: canonical form parses to %+v, %v; want %+v", ref, r2, err, r)
			}
		}
		h := r.Hash()
		if got := hex.EncodeToString(h[:]); got != g.DatasetHash {
			t.Fatalf("%s: hash %s, want %s", g.Ref, got, g.DatasetHash)
		}
		for _, form := range []string{g.DatasetHash, "0x" + g.DatasetHash, "sha256:" + g.DatasetHash} {
			if err := CheckRef(g.Ref, form); err != nil {
				t.Fatalf("CheckRef(%s, %s): %v", g.Ref, form, err)
			}
		}
	}
	for _, b := range v.Bad {
		if _, err := ParseSynthRef(b); !errors.Is(err, ErrSynthRef) {
			t.Fatalf("%q: accepted or wrong error: %v", b, err)
		}
		if err := CheckRef(b, v.Good[0].DatasetHash); err == nil {
			t.Fatalf("CheckRef(%q) accepted", b)
		}
	}
}

func TestCheckRef(t *testing.T) {
	v := loadSynthVectors(t)
	g := v.Good[1]
	other := v.Good[0].DatasetHash
	for _, tc := range []struct {
		name, ref, hash, want string
	}{
		{"synth ok", g.Ref, g.DatasetHash, ""},
		{"synth wrong hash", g.Ref, other, "is not the hash of"},
		{"synth malformed hash", g.Ref, "0x12", "dataset_hash"},
		{"synth bad ref", "synth://kernelsynth/v1?seed=x", g.DatasetHash, "not a decimal integer"},
		{"ipfs not checked at posting", "ipfs://bafkqaaa", "0x00", ""},
		{"statsmodels not checked at posting", "statsmodels://co2", other, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRef(tc.ref, tc.hash)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func FuzzParseSynthRef(f *testing.F) {
	v := loadSynthVectors(f)
	for _, g := range v.Good {
		f.Add(g.Ref)
	}
	for _, b := range v.Bad {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseSynthRef(s)
		if err != nil {
			if !errors.Is(err, ErrSynthRef) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		if r.Version != SynthVersion || r.MaxKernels < 1 || r.MaxKernels > 8 || r.MixupPermille > 1000 ||
			r.EvalWindows < 1 || r.EvalWindows > MaxSynthEval || len(s) > MaxSynthRef {
			t.Fatalf("%q parsed out of range: %+v", s, r)
		}
	})
}
