package machine

import (
	"context"
	"crypto/sha256"
	"sync"

	"github.com/tenzro/train/wire"
)

// timerFacts are what timersMayFire reads from a run's stored header: every
// condition it tests that does not need the fragment states.
type timerFacts struct {
	status        string
	enrollDue     int64 // PostedMs + the enrolment window
	hasOpen       bool
	openMin       int64 // the smallest open challenge's deadline height
	hasPending    bool
	pendingAt     int64 // Pending[0].FinalAt
	awaitingFinal bool
	roundDue      int64 // RoundMs + the round deadline
	scored        bool
}

func headFacts(r *Run) timerFacts {
	f := timerFacts{status: r.Status, enrollDue: r.PostedMs + r.spec.EnrollWindow(), awaitingFinal: r.AwaitingFinal,
		roundDue: r.RoundMs + r.spec.RoundDeadline(), scored: r.Scorer != nil}
	for i, o := range r.Open {
		if i == 0 || o.Deadline < f.openMin {
			f.openMin = o.Deadline
		}
		f.hasOpen = true
	}
	if len(r.Pending) > 0 {
		f.hasPending, f.pendingAt = true, r.Pending[0].FinalAt
	}
	return f
}

// timerMemo remembers, per run, the facts timersMayFire decoded from the
// run's stored header, and whether a passed deadline would close one of its
// fragments, each keyed by the SHA-256 of the exact bytes they were decoded
// from. Every block asks every active run whether a timer fires; decoding a
// header (with its spec) and the fragment states was half of a validator's
// CPU with 200 runs waiting on a syncer (bench/results/state.md). A hit is
// what decoding the same bytes would give, so the memo changes no result on
// any node: it is a cache of a pure function, not state.
type timerMemo struct {
	mu   sync.Mutex
	runs map[string]*memoEntry
}

type memoEntry struct {
	head          [32]byte
	facts         timerFacts
	fragsKnown    bool
	frags         [32]byte // of the fragment states' keys and bytes
	deadlineFires bool
}

// memoMaxRuns bounds the memo (entries of finished runs are dropped as
// they are seen; past this many it starts over).
const memoMaxRuns = 1 << 16

func (m *timerMemo) entry(task string, head [32]byte) (*memoEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.runs[task]
	if !ok || e.head != head {
		return nil, false
	}
	c := *e
	return &c, true
}

func (m *timerMemo) put(task string, e memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs == nil || len(m.runs) >= memoMaxRuns {
		m.runs = map[string]*memoEntry{}
	}
	m.runs[task] = &e
}

func (m *timerMemo) drop(task string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.runs, task)
}

// fragsHash hashes the keys and bytes of run task's fragment states.
func fragsHash(ctx context.Context, kv KV, task string) ([32]byte, error) {
	h := sha256.New()
	var n [8]byte
	err := kv.Scan(ctx, KSRuns, fragPrefix(task), func(k, v []byte) error {
		for _, b := range [][]byte{k, v} {
			putLen(n[:], len(b))
			h.Write(n[:])
			h.Write(b)
		}
		return nil
	})
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out, err
}

func putLen(b []byte, n int) {
	for i := range b {
		b[i] = byte(uint64(n) >> (8 * i))
	}
}

// running says whether facts describe a run timers still visit.
func (f timerFacts) running() bool {
	return f.status == wire.StatusAwaiting || f.status == wire.StatusRunning
}
