//go:build linux

package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tenzro/train/syncer"
)

// ServeWorkerIfChild turns this process into a plugin worker when the node
// started it as one (WorkerEnv is set), and exits when the node closes the
// connection; otherwise it returns at once. Call it first thing in main,
// and in TestMain of a test binary that starts a worker pool.
func ServeWorkerIfChild() {
	raw, ok := os.LookupEnv(WorkerEnv)
	if !ok {
		return
	}
	if err := serveWorker(context.Background(), raw, workerFD); err != nil {
		fmt.Fprintln(os.Stderr, "tenzro plugin worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// setAddressSpace sets this process's soft RLIMIT_AS (the hard limit is
// left alone, so later calls may raise it again for a larger memfd).
func setAddressSpace(limit uint64) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &rl); err != nil {
		return err
	}
	if rl.Max != unix.RLIM_INFINITY && limit > rl.Max {
		limit = rl.Max
	}
	rl.Cur = limit
	return unix.Setrlimit(unix.RLIMIT_AS, &rl)
}

func serveWorker(ctx context.Context, raw string, fd int) error {
	var wc workerConfig
	if err := json.Unmarshal([]byte(raw), &wc); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if wc.AddressSpace > 0 {
		if err := setAddressSpace(wc.AddressSpace); err != nil {
			return fmt.Errorf("RLIMIT_AS: %w", err)
		}
	}
	e, err := NewEngine(ctx, Config{
		MemoryPages: wc.MemoryPages, Fuel: wc.Fuel, NoFuel: wc.NoFuel, Interpreter: wc.Interpreter,
		MaxModuleBytes: wc.MaxModuleBytes, CacheDir: wc.CacheDir, CacheBytes: wc.CacheBytes,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		WallClock:   math.MaxInt64, // the node kills this process at its backstop
		backstopOff: true,
	})
	ready := workerResp{}
	if err != nil {
		ready.Err = err.Error()
	}
	if err := sendResp(fd, &ready); err != nil || ready.Err != "" {
		return errors.Join(err, errors.New(ready.Err))
	}
	e.chunkOverride = wc.ChunkOverride
	e.stageFrom = wc.StageFrom
	var ar workerArena
	defer ar.drop()
	// The address space limit grows with what this worker maps for calls:
	// the arena and the staging memory (stage_linux.go).
	limit := func() {
		if wc.AddressSpace > 0 {
			e.stages.mu.Lock()
			total := e.stages.total
			e.stages.mu.Unlock()
			_ = setAddressSpace(wc.AddressSpace + uint64(ar.size) + uint64(total))
		}
	}
	e.stages.reserve = func(total int64) {
		if wc.AddressSpace > 0 {
			_ = setAddressSpace(wc.AddressSpace + uint64(ar.size) + uint64(total))
		}
	}
	buf := make([]byte, maxWorkerHeader)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if n == 0 {
			return nil // the node closed the connection
		}
		memfd := -1
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) > 0 {
				if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) > 0 {
					memfd = fds[0]
					for _, extra := range fds[1:] {
						_ = unix.Close(extra)
					}
				}
			}
		}
		var req workerReq
		resp := &workerResp{}
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			resp.Err = fmt.Sprintf("bad request: %v", err)
		} else if req.Op == "drop" {
			ar.drop() // the node trims an idle worker's arenas
			e.stages.trim()
		} else {
			var m *workerMap
			if m, err = ar.mapFor(&req, memfd, wc, limit); err != nil {
				resp.Err = err.Error()
			} else {
				var mem []byte
				if m != nil {
					mem = m.mem
				}
				resp = serveCall(ctx, e, &req, mem, m.stage())
			}
			memfd = -1 // mapFor keeps or closes it
		}
		if memfd >= 0 {
			_ = unix.Close(memfd)
		}
		err = sendResp(fd, resp)
		if resp.after != nil {
			resp.after() // before the next request: its mappings count in RLIMIT_AS
		}
		if err != nil {
			return err
		}
	}
}

func sendResp(fd int, r *workerResp) error {
	b, err := encodeHeader(r)
	if err != nil {
		b, _ = encodeHeader(&workerResp{Err: err.Error()})
	}
	return unix.Sendmsg(fd, b, nil, nil, unix.MSG_NOSIGNAL)
}

