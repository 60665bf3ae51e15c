package plugins

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tenzro/train/syncer"
)

// Feeding guest memory. A call's bulk data — inputs, the round, weights,
// momentum, the aggregate — is a block the guest allocated (tenzro_alloc,
// exactly as ABI.md §4 prescribes). The host fills a block either by copying
// into it, or, for large blocks, by writing the data once into a stage
// (stage_linux.go) at an offset with the block's alignment within a page and
// mapping the stage's pages over the block's whole pages (the few bytes of
// its first and last partial page are copied). The guest sees the same bytes
// either way, its allocations and fuel do not change, and the results are
// identical; the mapping only saves faulting and zeroing fresh pages.

var pageSize = uint64(os.Getpagesize())

// mappedBlocks counts the blocks mapped from stages (tests check that the
// mapping path runs).
var mappedBlocks atomic.Int64

// source is one input's values: bytes in memory, or ranges of a reader (a
// blob file) whose concatenation is the values.
type source struct {
	id     int // identifies the content within a feeder
	b      []byte
	r      io.ReaderAt
	ranges []syncer.ByteRange
	size   int64
}

func bytesSource(b []byte) *source { return &source{b: b, size: int64(len(b))} }

func readerSource(r io.ReaderAt, ranges []syncer.ByteRange) *source {
	s := &source{r: r, ranges: ranges}
	for _, g := range ranges {
		s.size += g.Len
	}
	return s
}

// readAt fills dst with the values' bytes from off.
func (s *source) readAt(dst []byte, off int64) error {
	if off < 0 || off+int64(len(dst)) > s.size {
		return fmt.Errorf("plugins: read [%d,+%d) of %d bytes of values", off, len(dst), s.size)
	}
	if s.r == nil {
		copy(dst, s.b[off:])
		return nil
	}
	for _, g := range s.ranges {
		if len(dst) == 0 {
			return nil
		}
		if off >= g.Len {
			off -= g.Len
			continue
		}
		n := min(int64(len(dst)), g.Len-off)
		if _, err := s.r.ReadAt(dst[:n], g.Off+off); err != nil {
			return fmt.Errorf("plugins: reading values at %d: %w", g.Off+off, err)
		}
		dst, off = dst[n:], 0
	}
	return nil
}

// outBuf is an output's buffer: plain memory, or a stage region that the
// guest blocks writing the output map shared, so that the guest writes it in
// place. An unplaced buffer gets its stage region at the first block that
// binds it, at that block's offset within a page: from its feeder, or inside
// a room of a given stage (the node's arena, in a worker).
type outBuf struct {
	b   []byte
	st  *stage
	off int64
	// unplaced: n bytes, from f or from room [roomOff, roomOff+roomLen) of st
	n                int64
	f                *feeder
	roomOff, roomLen int64
	placed           bool
	zero             bool // clear the bytes when placing them
	// prefilled: the buffer holds the state a step updates in place (read
	// ahead while something else ran): putState does not read it again.
	prefilled bool
	// canonical: every NaN in the buffer is the canonical one (the native
	// outer step writes them so).
	canonical bool
}

// plainDest is an output landing in b.
func plainDest(b []byte) dest { return dest{out: &outBuf{b: b, placed: true}, hi: int64(len(b))} }

// stagedDest is an output of n bytes in a stage region of f (plain memory
// when f is nil or has no memory to give).
func stagedDest(f *feeder, n int64) dest { return dest{out: &outBuf{n: n, f: f}, hi: n} }

// roomDest is an output of n bytes placed inside st's bytes
// [roomOff, roomOff+roomLen), which must hold n plus a page.
func roomDest(st *stage, roomOff, roomLen, n int64) dest {
	return dest{out: &outBuf{n: n, st: st, roomOff: roomOff, roomLen: roomLen}, hi: n}
}

// dest is the bytes [lo, hi) of an output buffer.
type dest struct {
	out    *outBuf
	lo, hi int64
}

func (d dest) sub(lo, hi int64) dest { return dest{out: d.out, lo: d.lo + lo, hi: d.lo + hi} }

func (d dest) len() int64 { return d.hi - d.lo }

// place gives an unplaced buffer its bytes, so that d's first byte sits at
// ptr's offset within a page.
func (d dest) place(ptr uint32) {
	o := d.out
	if o.placed {
		return
	}
	o.placed = true
	cong := (uint64(ptr) - uint64(d.lo)) % pageSize
	switch {
	case o.f != nil:
		if st, off, err := o.f.region(o.n, cong); err == nil {
			o.st, o.off, o.b = st, off, st.mem[off:off+o.n:off+o.n]
		}
	case o.st != nil && o.roomLen >= o.n+int64(pageSize):
		off := o.roomOff + int64((cong+pageSize-uint64(o.roomOff)%pageSize)%pageSize)
		o.off, o.b = off, o.st.mem[off:off+o.n:off+o.n]
	}
	if o.b == nil {
		o.st, o.b = nil, make([]byte, o.n)
		return
	}
	if o.zero {
		clear(o.b)
	}
}

