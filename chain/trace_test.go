package chain

import (
	"encoding/binary"
	"testing"
)

// worldTrace pins the trace digest (metaTrace) of the world's history: a
// whole run sealed with a signed receipt, an equivocation claim, a verdict,
// a leave, a cancellation and an expiry. It was computed before runs were
// stored by key (commit 9c48624); results, commits, receipts and weights
// hashes do not depend on the state layout, so it must not move with it.
const worldTrace = "dfd510390cadea76aca2990bda0925120cf9df921a0fc150f2e47023d3836f7b"

// TestWorldTrace: the world's results, commits, receipt and weights hashes
// are the pinned ones.
func TestWorldTrace(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	var trace metaTrace
	for i, s := range w.history(t) {
		h.now = h.now.Add(s.advance)
		cases := s.txs(h)
		txs := make([][]byte, len(cases))
		for j, c := range cases {
			txs[j] = c.tx
		}
		res, _ := h.block(txs...)
		for j, c := range cases {
			if res[j].Code != c.code {
				t.Fatalf("step %d %s: code %d (%s), want %d", i, c.name, res[j].Code, res[j].Log, c.code)
			}
			trace.add(binary.BigEndian.AppendUint32(nil, res[j].Code), res[j].Data)
		}
	}
	if r := runOf(h, w.task); r == nil || r.Seal == nil || !r.Seal.Signed {
		t.Fatalf("run-1 is not sealed and signed: %+v", r)
	}
	got := trace.end(t, h, []string{w.task, w.task2, w.task3})
	t.Logf("world trace digest %s", got)
	if worldTrace != "" && got != worldTrace {
		t.Fatalf("world trace digest %s, want %s: a transaction result, commit, receipt or weights hash changed", got, worldTrace)
	}
}
