//go:build linux

package plugins

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A stage is a memfd mapped in this process whose pages the host maps
// straight into guest memory (memalloc_linux.go): bulk data is written into
// a stage once — read from a blob file, copied from the caller's bytes or
// the node's arena — and appears in the guest's block without a copy into
// fresh guest pages (which costs a page fault and a zeroed page per 4 KiB
// before the copy). A stage's pages stay allocated between calls, so
// writing into it costs only the copy. Blocks the guest writes (the
// aggregate, new weights and momentum) are mapped shared, so they land in
// the stage; blocks it reads are mapped private (copy on write): the stage
// never changes under a guest, and a guest never changes a stage it did not
// own.
type stage struct {
	fd  int
	mem []byte
}

// stagePool keeps stages between calls: a finalize of K=6 inputs of 2^24
// f32 stages about 540 MB, and faulting that much fresh memory again for
// every round would cost about as much as the copy. Free stages are given
// back once the pool has been idle for stageIdleTrim.
type stagePool struct {
	mu    sync.Mutex
	free  []*stage
	total int64 // bytes mapped by all stages, free or in use
	uses  uint64
	// reserve, when set, is called with the pool's total before a new stage
	// is mapped (a worker raises its RLIMIT_AS by it).
	reserve func(total int64)
	closed  bool
}

const (
	stageIdleTrim = 30 * time.Second
	// stageMin: blocks smaller than this are copied into the guest, not
	// staged (a mapping costs a few system calls).
	stageMin = 1 << 20
	// stageRound: stages are made in multiples of this.
	stageRound = 2 << 20
)

// stagingAvailable reports whether this system stages blocks.
const stagingAvailable = true

// get returns a stage of at least size bytes, the smallest free one that
// fits or a new one.
func (sp *stagePool) get(size int64) (*stage, error) {
	sp.mu.Lock()
	if s, ok := takeSmallest(&sp.free, size, func(s *stage) int { return len(s.mem) }); ok {
		sp.mu.Unlock()
		return s, nil
	}
	size = (size + stageRound - 1) &^ (stageRound - 1)
	sp.total += size
	total := sp.total
	sp.mu.Unlock()
	if sp.reserve != nil {
		sp.reserve(total)
	}
	fd, err := unix.MemfdCreate("tenzro-plugin-stage", unix.MFD_CLOEXEC)
	if err == nil {
		if err = unix.Ftruncate(fd, size); err != nil {
			_ = unix.Close(fd)
		}
	}
	var mem []byte
	if err == nil {
		if mem, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			_ = unix.Close(fd)
		}
	}
	if err != nil {
		sp.mu.Lock()
		sp.total -= size
		sp.mu.Unlock()
		return nil, fmt.Errorf("plugins: staging memory of %d bytes: %w", size, err)
	}
	return &stage{fd: fd, mem: mem}, nil
}

// put returns stages to the pool (dropping them when it is closed) and
// schedules the idle trim.
func (sp *stagePool) put(ss ...*stage) {
	if len(ss) == 0 {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		for _, s := range ss {
			sp.total -= int64(len(s.mem))
			s.drop()
		}
		return
	}
	sp.free = append(sp.free, ss...)
	sp.uses++
	uses := sp.uses
	time.AfterFunc(stageIdleTrim, func() { sp.trimIf(uses) })
}

func (sp *stagePool) trimIf(uses uint64) {
	sp.mu.Lock()
	if sp.uses != uses {
		sp.mu.Unlock()
		return
	}
	sp.mu.Unlock()
	sp.trim()
}

// trim drops every free stage (stages in use are dropped when put back
// after close, or kept).
func (sp *stagePool) trim() {
	sp.mu.Lock()
	free := sp.free
	sp.free = nil
	for _, s := range free {
		sp.total -= int64(len(s.mem))
	}
	sp.mu.Unlock()
	for _, s := range free {
		s.drop()
	}
}

func (sp *stagePool) close() {
	sp.mu.Lock()
	sp.closed = true
	sp.mu.Unlock()
	sp.trim()
}

// drop unmaps the stage here. Guests that still map its pages (an
// abandoned instance) keep them until they are closed: a stage is never
// truncated.
func (s *stage) drop() {
	if s.mem != nil {
		_ = unix.Munmap(s.mem)
		_ = unix.Close(s.fd)
		s.mem = nil
	}
}
