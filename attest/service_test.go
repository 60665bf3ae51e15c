package attest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// memKV is a test fake of syncer.KV.
type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (k *memKV) Get(_ context.Context, ks machine.Keyspace, key []byte) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[string(ks)+"\x00"+string(key)]
	if !ok {
		return nil, machine.ErrNotFound
	}
	return append([]byte(nil), v...), nil
}

func (k *memKV) Scan(context.Context, machine.Keyspace, []byte, func(k, v []byte) error) error {
	return nil
}

func (k *memKV) Commit(_ context.Context, b *machine.Batch) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, op := range b.Ops {
		if op.Value == nil {
			delete(k.m, string(op.KS)+"\x00"+string(op.Key))
		} else {
			k.m[string(op.KS)+"\x00"+string(op.Key)] = op.Value
		}
	}
	return nil
}

func (k *memKV) Close() error { return nil }

func TestService(t *testing.T) {
	ctx := context.Background()
	now := day(2025, 6, 1)
	clock := func() time.Time { return now }
	kv := &memKV{m: map[string][]byte{}}
	nonces := NewNonceStore(nil, time.Minute, clock)
	s := NewService(nonces, KVEvidence{KV: kv}, clock)

	n, err := s.Nonce(ctx, "task-1", "did:tenzro:machine:x")
	if err != nil || len(n) != NonceSize {
		t.Fatalf("nonce %x: %v", n, err)
	}
	// The syncer consumes it in the same scope, once.
	if err := nonces.Consume(ctx, NonceScope("task-1", "did:tenzro:machine:x"), n); err != nil {
		t.Fatalf("consume: %v", err)
	}
	if _, err := s.Nonce(ctx, "", "d"); machine.KindOf(err) != machine.KindInvalid {
		t.Fatalf("empty task id: %v", err)
	}

	envelope := env(t, "nitro", "blocky_nitro_attestation.cbor")
	d, err := s.SubmitEvidence(ctx, "task-1", "did:tenzro:machine:x", envelope)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := ParseEnvelope(envelope)
	if d != Digest(e.Vendor, e.Evidence) {
		t.Fatalf("digest %s is not the receipt digest", d)
	}
	if d2, err := s.SubmitEvidence(ctx, "task-1", "did:tenzro:machine:x", envelope); err != nil || d2 != d {
		t.Fatalf("resubmit: %s %v", d2, err)
	}
	got, err := s.GetEvidence(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := ParseEnvelope(got); err != nil || Digest(g.Vendor, g.Evidence) != d {
		t.Fatalf("stored envelope: %v", err)
	}
	if _, err := s.GetEvidence(ctx, wire.SHA256([]byte("none"))); machine.KindOf(err) != machine.KindNotFound {
		t.Fatalf("missing evidence: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte(`{"vendor":"sgx","evidence":"AA=="}`), []byte(`{"vendor":"tdx","evidence":"AA==","x":1}`), make([]byte, MaxEnvelope+1)} {
		if _, err := s.SubmitEvidence(ctx, "t", "d", bad); machine.KindOf(err) != machine.KindInvalid {
			t.Fatalf("bad envelope %.40q: %v", bad, err)
		}
	}

	for _, vendor := range []string{"tdx", "snp", "nitro"} {
		b, err := s.Policy(ctx, wire.TierConfidential, vendor)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParsePolicy(b, wire.TierConfidential); err != nil || !json.Valid(b) {
			t.Fatalf("%s template does not parse: %v", vendor, err)
		}
	}
	if _, err := s.Policy(ctx, wire.TierOpen, "tdx"); machine.KindOf(err) != machine.KindInvalid {
		t.Fatalf("Open tier: %v", err)
	}
	if _, err := s.Policy(ctx, wire.TierVerified, "sgx"); machine.KindOf(err) != machine.KindInvalid {
		t.Fatalf("unknown vendor: %v", err)
	}
}
