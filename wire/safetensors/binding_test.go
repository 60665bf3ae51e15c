package safetensors

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
)

// bindingVector is docs/protocol/safetensors.md §6's vector: tensor "w" =
// F32 [2] {0.5, −1} bound to trainer did:tenzro:machine:zTest, task t1,
// round 3, fragment 1. The Python trainer writes the same bytes
// (trainer/tests/test_vectors.py).
const bindingVector = "b0000000000000007b225f5f6d657461646174615f5f223a7b2274656e7a726f2e667261676d656e74223a2231222c2274656e7a726f2e726f756e64223a2233222c2274656e7a726f2e7461736b223a227431222c2274656e7a726f2e747261696e6572223a226469643a74656e7a726f3a6d616368696e653a7a54657374227d2c2277223a7b226474797065223a22463332222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c385d7d7d200000003f000080bf"

var vecBinding = Binding{Trainer: "did:tenzro:machine:zTest", Task: "t1", Round: 3, Fragment: 1}

func TestBindingVector(t *testing.T) {
	plain, err := Encode([]Tensor{FromF32("w", []int64{2}, []float32{0.5, -1})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bound, err := Bind(plain, vecBinding, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(bound); got != bindingVector {
		t.Fatalf("Bind = %s", got)
	}
	if err := CheckBinding(bound, vecBinding, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	// Binding a bound payload to the same binding changes nothing.
	again, err := Bind(bound, vecBinding, DefaultLimits)
	if err != nil || !bytes.Equal(again, bound) {
		t.Fatalf("re-bind: %v", err)
	}
	// BindTo streams the same bytes, and leaves a bound file alone.
	var buf bytes.Buffer
	if wrote, err := BindTo(&buf, bytes.NewReader(plain), int64(len(plain)), vecBinding, DefaultLimits); err != nil || !wrote || !bytes.Equal(buf.Bytes(), bound) {
		t.Fatalf("BindTo: wrote %v, %v", wrote, err)
	}
	if wrote, err := BindTo(io.Discard, bytes.NewReader(bound), int64(len(bound)), vecBinding, DefaultLimits); err != nil || wrote {
		t.Fatalf("BindTo of a bound file: wrote %v, %v", wrote, err)
	}
	// Metadata that is not a binding ({"format":"pt"}) is replaced.
	pt, _ := Encode([]Tensor{FromF32("w", []int64{2}, []float32{0.5, -1})}, map[string]string{"format": "pt"})
	if b, err := Bind(pt, vecBinding, DefaultLimits); err != nil || !bytes.Equal(b, bound) {
		t.Fatalf("bind over format=pt: %v", err)
	}
}

func TestCheckBindingRefusals(t *testing.T) {
	tensors := []Tensor{FromF32("w", []int64{2}, []float32{0.5, -1})}
	enc := func(md map[string]string) []byte {
		b, err := Encode(tensors, md)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	with := func(k, v string) map[string]string {
		md := vecBinding.Metadata()
		if v == "\x00delete" {
			delete(md, k)
		} else {
			md[k] = v
		}
		return md
	}
	other := func(f func(b *Binding)) map[string]string {
		b := vecBinding
		f(&b)
		return b.Metadata()
	}
	for _, tc := range []struct {
		name string
		md   map[string]string
		is   error
		msg  string
	}{
		{"no metadata", nil, ErrUnbound, "not bound"},
		{"unrelated metadata", map[string]string{"format": "pt"}, ErrUnbound, "not bound"},
		{"another trainer (copy by hash)", other(func(b *Binding) { b.Trainer = "did:tenzro:machine:zVictim" }), ErrBinding, "names trainer did:tenzro:machine:zVictim"},
		{"another task", other(func(b *Binding) { b.Task = "t2" }), ErrBinding, "names task t2"},
		{"round 0 replayed", other(func(b *Binding) { b.Round = 0 }), ErrBinding, "names round 0, the submission is for round 3"},
		{"another fragment", other(func(b *Binding) { b.Fragment = 0 }), ErrBinding, "names fragment 0"},
		{"missing round", with(MetaRound, "\x00delete"), ErrBinding, `no "tenzro.round"`},
		{"extra key", with("format", "pt"), ErrBinding, `key "format"`},
		{"leading zero", with(MetaRound, "03"), ErrBinding, "leading zero"},
		{"sign", with(MetaRound, "+3"), ErrBinding, "not a decimal"},
		{"overflow", with(MetaFragment, "18446744073709551616"), ErrBinding, "64 bits"},
		{"empty task", with(MetaTask, ""), ErrBinding, "tenzro.task is 0 bytes"},
		{"long trainer", with(MetaTrainer, strings.Repeat("x", 257)), ErrBinding, "257 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckBinding(enc(tc.md), vecBinding, DefaultLimits)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.is, tc.msg)
			}
		})
	}
	// Bind refuses a payload bound to someone else rather than re-binding it.
	victim := Binding{Trainer: "did:tenzro:machine:zVictim", Task: "t1", Round: 3, Fragment: 1}
	if _, err := Bind(enc(victim.Metadata()), vecBinding, DefaultLimits); !errors.Is(err, ErrBinding) {
		t.Fatalf("Bind over another trainer's binding: %v", err)
	}
	if err := CheckBinding([]byte{1, 2}, vecBinding, DefaultLimits); !errors.Is(err, ErrShort) {
		t.Fatalf("short file: %v", err)
	}
}

// FuzzParseBinding: ParseBinding never panics; what it accepts re-encodes
// to the same metadata (one binding has one spelling), and Bind of a parsed
// file is idempotent.
func FuzzParseBinding(f *testing.F) {
	f.Add(MetaTrainer, "did:tenzro:machine:zTest", MetaTask, "t1", "3", "1")
	f.Add(MetaTrainer, "", "format", "pt", "03", "-1")
	f.Add("x", "y", MetaTask, "t", "18446744073709551615", "0")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, round, frag string) {
		md := map[string]string{k1: v1, k2: v2, MetaRound: round, MetaFragment: frag}
		b, err := ParseBinding(md)
		if err != nil {
			if !errors.Is(err, ErrBinding) && !errors.Is(err, ErrUnbound) {
				t.Fatalf("error %v wraps neither ErrBinding nor ErrUnbound", err)
			}
			return
		}
		got := b.Metadata()
		if len(got) != len(md) {
			t.Fatalf("accepted %v, re-encoded as %v", md, got)
		}
		for k, v := range md {
			if got[k] != v {
				t.Fatalf("key %q: accepted %q, re-encoded %q", k, v, got[k])
			}
		}
		plain, err := Encode([]Tensor{FromF32("w", []int64{1}, []float32{1})}, nil)
		if err != nil {
			t.Fatal(err)
		}
		bound, err := Bind(plain, b, DefaultLimits)
		if err != nil {
			t.Fatalf("Bind of an accepted binding: %v", err)
		}
		if err := CheckBinding(bound, b, DefaultLimits); err != nil {
			t.Fatalf("CheckBinding after Bind: %v", err)
		}
		again, err := Bind(bound, b, DefaultLimits)
		if err != nil || !bytes.Equal(again, bound) {
			t.Fatalf("Bind is not idempotent: %v", err)
		}
		var buf bytes.Buffer
		if wrote, err := BindTo(&buf, bytes.NewReader(plain), int64(len(plain)), b, DefaultLimits); err != nil || !wrote || !bytes.Equal(buf.Bytes(), bound) {
			t.Fatalf("BindTo differs from Bind: %v", err)
		}
	})
}
