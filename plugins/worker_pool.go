//go:build linux

package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tenzro/train/wire"
)

// pool owns the worker processes: at most size at a time, each serving one
// call; a worker that dies or is killed is dropped and a fresh one started
// for a later call.
type pool struct {
	cmd   []string
	env   string
	log   *slog.Logger
	slots chan struct{}

	mu     sync.Mutex
	idle   []*worker
	all    map[*worker]bool
	closed bool
}

type worker struct {
	cmd    *exec.Cmd
	fd     int // the node's end of the socket pair
	exited chan struct{}
	has    map[wire.Hash]bool // modules this worker has loaded
	once   sync.Once
	pl     *pool
	uses   uint64 // calls served; guarded by pool.mu while idle

	// The arenas: memfds mapped here and in the worker, kept between
	// calls (so their pages are faulted in once). A call takes a free one
	// that fits (or makes one); its consume may keep it (held: not reused
	// until released, e.g. the new state a store holds as pending blobs).
	amu      sync.Mutex
	free     []*arena // at most arenaFree
	nextID   uint64
	created  int      // arenas made (tests)
	forget   []uint64 // arenas unmapped here since the last request: the worker unmaps them too
	gone     bool     // killed: arenas given back are unmapped
	heldSize int64    // bytes of held arenas (tests, logs)
}

// arena is one memfd shared with the worker, numbered per worker.
type arena struct {
	id   uint64
	fd   int
	mem  []byte
	held bool // kept by a consumer until its release
	busy bool // the call in progress's
}

// Arena retention: the free arenas of a worker are given back (in both
// processes) once it has been idle for arenaIdleTrim if they add up to
// more than arenaKeepBytes, so a burst of large calls (a round's
// fragments) reuses them, and an idle node does not keep hundreds of
// megabytes of shared memory. A worker keeps at most arenaFree free
// arenas; held ones are counted apart (each is a pending blob's bytes,
// bounded by the store's memory cap).
const (
	arenaKeepBytes = 64 << 20
	arenaIdleTrim  = 30 * time.Second
	arenaFree      = 3
)

// trimArena drops an idle worker's free arenas if it has served no call
// since uses (the worker is taken out of the pool meanwhile, holding a
// slot).
func (pl *pool) trimArena(w *worker, uses uint64) {
	select {
	case pl.slots <- struct{}{}:
	default:
		return // the pool is busy: the arena is in use or about to be
	}
	defer func() { <-pl.slots }()
	pl.mu.Lock()
	idx := -1
	for i, v := range pl.idle {
		if v == w {
			idx = i
		}
	}
	if idx < 0 || w.uses != uses || pl.closed {
		pl.mu.Unlock()
		return
	}
	pl.idle = append(pl.idle[:idx], pl.idle[idx+1:]...)
	pl.mu.Unlock()
	alive := w.dropRemote() == nil
	pl.mu.Lock()
	if alive && !pl.closed {
		pl.idle = append(pl.idle, w)
	} else {
		delete(pl.all, w)
		defer w.kill()
	}
	pl.mu.Unlock()
}

// dropRemote asks the worker to unmap its arenas (held ones included: it
// maps them again if they come back), then unmaps the free ones here.
func (w *worker) dropRemote() error {
	hdr, _ := encodeHeader(&workerReq{Op: "drop"})
	if err := unix.Sendmsg(w.fd, hdr, nil, nil, unix.MSG_NOSIGNAL); err != nil {
		return err
	}
	var resp workerResp
	if err := w.await(context.Background(), workerStartTimeout, "drop", &resp); err != nil {
		return err
	}
	w.amu.Lock()
	w.dropFree()
	w.forget = nil // the worker mapped none of them any more
	w.amu.Unlock()
	return nil
}