// bytes is d's bytes (the buffer must be placed).
func (d dest) bytes() []byte {
	if !d.out.placed {
		d.place(0)
	}
	return d.out.b[d.lo:d.hi:d.hi]
}

// feeder owns the stages of one engine operation (an Aggregate, a Verify, an
// OuterStep, a Finalize): they are given back when the operation ends, after
// every instance that maps them has been closed. It remembers what it staged,
// so that the round of a round-level verifier is staged once for all of its
// calls.
type feeder struct {
	pool   *stagePool
	stages []*stage
	blocks []stagedBlock
	nextID int
	// onRun, when set, is started (once) as an aggregation's guest begins
	// to run: work for the other core while the guest uses one.
	onRun func()
}

// running starts onRun.
func (f *feeder) running() {
	if f != nil && f.onRun != nil {
		run := f.onRun
		f.onRun = nil
		run()
	}
}

type stagedBlock struct {
	ids    []int
	b0, b1 int64
	st     *stage
	off    int64
}

func (e *Engine) newFeeder() *feeder {
	if !stagingAvailable || e.stages == nil || e.stageFrom == noStaging {
		return nil
	}
	return &feeder{pool: e.stages}
}

func (f *feeder) release() {
	if f != nil {
		f.pool.put(f.stages...)
		f.stages, f.blocks = nil, nil
	}
}

// ids numbers sources for the staged-block cache.
func (f *feeder) ids(srcs ...*source) {
	if f == nil {
		return
	}
	for _, s := range srcs {
		if s != nil && s.id == 0 {
			f.nextID++
			s.id = f.nextID
		}
	}
}

// region returns n bytes of a fresh stage at an offset congruent to ptr
// modulo the page size.
func (f *feeder) region(n int64, ptr uint64) (*stage, int64, error) {
	st, err := f.pool.get(n + int64(pageSize))
	if err != nil {
		return nil, 0, err
	}
	f.stages = append(f.stages, st)
	return st, int64(ptr % pageSize), nil
}

// lookup finds srcs' bytes [b0, b1), back to back, in a staged block at an
// offset congruent to ptr.
func (f *feeder) lookup(srcs []*source, b0, b1 int64, ptr uint64) (*stage, int64, bool) {
	span := b1 - b0
	for _, bl := range f.blocks {
		if bl.b0 != b0 || bl.b1 != b1 {
			continue
		}
	next:
		for j := 0; j+len(srcs) <= len(bl.ids); j++ {
			for i, s := range srcs {
				if s.id == 0 || bl.ids[j+i] != s.id {
					continue next
				}
			}
			off := bl.off + int64(j)*span
			if uint64(off)%pageSize == ptr%pageSize {
				return bl.st, off, true
			}
		}
	}
	return nil, 0, false
}

func (f *feeder) remember(srcs []*source, b0, b1 int64, st *stage, off int64) {
	ids := make([]int, len(srcs))
	for i, s := range srcs {
		ids[i] = s.id
	}
	f.blocks = append(f.blocks, stagedBlock{ids: ids, b0: b0, b1: b1, st: st, off: off})
}

// copyJob is one source's bytes [off, off+len(dst)) into dst.
type copyJob struct {
	dst []byte
	src *source
	off int64
}

