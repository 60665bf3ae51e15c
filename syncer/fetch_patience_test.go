package syncer_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// hidingBlobs is this node's store without the hidden hashes: payloads
// another node received, which this syncer must fetch.
type hidingBlobs struct {
	syncer.Blobs
	mu     sync.Mutex
	hidden map[wire.Hash]bool
}

func (b *hidingBlobs) isHidden(h wire.Hash) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hidden[h]
}

func (b *hidingBlobs) Has(ctx context.Context, h wire.Hash) (bool, error) {
	if b.isHidden(h) {
		return false, nil
	}
	return b.Blobs.Has(ctx, h)
}

func (b *hidingBlobs) Get(ctx context.Context, h wire.Hash) ([]byte, error) {
	if b.isHidden(h) {
		return nil, machine.ErrNotFound
	}
	return b.Blobs.Get(ctx, h)
}

func (b *hidingBlobs) Open(ctx context.Context, h wire.Hash) (io.ReadCloser, int64, error) {
	if b.isHidden(h) {
		return nil, 0, machine.ErrNotFound
	}
	return b.Blobs.Open(ctx, h)
}

// flakyFetcher is the network: it fails until given bytes.
type flakyFetcher struct {
	mu    sync.Mutex
	give  map[wire.Hash][]byte
	tries int
}

func (f *flakyFetcher) Fetch(_ context.Context, h wire.Hash, _ uint64, _ string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries++
	if b, ok := f.give[h]; ok {
		return b, nil
	}
	return nil, errors.New("no peer gave it (connection refused)")
}

// A payload the syncer cannot fetch at once is retried, not rejected: the
// input is accepted once a peer gives it. Only one nobody gives until half
// of the syncer's slot has passed is rejected as unavailable — and the
// round still commits.
func TestUnfetchedPayloadIsRetriedThenRejected(t *testing.T) {
	for _, tc := range []struct {
		name      string
		appears   bool // a peer gives the payload after the first failures
		wantInput string
	}{
		{"given later: accepted", true, ""},
		{"never given: rejected after half the slot", false, "payload unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startedRun(t, 2)
			hb := &hidingBlobs{Blobs: syncer.KVBlobs{KV: h.kv}, hidden: map[wire.Hash]bool{}}
			ff := &flakyFetcher{give: map[wire.Hash][]byte{}}
			n, err := syncer.NewNode(h.ctx, syncer.Config{Chain: h.chain, Blobs: hb, Local: h.kv, Engine: h.eng,
				Signer: syncer.KeySigner{Key: h.syncerKey()}, Dev: true, Clock: func() time.Time { return h.now }, Logger: quiet, Fetcher: ff})
			if err != nil {
				t.Fatal(err)
			}
			h.node = n
			var hidden *wire.OuterGradient
			for i := 0; i < 8; i++ {
				for f := 0; f < 2; f++ {
					g := h.gradient(i, 0, f, 1)
					if err := h.submit(g); err != nil {
						t.Fatal(err)
					}
					if i == 0 && f == 0 {
						hidden = g
					}
				}
			}
			hb.mu.Lock()
			hb.hidden[hidden.PayloadHash] = true
			hb.mu.Unlock()
			committed := func() bool { return h.run().Round > 0 }

			// Every trainer submitted: the round is due now. The fetch
			// fails, so the syncer abstains and nothing is committed.
			if err := h.tick(); err != nil {
				t.Fatal(err)
			}
			if committed() || ff.tries == 0 {
				t.Fatalf("committed %v after %d fetch tries: want an abstention", committed(), ff.tries)
			}
			// Still inside the first half of the slot (10 minutes by
			// default): more failed tries, no commit.
			for k := 0; k < 4; k++ {
				h.advance(time.Minute)
				if err := h.node.Tick(h.ctx); err != nil {
					t.Fatal(err)
				}
				if committed() {
					t.Fatalf("committed with a payload not fetched, %d min into the slot", k+1)
				}
			}
			if tc.appears {
				ff.mu.Lock()
				ff.give[hidden.PayloadHash] = hidden.GradientPayload
				ff.mu.Unlock()
			}
			for k := 0; k < 20 && !committed(); k++ {
				h.advance(time.Minute)
				if err := h.node.Tick(h.ctx); err != nil {
					t.Fatal(err)
				}
			}
			if !committed() {
				t.Fatal("the round never committed")
			}
			tr, err := h.node.GetTranscript(h.ctx, h.task)
			if err != nil {
				t.Fatal(err)
			}
			var got *wire.FragmentCommit
			for k := range tr[0].Fragments {
				if tr[0].Fragments[k].Fragment == 0 {
					got = &tr[0].Fragments[k]
				}
			}
			if got == nil {
				t.Fatal("no commit of fragment 0")
			}
			for _, in := range got.Inputs {
				if in.TrainerDID != hidden.TrainerDID {
					continue
				}
				if tc.wantInput == "" && in.Rejected != "" {
					t.Fatalf("input rejected: %s", in.Rejected)
				}
				if tc.wantInput != "" && !strings.Contains(in.Rejected, tc.wantInput) {
					t.Fatalf("input rejected %q, want %q", in.Rejected, tc.wantInput)
				}
				return
			}
			t.Fatalf("the commit has no input of %s", hidden.TrainerDID)
		})
	}
}