// arenaFor returns an arena of at least size bytes for the call in
// progress: the smallest free one that fits, else a new one (the free
// ones, all too small, are unmapped: the new one serves what they did).
func (w *worker) arenaFor(size int64) (*arena, error) {
	w.amu.Lock()
	defer w.amu.Unlock()
	if a, ok := takeSmallest(&w.free, size, func(a *arena) int { return len(a.mem) }); ok {
		a.busy = true
		return a, nil
	}
	w.dropFree()
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	fd, err := unix.MemfdCreate("tenzro-plugin-arena", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, &WorkerError{Op: "arena", Reason: fmt.Sprintf("memfd: %v", err), Err: err}
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		_ = unix.Close(fd)
		return nil, &WorkerError{Op: "arena", Reason: fmt.Sprintf("memfd of %d bytes: %v", size, err), Err: err}
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Close(fd)
		return nil, &WorkerError{Op: "arena", Reason: fmt.Sprintf("mmap %d bytes: %v", size, err), Err: err}
	}
	w.nextID++
	w.created++
	return &arena{id: w.nextID, fd: fd, mem: mem, busy: true}, nil
}

// callDone ends the call's use of a: back to the free arenas unless its
// consume kept it.
func (w *worker) callDone(a *arena) {
	w.amu.Lock()
	defer w.amu.Unlock()
	a.busy = false
	if !a.held {
		w.putFree(a)
	}
}

// keep holds a past the call: it is not reused until the returned
// function (which must be called exactly once; later calls do nothing)
// gives it back. The bytes stay mapped here even if the worker dies.
func (w *worker) keep(a *arena) (release func()) {
	w.amu.Lock()
	a.held = true
	w.heldSize += int64(len(a.mem))
	w.amu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.amu.Lock()
			a.held = false
			w.heldSize -= int64(len(a.mem))
			if !a.busy {
				w.putFree(a)
			}
			w.amu.Unlock()
			w.pl.mu.Lock()
			w.pl.trimLater(w)
			w.pl.mu.Unlock()
		})
	}
}

// putFree makes a free, or unmaps it when the worker is gone or has
// arenaFree free ones already. Called with amu held.
func (w *worker) putFree(a *arena) {
	if w.gone || len(w.free) >= arenaFree {
		w.unmapArena(a)
		return
	}
	w.free = append(w.free, a)
}

// unmapArena unmaps and closes a here; the worker is told to unmap its
// mapping with the next request. Called with amu held.
func (w *worker) unmapArena(a *arena) {
	_ = unix.Munmap(a.mem)
	_ = unix.Close(a.fd)
	a.mem = nil
	if !w.gone {
		w.forget = append(w.forget, a.id)
	}
}

// dropFree unmaps the free arenas (held and busy ones stay). Called with
// amu held.
func (w *worker) dropFree() {
	for _, a := range w.free {
		w.unmapArena(a)
	}
	w.free = nil
}

// freeBytes is the size of the free arenas. Called with amu held.
func (w *worker) freeBytes() int64 {
	var n int64
	for _, a := range w.free {
		n += int64(len(a.mem))
	}
	return n
}

// takeSmallest removes from *free and returns the smallest of its
// elements of at least size bytes (length), if any.
func takeSmallest[T any](free *[]T, size int64, length func(T) int) (T, bool) {
	best := -1
	for i, x := range *free {
		if int64(length(x)) >= size && (best < 0 || length(x) < length((*free)[best])) {
			best = i
		}
	}
	if best < 0 {
		var zero T
		return zero, false
	}
	x := (*free)[best]
	*free = append((*free)[:best], (*free)[best+1:]...)
	return x, true
}

func newPool(cmd []string, size int, wc workerConfig, log *slog.Logger) (*pool, error) {
	if len(cmd) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, &WorkerError{Op: "start", Reason: fmt.Sprintf("command: %v", err), Err: err}
		}
		cmd = []string{exe, "plugin-worker"}
	}
	env, err := json.Marshal(wc)
	if err != nil {
		return nil, err
	}
	return &pool{cmd: cmd, env: string(env), log: log, slots: make(chan struct{}, size), all: map[*worker]bool{}}, nil
}

// start launches one worker and waits until its engine is ready.
func (pl *pool) start(ctx context.Context) (*worker, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &WorkerError{Op: "start", Reason: fmt.Sprintf("socketpair: %v", err)}
	}
	child := os.NewFile(uintptr(fds[1]), "plugin-worker-socket")
	cmd := exec.Command(pl.cmd[0], pl.cmd[1:]...)
	cmd.ExtraFiles = []*os.File{child} // descriptor 3 (workerFD)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+pl.env)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = child.Close()
	if err != nil {
		_ = unix.Close(fds[0])
		return nil, &WorkerError{Op: "start", Reason: err.Error()}
	}
	w := &worker{cmd: cmd, fd: fds[0], exited: make(chan struct{}), has: map[wire.Hash]bool{}, pl: pl}
	go func() { _ = cmd.Wait(); close(w.exited) }()
	var ready workerResp
	if err := w.await(ctx, workerStartTimeout, "start", &ready); err != nil {
		return nil, err
	}
	if ready.Err != "" {
		w.kill()
		return nil, &WorkerError{Op: "start", Reason: ready.Err}
	}
	pl.mu.Lock()
	pl.all[w] = true
	pl.mu.Unlock()
	pl.log.Debug("plugin worker started", "pid", cmd.Process.Pid)
	return w, nil
}

