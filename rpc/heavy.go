package rpc

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/creachadair/jrpc2"
	"golang.org/x/sync/semaphore"

	"github.com/tenzro/train/wire"
)

// Heavy reads (docs/protocol/hardening.md, "Heavy reads"). A few calls load
// payloads or weights, or re-execute a fragment, and cost the node memory in
// proportion to the run's payloads rather than to the request: one replay of
// a fragment of 4 × 128 MB payloads held ≈ 1 GB. They run under a semaphore
// weighted in bytes (Options.HeavyMemoryBytes), one call alone per HTTP
// request (refused inside batches, where one ~1 KB body could start many),
// and a replay's result is kept by (task, round, fragment, the commit it
// re-executes) — a committed fragment's replay is a pure function of
// committed state — so that asking again, or many clients asking at once,
// costs one execution. The commit is part of the key because an upheld
// challenge rolls a commit back and the fragment is committed again: the
// replay of the redone commit is a new answer, not the cached one.

// Defaults of the heavy-read budget.
const (
	// DefaultHeavyMemoryBytes is the memory all heavy reads may hold at once.
	DefaultHeavyMemoryBytes = 2 << 30
	// DefaultReplayBytes is what one replay is assumed to hold: measured
	// ≈ 1 GB RSS for a fragment of 4 × 128 MB payloads (issue 22).
	DefaultReplayBytes = 1 << 30
	// DefaultReplayCacheEntries bounds the cached replay results (each a
	// few hundred bytes).
	DefaultReplayCacheEntries = 4096
)

// heavyMethods are the calls that load payloads or re-execute.
var heavyMethods = map[string]bool{
	wire.MethodReplayFragment: true,
	wire.MethodGetPayload:     true,
	wire.MethodGetWeights:     true,
}

// IsHeavy reports whether method runs under the heavy-read budget and is
// refused inside batches.
func IsHeavy(method string) bool { return heavyMethods[method] }

// refuseHeavyInBatch marks every heavy call of a batch of more than one
// request as an invalid request; the batch's other calls run.
func refuseHeavyInBatch(reqs []*jrpc2.ParsedRequest) {
	if len(reqs) < 2 {
		return
	}
	for _, q := range reqs {
		if q.Error == nil && heavyMethods[q.Method] {
			q.Error = &jrpc2.Error{Code: jrpc2.InvalidRequest, Message: fmt.Sprintf(
				"invalid request: %s loads payloads or re-executes and is refused inside a batch; send it as a single request", trunc(q.Method))}
		}
	}
}

// heavy is the server's heavy-read budget and replay cache.
type heavy struct {
	sem    *semaphore.Weighted
	budget int64
	replay int64

	mu       sync.Mutex
	inflight map[replayKey]*replayCall
	cache    map[replayKey]*list.Element
	order    *list.List // of *replayEntry, least recently used first
	max      int
	hits     int64
	runs     int64
}

type replayKey struct {
	task     string
	round    uint64
	fragment uint64
	// The commit: its result hash and the height it was committed at (a
	// commit redone after a rollback is a different one even if its result
	// were the same).
	result wire.Hash
	height int64
}

// CommitNamer is implemented by a ChallengeService that can say cheaply
// which commit a replay of (task, round, fragment) would re-execute now.
// Replays are cached only through it; a service without it has every
// replay executed (still under the budget and one at a time per key).
type CommitNamer interface {
	CommitOf(ctx context.Context, task string, round, fragment uint64) (result wire.Hash, height int64, err error)
}

type replayEntry struct {
	key replayKey
	res *wire.ReplayFragmentResult
}

type replayCall struct {
	done chan struct{}
	res  *wire.ReplayFragmentResult
	err  error
}

func newHeavy(budget, replay int64, entries int) *heavy {
	return &heavy{sem: semaphore.NewWeighted(budget), budget: budget, replay: min(replay, budget),
		inflight: map[replayKey]*replayCall{}, cache: map[replayKey]*list.Element{}, order: list.New(), max: entries}
}

// errHeavyBusy: no room in the heavy-read budget within the wait.
var errHeavyBusy = errors.New("heavy-read budget busy")

