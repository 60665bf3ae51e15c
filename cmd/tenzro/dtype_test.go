package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

func encodeTensors(t *testing.T, ts ...safetensors.Tensor) []byte {
	t.Helper()
	b, err := safetensors.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDtypeConversion: post-task, set-init-weights and submit-gradient send
// the run's dtype (PROTOCOL §5): F32 tensors for a bf16 run are rounded to
// BF16 before hashing and signing (the fake checks the signature over what
// arrived), with one line on stderr; --no-convert refuses instead; BF16 for
// an f32 run is always refused; a compressed run's payloads go as they are.
func TestDtypeConversion(t *testing.T) {
	vals := []float32{0.1, -3.14159, 1e-3, 65504.5}
	f32 := encodeTensors(t, safetensors.FromF32("layer0.w", []int64{4}, vals), safetensors.FromF32("layer1.w", []int64{4}, vals))
	bf16 := encodeTensors(t, safetensors.FromF32AsBF16("layer0.w", []int64{4}, vals), safetensors.FromF32AsBF16("layer1.w", []int64{4}, vals))
	gF32 := encodeTensors(t, safetensors.FromF32("layer1.w", []int64{4}, vals))
	gBF16 := encodeTensors(t, safetensors.FromF32AsBF16("layer1.w", []int64{4}, vals))
	cases := []struct {
		name      string
		dtype     string // the spec's
		codec     bool   // the run compresses its payloads
		cmd       string // post-task, set-init-weights or submit-gradient
		file      []byte
		noConvert bool
		sent      []byte // the tensors the node got (nil: refused, nothing sent)
		errWant   string
		converted bool
	}{
		{"post-task rounds F32 under bf16", "bf16", false, "post-task", f32, false, bf16, "", true},
		{"post-task --no-convert refuses", "bf16", false, "post-task", f32, true, nil, "--no-convert refuses", false},
		{"post-task sends BF16 under bf16 as is", "bf16", false, "post-task", bf16, false, bf16, "", false},
		{"post-task never widens BF16 under f32", "f32", false, "post-task", bf16, false, nil, "never widens BF16 to F32", false},
		{"post-task sends F32 under f32 as is", "f32", false, "post-task", f32, false, f32, "", false},
		{"set-init-weights rounds F32 under bf16", "bf16", false, "set-init-weights", f32, false, bf16, "", true},
		{"set-init-weights --no-convert refuses", "bf16", false, "set-init-weights", f32, true, nil, "--no-convert refuses", false},
		{"submit rounds F32 for a bf16 run", "bf16", false, "submit-gradient", gF32, false, gBF16, "", true},
		{"submit --no-convert refuses", "bf16", false, "submit-gradient", gF32, true, nil, "--no-convert refuses", false},
		{"submit never widens BF16 for an f32 run", "f32", false, "submit-gradient", gBF16, false, nil, "never widens BF16 to F32", false},
		{"submit sends F32 to an f32 run as is", "f32", false, "submit-gradient", gF32, false, gF32, "", false},
		{"a compressed run's payload goes as it is", "bf16", true, "submit-gradient", gF32, false, gF32, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sponsor := e.keygen("sponsor.key", "human")
			e.keygen("t0.key", "machine")
			spec := strings.Replace(specJSON("t9", sponsor, 6), `"dtype":"bf16"`, `"dtype":"`+tc.dtype+`"`, 1)
			if tc.codec {
				spec = strings.Replace(spec, `"created_at"`, `"compression":{"codec":"int8-block","block":64},"created_at"`, 1)
			}
			want := "F32"
			if tc.dtype == "bf16" {
				want = "BF16"
			}
			frag := wire.FragmentView{Dtype: want, N: 4}
			e.fake.run = &wire.RunView{TaskID: "t9", TaskSpec: json.RawMessage(spec), Status: wire.StatusRunning, Round: 1,
				Fragments: []wire.FragmentView{frag, frag}}
			path := e.write("in.safetensors", string(tc.file))
			var args []string
			switch tc.cmd {
			case "post-task":
				args = []string{"train", "post-task", "--spec", e.write("spec.json", spec), "--init-weights", path, "--key", e.path("sponsor.key")}
			case "set-init-weights":
				args = []string{"train", "set-init-weights", "--task-id", "t9", "--weights", path, "--key", e.path("sponsor.key")}
			default:
				args = []string{"train", "submit-gradient", "--task-id", "t9", "--round", "1", "--fragment", "1", "--payload", path, "--key", e.path("t0.key")}
			}
			if tc.noConvert {
				args = append(args, "--no-convert")
			}
			code, out, errOut := e.run(args...)
			var got []byte
			switch {
			case tc.cmd == "post-task" && len(e.fake.posts) > 0:
				got = e.fake.posts[0].InitWeights
			case tc.cmd == "set-init-weights" && e.fake.initWeights != nil:
				got = e.fake.initWeights
			case tc.cmd == "submit-gradient" && len(e.fake.subs) > 0:
				got = e.fake.subs[0].GradientPayload
			}
			if tc.sent == nil {
				if code != 1 || !strings.Contains(errOut, tc.errWant) || got != nil {
					t.Fatalf("exit %d, sent %d bytes, stderr %q; want exit 1 naming %q and nothing sent", code, len(got), errOut, tc.errWant)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %q %q", code, out, errOut)
			}
			ts, _, err := safetensors.Parse(got, safetensors.DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			wantTs, _, _ := safetensors.Parse(tc.sent, safetensors.DefaultLimits)
			if len(ts) != len(wantTs) {
				t.Fatalf("sent %d tensors, want %d", len(ts), len(wantTs))
			}
			for i := range ts {
				if ts[i].Name != wantTs[i].Name || ts[i].Dtype != wantTs[i].Dtype || string(ts[i].Data) != string(wantTs[i].Data) {
					t.Fatalf("sent tensor %q %s %x, want %q %s %x", ts[i].Name, ts[i].Dtype, ts[i].Data, wantTs[i].Name, wantTs[i].Dtype, wantTs[i].Data)
				}
			}
			if said := strings.Count(errOut, "rounded to BF16"); said != map[bool]int{true: 1, false: 0}[tc.converted] {
				t.Fatalf("stderr %q: %d conversion lines, want converted=%v", errOut, said, tc.converted)
			}
		})
	}
}

// TestChainPostTaskChecksDtype: tenzro chain post-task lays the weights out
// locally and sends no bytes, so it never converts: F32 weights under a bf16
// spec are refused before anything is broadcast.
func TestChainPostTaskChecksDtype(t *testing.T) {
	e := newEnv(t)
	sponsor := e.keygen("sponsor.key", "human")
	vals := []float32{1, 2, 3, 4}
	w := encodeTensors(t, safetensors.FromF32("layer0.w", []int64{4}, vals), safetensors.FromF32("layer1.w", []int64{4}, vals))
	code, _, errOut := e.run("chain", "post-task", "--spec", e.write("spec.json", specJSON("t9", sponsor, 6)), "--init-weights", e.write("w.safetensors", string(w)),
		"--key", e.path("sponsor.key"), "--comet-rpc", "http://127.0.0.1:1")
	if code != 2 || !strings.Contains(errOut, "architecture.dtype is bf16, so the initial weights must be BF16, but they are F32") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}
