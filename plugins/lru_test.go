package plugins

import (
	"context"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
)

// TestCompiledModuleLRU: the compiled code of published plugins stays under
// the byte bound (least recently used first out), built-ins stay, and an
// evicted plugin is compiled again from the store when a call needs it.
func TestCompiledModuleLRU(t *testing.T) {
	kv, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	mods := make([][]byte, 4)
	for i := range mods {
		mods[i] = buildModule(t, modSpec{aggBody: []byte{0x41, 0x00}, memMin: uint32(i + 1)})
	}
	bound := int64(2*len(mods[0]) + len(mods[0])/2) // room for two
	e := hostileEngine(t, Config{KV: kv, CacheBytes: bound})
	ctx := context.Background()
	for _, m := range mods {
		if _, err := e.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
		if got := e.cachedBytes(); got > bound {
			t.Fatalf("cache holds %d bytes, bound %d", got, bound)
		}
	}
	loaded := func(m []byte) bool {
		e.mu.RLock()
		defer e.mu.RUnlock()
		_, ok := e.loaded[wire.SHA256(m)]
		return ok
	}
	if loaded(mods[0]) || loaded(mods[1]) || !loaded(mods[2]) || !loaded(mods[3]) {
		t.Fatal("not the least recently used evicted")
	}
	if _, err := e.Get(ctx, wire.SHA256(mods[0])); err != nil {
		t.Fatal(err)
	}
	// An evicted plugin still runs: it is compiled again from the store.
	if err := runHostile(t, e, mods[1]); err != nil {
		t.Fatalf("evicted plugin: %v", err)
	}
	if !loaded(mods[1]) || e.cachedBytes() > bound {
		t.Fatal("reloaded plugin not cached within the bound")
	}
	if out := aggregate(t, e, mustResolve(t, e, "Mean", 2), [][]float32{{1}, {3}}); toF32(out.Aggregate)[0] != 2 {
		t.Fatal("built-ins affected by eviction")
	}
	var _ machine.KV = kv
}