// acquire takes n bytes of the budget (at most all of it), waiting up to
// the server's LargeWait.
func (s *Server) acquireHeavy(ctx context.Context, method string, n int64) (func(), error) {
	n = max(1, min(n, s.heavy.budget))
	wctx, cancel := context.WithTimeout(ctx, s.opts.LargeWait)
	defer cancel()
	if err := s.heavy.sem.Acquire(wctx, n); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, newError(CodeBusy, &errData{Limit: s.heavy.budget},
			"server busy: %s needs %d bytes of the %d-byte heavy-read budget (node flag --heavy-memory-bytes) and none freed within %s; retry later",
			method, n, s.heavy.budget, s.opts.LargeWait)
	}
	return func() { s.heavy.sem.Release(n) }, nil
}

// replay runs fn for key once: a cached result answers at once, a call
// already running for key is waited for, else fn runs under the budget.
func (s *Server) replayOnce(ctx context.Context, p *wire.ReplayFragmentParams, fn func(context.Context, *wire.ReplayFragmentParams) (*wire.ReplayFragmentResult, error)) (*wire.ReplayFragmentResult, error) {
	h := s.heavy
	key := replayKey{task: p.TaskID, round: p.Round, fragment: p.Fragment}
	cacheable := false
	if cn, ok := s.opts.Challenges.(CommitNamer); ok {
		// An error here (no such commit) is left to the replay itself,
		// which refuses with the precise reason; nothing is cached then.
		if r, ht, err := cn.CommitOf(ctx, p.TaskID, p.Round, p.Fragment); err == nil {
			key.result, key.height, cacheable = r, ht, true
		}
	}
	h.mu.Lock()
	if el, ok := h.cache[key]; ok && cacheable {
		h.order.MoveToBack(el)
		h.hits++
		res := *el.Value.(*replayEntry).res
		h.mu.Unlock()
		return &res, nil
	}
	if c, ok := h.inflight[key]; ok {
		h.mu.Unlock()
		select {
		case <-c.done:
			if c.err != nil {
				return nil, c.err
			}
			res := *c.res
			return &res, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &replayCall{done: make(chan struct{})}
	h.inflight[key] = c
	h.mu.Unlock()

	release, err := s.acquireHeavy(ctx, wire.MethodReplayFragment, h.replay)
	if err == nil {
		// The execution is shared: one caller giving up does not cancel it
		// for the others waiting on it.
		c.res, c.err = fn(context.WithoutCancel(ctx), p)
		release()
	} else {
		c.err = err
	}
	h.mu.Lock()
	delete(h.inflight, key)
	h.runs++
	// Only complete results are kept: an input that could not be fetched
	// now may be fetched later.
	// (A commit redone while this ran: the answer is for the new commit,
	// not the key's, and is not kept.)
	if cacheable && c.err == nil && c.res != nil && !c.res.Unavailable && c.res.Committed == key.result && h.max > 0 {
		cp := *c.res
		h.cache[key] = h.order.PushBack(&replayEntry{key: key, res: &cp})
		for h.order.Len() > h.max {
			old := h.order.Remove(h.order.Front()).(*replayEntry)
			delete(h.cache, old.key)
		}
	}
	h.mu.Unlock()
	close(c.done)
	if c.err != nil {
		return nil, c.err
	}
	res := *c.res
	return &res, nil
}

// HeavyStats says how replays were answered: executions started (runs) and
// answers from the cache (hits).
func (s *Server) HeavyStats() (runs, hits int64) {
	s.heavy.mu.Lock()
	defer s.heavy.mu.Unlock()
	return s.heavy.runs, s.heavy.hits
}

// weightsWeight is the budget a getWeights of one fragment takes: the size
// of the fragment's stored weights blob, else the blob cap.
func (s *Server) weightsWeight(ctx context.Context, p *wire.GetWeightsParams) int64 {
	if run, err := s.svc.GetRun(ctx, p.TaskID); err == nil && run != nil && p.FragmentIndex < uint64(len(run.Fragments)) {
		if h := run.Fragments[p.FragmentIndex].WeightsHash; !h.IsZero() {
			return s.payloadWeight(ctx, h)
		}
	}
	return s.opts.MaxBlobBytes
}

// payloadWeight is the budget a getPayload of h takes while it loads: its
// size, or the blob cap when the size is not known. (The budget is held
// while a call loads or re-executes; the JSON answer is encoded after,
// under the server's handler concurrency.)
func (s *Server) payloadWeight(ctx context.Context, h wire.Hash) int64 {
	if s.opts.Blobs != nil {
		if b, err := s.opts.Blobs.OpenBlob(ctx, h); err == nil {
			n := b.Size()
			_ = b.Close()
			return n
		}
	}
	return s.opts.MaxBlobBytes
}
