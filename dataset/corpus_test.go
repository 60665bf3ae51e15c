package dataset

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestCorpusVectors: the Go corpus hash equals the reference trainer's on
// the shared vectors (trainer/tests/test_dataset_ipfs.py reads the same file).
func TestCorpusVectors(t *testing.T) {
	b, err := os.ReadFile("testdata/corpus_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Name        string `json:"name"`
		CSV         string `json:"csv"`
		DatasetHash string `json:"dataset_hash"`
	}
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 5 {
		t.Fatalf("%d vectors", len(vs))
	}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			h, err := CorpusHashCSV(strings.NewReader(v.CSV))
			if err != nil {
				t.Fatal(err)
			}
			if h.String() != v.DatasetHash {
				t.Fatalf("hash %s, want %s", h, v.DatasetHash)
			}
		})
	}
}

func TestCorpusRefusals(t *testing.T) {
	for _, tc := range []struct{ name, csv, want string }{
		{"empty", "", "header"},
		{"word", "a\nhello\n", "not a number"},
		{"hex", "a\n0x1p3\n", "not a number"},
		{"inf", "a\ninf\n", "non-finite"},
		{"wide", "a\n1,2\n", "2 cells"},
		{"underscore", "a\n1__0\n", "not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CorpusHashCSV(strings.NewReader(tc.csv))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