// runCopies runs the jobs on up to GOMAXPROCS goroutines, in pieces of at
// most 16 MiB: copying is bound by memory bandwidth, which grows with cores.
func runCopies(jobs []copyJob) error {
	const piece = 16 << 20
	var pieces []copyJob
	for _, j := range jobs {
		for lo := 0; lo < len(j.dst); lo += piece {
			hi := min(lo+piece, len(j.dst))
			pieces = append(pieces, copyJob{dst: j.dst[lo:hi], src: j.src, off: j.off + int64(lo)})
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(pieces))
	if workers <= 1 {
		for _, p := range pieces {
			if err := p.src.readAt(p.dst, p.off); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
		errs []error
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(pieces) {
					return
				}
				if err := pieces[i].src.readAt(pieces[i].dst, pieces[i].off); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// noStaging as an engine's stageFrom stages nothing (Config.NoStaging).
const noStaging = -1

// stageMinimum is the smallest block that is staged.
func (e *Engine) stageMinimum() int64 {
	if e.stageFrom == noStaging {
		return math.MaxInt64
	}
	if e.stageFrom > 0 {
		return e.stageFrom
	}
	return stageMin
}

// view is the guest's bytes [ptr, ptr+n).
func (c *call) view(ptr uint32, n int64) ([]byte, error) {
	if n < 0 || uint64(ptr)+uint64(n) > uint64(c.mem.Size()) {
		return nil, c.fail(CodeTrap, "block outside guest memory")
	}
	if n == 0 {
		return nil, nil
	}
	v, ok := c.mem.Read(ptr, uint32(n))
	if !ok {
		return nil, c.fail(CodeTrap, "block outside guest memory")
	}
	return v, nil
}

// fill writes the bytes [b0, b1) of each source, back to back, into the
// guest block at ptr: staged and mapped when the block is large, else
// copied.
func (c *call) fill(ptr uint32, srcs []*source, b0, b1 int64) error {
	span := b1 - b0
	total := span * int64(len(srcs))
	if c.f != nil && c.mm != nil && total >= c.e.stageMinimum() {
		if st, off, ok := c.f.lookup(srcs, b0, b1, uint64(ptr)); ok {
			_, err := c.bind(ptr, total, st, off, false)
			return err
		}
		if st, off, err := c.f.region(total, uint64(ptr)); err == nil {
			jobs := make([]copyJob, len(srcs))
			for i, s := range srcs {
				jobs[i] = copyJob{dst: st.mem[off+int64(i)*span : off+int64(i+1)*span], src: s, off: b0}
			}
			if err := runCopies(jobs); err != nil {
				return err
			}
			c.f.remember(srcs, b0, b1, st, off)
			_, err := c.bind(ptr, total, st, off, false)
			return err
		}
		// no staging memory: copy
	}
	g, err := c.view(ptr, total)
	if err != nil {
		return err
	}
	jobs := make([]copyJob, len(srcs))
	for i, s := range srcs {
		jobs[i] = copyJob{dst: g[int64(i)*span : int64(i+1)*span], src: s, off: b0}
	}
	return runCopies(jobs)
}

// binding is a guest block backed by a stage region.
type binding struct {
	ptr    uint32
	n      int64
	st     *stage
	off    int64
	a0, a1 uint64 // the mapped whole pages, relative to ptr; a0 == a1: copied
}

// bind makes the guest block [ptr, ptr+n) hold the stage's bytes
// [off, off+n): its whole pages are mapped (shared: the guest's writes land
// in the stage) when ptr and off agree modulo the page size, the rest is
// copied.
func (c *call) bind(ptr uint32, n int64, st *stage, off int64, shared bool) (binding, error) {
	b := binding{ptr: ptr, n: n, st: st, off: off}
	g, err := c.view(ptr, n)
	if err != nil {
		return b, err
	}
	start := uint64(ptr)
	a0 := (start + pageSize - 1) &^ (pageSize - 1)
	a1 := (start + uint64(n)) &^ (pageSize - 1)
	if c.mm != nil && a1 > a0 && start%pageSize == uint64(off)%pageSize {
		if err := c.mm.mapStage(a0, a1-a0, st.fd, off+int64(a0-start), shared); err == nil {
			mappedBlocks.Add(1)
			b.a0, b.a1 = a0-start, a1-start
			copy(g[:b.a0], st.mem[off:])
			copy(g[b.a1:], st.mem[off+int64(b.a1):off+n])
			return b, nil
		}
	}
	copy(g, st.mem[off:off+n])
	return b, nil
}

// unbind copies what the guest wrote in a shared block's unmapped parts back
// into the stage.
func (c *call) unbind(b binding) error {
	g, err := c.view(b.ptr, b.n)
	if err != nil {
		return err
	}
	if b.a1 == b.a0 {
		copy(b.st.mem[b.off:b.off+b.n], g)
		return nil
	}
	copy(b.st.mem[b.off:], g[:b.a0])
	copy(b.st.mem[b.off+int64(b.a1):b.off+b.n], g[b.a1:])
	return nil
}

// putOut prepares the guest block at ptr for an output that lands in d:
// with a stage behind d, the block maps it shared, holding d's current bytes
// (zeroed first for a fresh output); otherwise the block is written from d
// when keep is set (a chunked pass's previous output), else left as
// allocated (zero).
func (c *call) putOut(ptr uint32, d dest, keep bool) (*binding, error) {
	d.place(ptr)
	b := d.bytes()
	if d.out.st != nil && c.mm != nil && d.len() >= c.e.stageMinimum() {
		if !keep {
			clear(b)
		}
		bd, err := c.bind(ptr, d.len(), d.out.st, d.out.off+d.lo, true)
		return &bd, err
	}
	if keep {
		return nil, c.write(ptr, b)
	}
	return nil, nil
}

// getOut collects an output written by the guest into d.
func (c *call) getOut(ptr uint32, d dest, b *binding) error {
	if b != nil {
		return c.unbind(*b)
	}
	return c.readInto(ptr, d.bytes())
}

// putState fills the guest block at ptr with src's bytes from off (nil src:
// the block stays zero), for a state the call updates in place and that
// lands in out. With a stage behind out, src is read into out and the block
// maps it shared.
func (c *call) putState(ptr uint32, src *source, off int64, out dest) (*binding, error) {
	out.place(ptr)
	b := out.bytes()
	if out.out.st != nil && c.mm != nil && out.len() >= c.e.stageMinimum() {
		if out.out.prefilled {
		} else if src == nil {
			clear(b)
		} else if err := runCopies([]copyJob{{dst: b, src: src, off: off}}); err != nil {
			return nil, err
		}
		bd, err := c.bind(ptr, out.len(), out.out.st, out.out.off+out.lo, true)
		return &bd, err
	}
	if out.out.prefilled {
		return nil, c.write(ptr, b)
	}
	if src == nil {
		return nil, nil
	}
	return nil, c.fill(ptr, []*source{src}, off, off+out.len())
}
