package syncer_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// withWorkerKey is g's payload with a top-level header entry named
// "worker" that does not parse: a payload fault whose parse error quotes
// a name the trainer chose.
func withWorkerKey(h *harness, g *wire.OuterGradient) {
	h.t.Helper()
	p := g.GradientPayload
	n := binary.LittleEndian.Uint64(p[:8])
	bad := strings.Replace(string(p[8:8+n]), "{", `{"worker":1,`, 1)
	for len(bad)%8 != 0 {
		bad += " "
	}
	payload := binary.LittleEndian.AppendUint64(nil, uint64(len(bad)))
	resign(h, g, append(append(payload, bad...), p[8+n:]...))
}

// TestPayloadFaultNamingWorker: a record on chain whose payload the node
// never pre-checked (broadcast by another node) and whose parse error
// quotes "worker" is the payload's fault: the syncer commits the round
// with that input rejected for its parse error. Before, a substring test
// took any error mentioning "worker" for a local failure of the plugin
// host, so every syncer abstained and the round stalled — for the price
// of one submission.
func TestPayloadFaultNamingWorker(t *testing.T) {
	h := bf16Run(t, "f32", 3, 2, 1, 2)
	for i := 0; i < 2; i++ {
		if err := h.submit(h.gradientOf("F32", i, 0, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	g := h.gradientOf("F32", 2, 0, 0, 1)
	withWorkerKey(h, g)
	if err := h.submit(g); err == nil || !strings.Contains(err.Error(), `"worker"`) {
		t.Fatalf("the node's own pre-check: err %v, want the parse error naming \"worker\"", err)
	}
	h.block(h.record(g))
	h.closeRound(0)
	trs, err := h.node.GetTranscript(h.ctx, h.task)
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) == 0 || trs[0].Round != 0 {
		t.Fatalf("round 0 was not committed: %d transcript entries", len(trs))
	}
	fc := trs[0].Fragments[0]
	if fc.Status != wire.FragAggregated || len(fc.Inputs) != 3 {
		t.Fatalf("round 0: %s %s, %d inputs", fc.Status, fc.Reason, len(fc.Inputs))
	}
	for _, in := range fc.Inputs {
		bad := in.TrainerDID == g.TrainerDID
		if bad != strings.Contains(in.Rejected, `gradient_payload: safetensors: bad tensor entry: tensor "worker"`) || (!bad && in.Rejected != "") {
			t.Fatalf("%s rejected %q", in.TrainerDID, in.Rejected)
		}
	}
}