// kill ends the worker process, waits for it and closes its socket (once).
func (w *worker) kill() {
	w.once.Do(func() {
		_ = w.cmd.Process.Kill()
		<-w.exited
		_ = unix.Close(w.fd)
		w.amu.Lock()
		w.gone = true
		w.dropFree()
		w.forget = nil
		w.amu.Unlock()
	})
}

// await receives one response within limit; past it, or when ctx ends, the
// worker is killed. Any failure leaves the worker dead.
func (w *worker) await(ctx context.Context, limit time.Duration, op string, resp *workerResp) error {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		buf := make([]byte, maxWorkerHeader)
		n, _, _, _, err := unix.Recvmsg(w.fd, buf, nil, 0)
		if err == nil && n == 0 {
			err = errors.New("the worker exited")
		}
		done <- result{buf[:max(n, 0)], err}
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	var r result
	select {
	case r = <-done:
	case <-t.C:
		w.kill()
		return &WorkerError{Op: op, Reason: fmt.Sprintf("killed at the wall-clock backstop of %v", limit)}
	case <-ctx.Done():
		w.kill()
		return &WorkerError{Op: op, Reason: ctx.Err().Error(), Err: ctx.Err()}
	}
	if r.err != nil {
		w.kill()
		reason := r.err.Error()
		if st := w.cmd.ProcessState; st != nil {
			reason = fmt.Sprintf("%s (%s)", reason, st)
		}
		return &WorkerError{Op: op, Reason: reason}
	}
	if err := json.Unmarshal(r.b, resp); err != nil {
		w.kill()
		return &WorkerError{Op: op, Reason: fmt.Sprintf("bad response: %v", err)}
	}
	return nil
}

func (pl *pool) acquire(ctx context.Context) (*worker, error) {
	select {
	case pl.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, &WorkerError{Op: "acquire", Reason: "waiting for a worker: " + ctx.Err().Error(), Err: ctx.Err()}
	}
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		<-pl.slots
		return nil, errors.New("plugins: engine closed")
	}
	if n := len(pl.idle); n > 0 {
		w := pl.idle[n-1]
		pl.idle = pl.idle[:n-1]
		pl.mu.Unlock()
		return w, nil
	}
	pl.mu.Unlock()
	w, err := pl.start(ctx)
	if err != nil {
		<-pl.slots
		return nil, err
	}
	return w, nil
}

// release returns a live worker to the pool, or forgets a dead one.
func (pl *pool) release(w *worker, alive bool) {
	pl.mu.Lock()
	if alive && !pl.closed {
		pl.idle = append(pl.idle, w)
		w.uses++
		pl.trimLater(w)
	} else {
		delete(pl.all, w)
		defer w.kill()
	}
	pl.mu.Unlock()
	<-pl.slots
}

// trimLater gives w's free arenas back after arenaIdleTrim unless it
// serves a call meanwhile (trimArena), when they pass arenaKeepBytes.
// Called with pl.mu held.
func (pl *pool) trimLater(w *worker) {
	w.amu.Lock()
	trim := !w.gone && w.freeBytes() > arenaKeepBytes
	w.amu.Unlock()
	if trim {
		uses := w.uses
		time.AfterFunc(arenaIdleTrim, func() { pl.trimArena(w, uses) })
	}
}

func (pl *pool) close() {
	pl.mu.Lock()
	pl.closed = true
	idle := pl.idle
	pl.idle = nil
	for _, w := range idle {
		delete(pl.all, w)
	}
	pl.mu.Unlock()
	for _, w := range idle {
		_ = unix.Shutdown(w.fd, unix.SHUT_RDWR) // the worker exits on EOF
		select {
		case <-w.exited:
		case <-time.After(10 * time.Second):
		}
		w.kill()
	}
}