// workerArena is the worker's mappings of the node's arenas for it, by
// number, with their descriptors (a finalize maps the arena's output room
// into guest memory): at most workerArenaMaps, the least recently used
// unmapped first, so that a node alternating between arenas (one held by
// its store, workerPool.keep) does not have them mapped and faulted in
// again at every call.
type workerArena struct {
	maps []*workerMap // least recently used first
	size int64        // bytes mapped, and of the mapping being made
}

type workerMap struct {
	id  uint64
	mem []byte
	fd  int
}

// workerArenaMaps bounds the arenas a worker keeps mapped: the node's
// free ones (arenaFree) and the call's.
const workerArenaMaps = arenaFree + 1

// mapFor returns the arena a request names, mapping it (and raising
// RLIMIT_AS by its size, through limit) when it is not mapped yet; the
// arenas the request says the node forgot are unmapped first. It takes
// memfd: kept with a new mapping, closed otherwise.
func (a *workerArena) mapFor(req *workerReq, memfd int, wc workerConfig, limit func()) (*workerMap, error) {
	for _, id := range req.Forget {
		a.unmap(id)
	}
	if memfd < 0 {
		return nil, nil
	}
	for i, m := range a.maps {
		if m.id == req.Arena {
			_ = unix.Close(memfd)
			a.maps = append(append(a.maps[:i:i], a.maps[i+1:]...), m)
			return m, nil
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(memfd, &st); err != nil {
		_ = unix.Close(memfd)
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if st.Size <= 0 {
		_ = unix.Close(memfd)
		return nil, nil
	}
	for len(a.maps) >= workerArenaMaps {
		a.unmap(a.maps[0].id)
	}
	a.size += st.Size
	limit()
	mem, err := unix.Mmap(memfd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		a.size -= st.Size
		_ = unix.Close(memfd)
		return nil, fmt.Errorf("mmap %d bytes: %w", st.Size, err)
	}
	m := &workerMap{id: req.Arena, mem: mem, fd: memfd}
	a.maps = append(a.maps, m)
	return m, nil
}

// stage is an arena as a stage (for output rooms); nil without one.
func (m *workerMap) stage() *stage {
	if m == nil {
		return nil
	}
	return &stage{fd: m.fd, mem: m.mem}
}

// unmap unmaps the arena id if it is mapped.
func (a *workerArena) unmap(id uint64) {
	for i, m := range a.maps {
		if m.id == id {
			_ = unix.Munmap(m.mem)
			_ = unix.Close(m.fd)
			a.size -= int64(len(m.mem))
			a.maps = append(a.maps[:i], a.maps[i+1:]...)
			return
		}
	}
}

// drop unmaps every arena.
func (a *workerArena) drop() {
	for len(a.maps) > 0 {
		a.unmap(a.maps[0].id)
	}
	a.size = 0
}

// serveCall runs one call on the worker's engine over the mapped arena.
func serveCall(ctx context.Context, e *Engine, req *workerReq, mem []byte, arena *stage) *workerResp {
	resp := &workerResp{}
	span := func(off, n int64) ([]byte, error) {
		if off < 0 || n < 0 || off+n > int64(len(mem)) {
			return nil, fmt.Errorf("range [%d, %d) outside the %d-byte memfd", off, off+n, len(mem))
		}
		return mem[off : off+n : off+n], nil
	}
	if req.Probe {
		ctx = WithProbeBudget(ctx)
	}
	var modOff int64
	for _, l := range req.Modules {
		mod, err := span(modOff, l)
		if err != nil {
			resp.Err = err.Error()
			return resp
		}
		modOff += l
		info, err := e.Publish(WithProbeBudget(ctx), append([]byte(nil), mod...))
		if err != nil {
			resp.Err = err.Error()
			return resp
		}
		resp.Info = info
	}
	es := int64(req.Dtype.Size())
	n := int64(req.N)
	var err error
	switch req.Op {
	case "publish":
		if resp.Info == nil {
			err = errors.New("publish without a module")
		}
	case "aggregate":
		in := syncer.AggregateInput{Rule: req.Rule, Dtype: req.Dtype, N: req.N, Inputs: make([][]byte, req.K)}
		for i := range in.Inputs {
			if in.Inputs[i], err = span(req.InOff+int64(i)*n*es, n*es); err != nil {
				break
			}
		}
		if err == nil {
			var out syncer.AggregateOutput
			if dst, serr := span(req.OutOff, req.OutLen); serr == nil {
				ctx = withOutput(ctx, dst) // the aggregate lands in the arena
			}
			out, err = e.Aggregate(ctx, in)
			resp.Fuel, resp.Selected = out.Fuel, out.Selected
			if out.Scores != nil {
				resp.HasScores = true
				for _, s := range out.Scores {
					resp.ScoreBits = append(resp.ScoreBits, math.Float64bits(s))
				}
			}
			if err == nil {
				err = putOutput(span, req, out.Aggregate)
			}
		}
	case "verify":
		in := syncer.VerifyInput{Verifier: req.Rule, Dtype: req.Dtype, N: req.N}
		if in.Input, err = span(req.InOff, n*es); err == nil && req.K > 0 {
			in.Round = make([][]byte, req.K)
			for i := range in.Round {
				if in.Round[i], err = span(req.InOff+int64(i+1)*n*es, n*es); err != nil {
					break
				}
			}
		}
		if err == nil {
			var out syncer.VerifyOutput
			out, err = e.Verify(ctx, in)
			resp.Accept, resp.Code, resp.Reason, resp.Fuel = out.Accept, out.Code, out.Reason, out.Fuel
		}
	case "outer":
		in := syncer.OuterStepInput{Rule: req.Rule, Dtype: req.Dtype, N: req.N, LR: req.LR, Beta: req.Beta, Nesterov: req.Nesterov}
		in.Weights, err = span(req.InOff, n*es)
		if err == nil {
			in.Aggregate, err = span(req.InOff+n*es, n*4)
		}
		if err == nil && req.Momentum {
			in.Momentum, err = span(req.InOff+n*es+n*4, n*4)
		}
		if err == nil {
			var out syncer.OuterStepOutput
			out, err = e.OuterStep(ctx, in)
			resp.Fuel = out.Fuel
			if err == nil {
				err = putOutput(span, req, out.Weights, out.Momentum)
			}
		}
	case "finalize":
		resp.Fin, resp.Fuel, resp.after, err = serveFinalize(ctx, e, req, mem, arena)
	case "decode":
		in := syncer.DecodeInput{Codec: req.Rule, Dtype: req.Dtype, N: req.N}
		off := req.InOff
		for _, t := range req.Tensors {
			var data []byte
			if data, err = span(off, t.Len); err != nil {
				break
			}
			off += t.Len
			in.Tensors = append(in.Tensors, syncer.DecodeTensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape, Data: data})
		}
		if err == nil {
			var out syncer.DecodeOutput
			out, err = e.Decode(ctx, in)
			resp.Fuel = out.Fuel
			if err == nil {
				err = putOutput(span, req, out.Values)
			}
		}
	case "score":
		var out ScoreOutput
		out, err = serveScore(ctx, e, req, span)
		resp.Fuel = out.Fuel
		for i := range out.Before {
			resp.ScoreBits = append(resp.ScoreBits, math.Float64bits(out.Before[i]), math.Float64bits(out.After[i]))
		}
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	var rf *syncer.RuleFailure
	switch {
	case err == nil:
	case req.Op == "finalize" && !errors.Is(err, ErrUnknownPlugin):
		// a finalize's recordable failures are in resp.Fin: any error
		// (a round verifier's failure included) is local
		resp.Err = err.Error()
	case errors.As(err, &rf):
		resp.Failure = rf
	case errors.Is(err, ErrUnknownPlugin):
		resp.NeedModule = true
		resp.Err = err.Error()
	default:
		resp.Err = err.Error()
	}
	return resp
}

// putOutput writes the call's outputs, back to back, into its output room.
func putOutput(span func(off, n int64) ([]byte, error), req *workerReq, parts ...[]byte) error {
	var total int64
	for _, p := range parts {
		total += int64(len(p))
	}
	if total != req.OutLen {
		return fmt.Errorf("output of %d bytes, the node reserved %d", total, req.OutLen)
	}
	dst, err := span(req.OutOff, req.OutLen)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if len(p) > 0 && len(dst) > 0 && &p[0] == &dst[0] {
			dst = dst[len(p):] // already in place
			continue
		}
		dst = dst[copy(dst, p):]
	}
	return nil
}
