package dataset

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"ipfs://QmcjN2jviid8mYuJ8VoAMFhNDrdaev2BzbdN5TTno1f6UJ", "/ipfs/bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu/a", "ipfs://x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, p, err := ParseRef(s)
		if err != nil {
			return
		}
		if checkCID(c) != nil || strings.Contains(p, "..") && strings.Contains("/"+p+"/", "/../") {
			t.Fatalf("accepted %q -> %s %q", s, c, p)
		}
	})
}

func FuzzCARReader(f *testing.F) {
	path := f.TempDir() + "/f"
	_ = writeFile(path, bytes.Repeat([]byte("tenzro"), 50000))
	_, car := carOf(f, path, Layout{CIDVersion: 1, RawLeaves: true, Chunker: "size-65536", MaxLinks: 4})
	f.Add(car)
	f.Add(car[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewCARReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for i := 0; i < 1000; i++ {
			blk, err := r.Next()
			if err == io.EOF || err != nil {
				return
			}
			if len(blk.RawData()) > 2<<20 {
				t.Fatal("oversized block accepted")
			}
		}
	})
}

func FuzzCorpusHashCSV(f *testing.F) {
	f.Add("a,b\n1,2\n3,4\n")
	f.Add("x\n1_0\n\"2\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		h1, err1 := CorpusHashCSV(strings.NewReader(s))
		h2, err2 := CorpusHashCSV(strings.NewReader(s))
		if (err1 == nil) != (err2 == nil) || h1 != h2 {
			t.Fatal("not deterministic")
		}
	})
}