// poolCall is one call's shape: the modules it needs, the bulk data to
// write and the room to reserve for outputs.
type poolCall struct {
	req    workerReq
	hashes []wire.Hash                     // modules the call runs
	module func(wire.Hash) ([]byte, error) // a module's published bytes
	inLen  int64
	fill   func(in []byte) error // writes the inputs
	wall   time.Duration
	// gap is room left between the inputs and the output room (OutOff =
	// InOff + inLen + gap), for consume to write into.
	gap int64
	// consume, when set, reads the outputs in place from the arena (the
	// whole mapping; the request's offsets say where) before the worker is
	// released, instead of the call returning a copy of the output room.
	// keep holds the arena past the call (worker.keep): the next call on
	// this worker uses another one until the returned release is called.
	consume func(resp *workerResp, arena []byte, keep func() (release func())) error
}

// call runs one call on a worker and returns its response and a copy of its
// output room. Modules the worker lacks are sent along (and once more if a
// worker answers that it evicted one).
func (pl *pool) call(ctx context.Context, pc *poolCall) (*workerResp, []byte, error) {
	w, err := pl.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	alive := false
	defer func() { pl.release(w, alive) }()
	for attempt := 0; ; attempt++ {
		var mods [][]byte
		for _, h := range pc.hashes {
			if !w.has[h] || pc.req.Op == "publish" || attempt > 0 {
				mod, err := pc.module(h)
				if err != nil {
					alive = true
					return nil, nil, err
				}
				mods = append(mods, mod)
			}
		}
		resp, out, err := w.roundtrip(ctx, pc, mods)
		if err != nil {
			alive = !IsWorkerError(err) && ctx.Err() == nil
			return nil, nil, err
		}
		alive = true
		if resp.NeedModule && attempt == 0 {
			for _, h := range pc.hashes {
				delete(w.has, h)
			}
			continue
		}
		if resp.Err == "" {
			for _, h := range pc.hashes {
				w.has[h] = true
			}
		}
		return resp, out, nil
	}
}

func (w *worker) roundtrip(ctx context.Context, pc *poolCall, mods [][]byte) (*workerResp, []byte, error) {
	req := pc.req
	req.Modules = nil
	var modLen int64
	for _, m := range mods {
		req.Modules = append(req.Modules, int64(len(m)))
		modLen += int64(len(m))
	}
	req.InOff = modLen
	req.OutOff = req.InOff + pc.inLen + pc.gap
	size := req.OutOff + req.OutLen
	var rights []byte
	var mem []byte
	var a *arena
	if size > 0 {
		var err error
		if a, err = w.arenaFor(size); err != nil {
			return nil, nil, err
		}
		defer w.callDone(a)
		mem = a.mem
		off := 0
		for _, m := range mods {
			off += copy(mem[off:], m)
		}
		if pc.fill != nil {
			if err := pc.fill(mem[req.InOff : req.InOff+pc.inLen]); err != nil {
				return nil, nil, err
			}
		}
		rights = unix.UnixRights(a.fd)
		req.Arena = a.id
	}
	w.amu.Lock()
	req.Forget, w.forget = w.forget, nil
	w.amu.Unlock()
	hdr, err := encodeHeader(&req)
	if err != nil {
		return nil, nil, &WorkerError{Op: req.Op, Reason: fmt.Sprintf("request: %v", err), Err: err}
	}
	if err := unix.Sendmsg(w.fd, hdr, rights, nil, unix.MSG_NOSIGNAL); err != nil {
		w.kill()
		return nil, nil, &WorkerError{Op: req.Op, Reason: fmt.Sprintf("send: %v", err)}
	}
	resp := &workerResp{}
	if err := w.await(ctx, pc.wall, req.Op, resp); err != nil {
		return nil, nil, err
	}
	var out []byte
	if resp.Err == "" && resp.Failure == nil && req.OutLen > 0 {
		if pc.consume != nil {
			resp.outOff = req.OutOff
			return resp, nil, pc.consume(resp, mem, func() func() { return w.keep(a) })
		}
		out = append([]byte(nil), mem[req.OutOff:req.OutOff+req.OutLen]...)
	}
	return resp, out, nil
}
