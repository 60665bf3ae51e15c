package wire_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// officialBLAKE3 are hashes from the BLAKE3 team's test_vectors.json
// (github.com/BLAKE3-team/BLAKE3, test_vectors/test_vectors.json: input
// byte i is i mod 251; the first 32 bytes of the "hash" output), so that the
// library is checked against the specification's authors and not only
// against itself.
var officialBLAKE3 = map[int]string{
	0:    "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
	1:    "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213",
	1023: "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11",
	1024: "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7",
	1025: "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444",
	8192: "aae792484c8efe4f19e2ca7d371d8c467ffb10748d8a5a1ae579948f718a2a63",
}

func TestContentHashOfficialVectors(t *testing.T) {
	for n, want := range officialBLAKE3 {
		if got := wire.ContentHash(pattern251(n)).String(); got != want {
			t.Errorf("ContentHash(%d bytes) = %s, BLAKE3 test vector %s", n, got, want)
		}
	}
	// The cross-language file carries the same values.
	for _, cv := range build(t).ContentHash {
		if cv.InputLen == nil {
			continue
		}
		if want, ok := officialBLAKE3[*cv.InputLen]; ok && cv.BLAKE3 != want {
			t.Errorf("vectors.json: input_len %d has %s, BLAKE3 test vector %s", *cv.InputLen, cv.BLAKE3, want)
		}
	}
}

// TestContentHasherStreams: hashing while writing, in any split, gives
// ContentHash of the whole; Sum does not end the stream.
func TestContentHasherStreams(t *testing.T) {
	data := pattern251(300_001)
	want := wire.ContentHash(data)
	for _, chunk := range []int{1, 63, 64, 1024, 1025, 65536, len(data)} {
		h := wire.NewContentHasher()
		for rest := data; len(rest) > 0; {
			n := min(chunk, len(rest))
			if _, err := h.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if got := h.Sum(); got != want {
			t.Errorf("chunks of %d: %s, want %s", chunk, got, want)
		}
	}
	h := wire.NewContentHasher()
	if _, err := io.Copy(h, bytes.NewReader(data[:1000])); err != nil {
		t.Fatal(err)
	}
	if h.Sum() != wire.ContentHash(data[:1000]) {
		t.Error("Sum after 1000 bytes")
	}
	_, _ = h.Write(data[1000:])
	if h.Sum() != want {
		t.Error("Sum after more writes: the first Sum ended the stream")
	}
	if wire.NewContentHasher().Sum() != wire.ContentHash(nil) {
		t.Error("empty hasher")
	}
}

// TestHashFunctionsDiffer: the two algorithms are what their names say.
func TestHashFunctionsDiffer(t *testing.T) {
	p := []byte("abc")
	if wire.SHA256(p) != sha256.Sum256(p) {
		t.Error("SHA256 is not SHA-256")
	}
	if wire.ContentHash(p) == wire.SHA256(p) {
		t.Error("ContentHash is SHA-256")
	}
	c := wire.NewCanon(wire.DomainModel).Hash(wire.ContentHash(p))
	if c.Sum() != wire.SHA256(c.Out()) || c.SumContent() != wire.ContentHash(c.Out()) {
		t.Error("Canon.Sum / SumContent")
	}
	if wire.ModelHash([]wire.Hash{wire.ContentHash(p)}) != c.SumContent() {
		t.Error("ModelHash is not SumContent of its canon")
	}
}

func TestParseHashPrefixes(t *testing.T) {
	want := wire.ContentHash([]byte("abc"))
	hx := want.String()
	for _, s := range []string{hx, "0x" + hx, "sha256:" + hx, "blake3:" + hx, "0xblake3:" + hx, strings.ToUpper(hx)} {
		got, err := wire.ParseHash(s)
		if err != nil || got != want {
			t.Errorf("ParseHash(%q) = %s, %v", s, got, err)
		}
	}
	for _, s := range []string{"", hx[:63], "blake3:sha256:" + hx, "sha256:blake3:" + hx, "md5:" + hx, hx + "00", "blake3:" + hx[:62] + "zz"} {
		if _, err := wire.ParseHash(s); err == nil {
			t.Errorf("ParseHash(%q) accepted", s)
		}
	}
}

// TestCheckPayloadHash: a gradient's payload is checked against its hash,
// and a payload marked as checked is not hashed again unless the payload or
// the hash changed.
func TestCheckPayloadHash(t *testing.T) {
	payload := []byte("gradient bytes")
	g := &wire.OuterGradient{GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
	if got, ok := g.CheckPayloadHash(); !ok || got != g.PayloadHash {
		t.Fatalf("good payload: %s %v", got, ok)
	}
	g.PayloadHash = wire.SHA256(payload)
	if got, ok := g.CheckPayloadHash(); ok || got != wire.ContentHash(payload) {
		t.Fatalf("SHA-256 payload_hash accepted: %s %v", got, ok)
	}
	// Marked with a wrong hash (a caller's bug): a later change of the
	// hash or of the payload is still caught.
	g.MarkPayloadHashed()
	if _, ok := g.CheckPayloadHash(); !ok {
		t.Fatal("the mark is not used")
	}
	g.PayloadHash = wire.ContentHash([]byte("other"))
	if _, ok := g.CheckPayloadHash(); ok {
		t.Error("a changed payload_hash passed on the old mark")
	}
	g.PayloadHash = wire.SHA256(payload)
	g.GradientPayload = bytes.Clone(payload)
	if _, ok := g.CheckPayloadHash(); ok {
		t.Error("a replaced payload passed on the old mark")
	}
	g.GradientPayload = payload[:len(payload)-1]
	if _, ok := g.CheckPayloadHash(); ok {
		t.Error("a shortened payload passed on the old mark")
	}
	empty := &wire.OuterGradient{PayloadHash: wire.ContentHash(nil)}
	empty.MarkPayloadHashed()
	if _, ok := empty.CheckPayloadHash(); !ok {
		t.Error("empty payload")
	}
}

var sink wire.Hash

func benchHash(b *testing.B, f func([]byte) wire.Hash) {
	for _, n := range []int{1 << 20, 64 << 20} {
		data := pattern251(n)
		b.Run(fmt.Sprintf("%dMiB", n>>20), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink = f(data)
			}
		})
	}
}

// BenchmarkContentHash and BenchmarkSHA256 compare the two algorithms on
// payload-sized inputs (docs/RATIONALE.md, "BLAKE3 for content, SHA-256 for
// structure"): go test ./wire -run '^$' -bench 'ContentHash|SHA256'.
func BenchmarkContentHash(b *testing.B) { benchHash(b, wire.ContentHash) }

func BenchmarkSHA256(b *testing.B) { benchHash(b, wire.SHA256) }

// BenchmarkContentHasher is the streaming form, written in 1 MiB pieces.
func BenchmarkContentHasher(b *testing.B) {
	data := pattern251(64 << 20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		h := wire.NewContentHasher()
		for p := data; len(p) > 0; p = p[1<<20:] {
			_, _ = h.Write(p[:1<<20])
		}
		sink = h.Sum()
	}
}
