package plugins

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Plugin workers (DESIGN §13, RATIONALE "plugins: out-of-process workers").
//
// A worker is a child process (the node's own binary, re-executed) that runs
// an in-process Engine and serves one call at a time over a SOCK_SEQPACKET
// socket pair: each message is one JSON header; the call's bulk data (the
// module, the inputs, room for the outputs) travels in a memfd whose
// descriptor rides with the request (SCM_RIGHTS). Both sides mmap it, so
// inputs are written once by the node and read in place by the worker.

// WorkerEnv is the environment variable that makes a process a plugin
// worker: the node sets it (to the worker's JSON configuration) on the
// processes it starts. ServeWorkerIfChild, called first thing in main (and
// in TestMain), turns such a process into a worker.
const WorkerEnv = "TENZRO_PLUGIN_WORKER"

// workerFD is the descriptor number of the worker's end of the socket pair
// (the first of exec.Cmd.ExtraFiles).
const workerFD = 3

// maxWorkerHeader bounds one JSON header (Selected and Scores for K ≤ 256,
// reasons, a PluginInfo with its manifest).
const maxWorkerHeader = 1 << 20

// workerConfig is what a worker's Engine is configured with: exactly the
// fields that change results (the profile) plus the cache directory.
type workerConfig struct {
	MemoryPages    uint32 `json:"memory_pages"`
	Fuel           uint64 `json:"fuel"`
	NoFuel         bool   `json:"no_fuel,omitempty"`
	Interpreter    bool   `json:"interpreter,omitempty"`
	MaxModuleBytes int    `json:"max_module_bytes"`
	CacheDir       string `json:"cache_dir,omitempty"`
	CacheBytes     int64  `json:"cache_bytes"`
	// AddressSpace is the worker's RLIMIT_AS, without the call's memfd
	// (which is added per call).
	AddressSpace uint64 `json:"address_space"`
	// ChunkOverride forwards the tests' forced chunking.
	ChunkOverride int `json:"chunk_override,omitempty"`
	// StageFrom forwards the tests' staging threshold.
	StageFrom int64 `json:"stage_from,omitempty"`
}

// workerReq is one call. Bulk data lies in one of the worker's arenas,
// memfds both processes keep mapped between calls (so their pages are
// faulted in once, not per call): the modules the worker lacks (Modules:
// their lengths, back to back from offset 0, loaded before the call), then
// the call's inputs from InOff, then OutLen bytes of room for its outputs
// from OutOff (a finalize leaves room for the weights header between the
// two, which the node fills after the call).
type workerReq struct {
	Op string `json:"op"` // ready, publish, aggregate, verify, outer, decode, finalize, score, drop
	// Arena numbers the node's shared buffer for this call among the
	// worker's (the memfd rides with every request): the worker keeps a
	// few mappings by number, so alternating arenas are not mapped again.
	// Forget numbers the arenas the node has unmapped since its last
	// request: the worker unmaps them too.
	Arena    uint64         `json:"arena"`
	Forget   []uint64       `json:"forget,omitempty"`
	Probe    bool           `json:"probe,omitempty"`
	Modules  []int64        `json:"modules,omitempty"`
	Rule     syncer.RuleRef `json:"rule"`
	Dtype    machine.Dtype  `json:"dtype,omitempty"`
	N        int            `json:"n,omitempty"`
	K        int            `json:"k,omitempty"` // aggregate: inputs; verify: round inputs
	Momentum bool           `json:"momentum,omitempty"`
	LR       float32        `json:"lr,omitempty"`
	Beta     float32        `json:"beta,omitempty"`
	Nesterov bool           `json:"nesterov,omitempty"`
	// Tensors describes a decode call's payload tensors, whose bytes lie
	// back to back from InOff in this order.
	Tensors []workerTensor `json:"tensors,omitempty"`
	// Fin is a finalize call's plan (its Dtype, N, LR, Beta and Nesterov
	// are the fields above).
	Fin *finReq `json:"fin,omitempty"`
	// Score is a score call's plan (score_workers.go).
	Score  *scoreReq `json:"score,omitempty"`
	InOff  int64     `json:"in_off"`
	OutOff int64     `json:"out_off"`
	OutLen int64     `json:"out_len"`
}

// scoreReq is a score call's plan (ABI.md §4.2, §12): the model's tensors
// and fragment, where each fragment's start weights are (a blob file the
// worker opens read-only, or ranges of the call's input bytes), and where
// the gradient and the windows lie in the input bytes (offsets from InOff).
type scoreReq struct {
	Tensors   []workerTensor `json:"tensors"`
	FragFirst int            `json:"frag_first"`
	FragCount int            `json:"frag_count"`
	Weights   []workerValues `json:"weights"`
	GradOff   int64          `json:"grad_off"`
	GradLen   int64          `json:"grad_len"`
	WinOff    int64          `json:"win_off"`
	WinLen    int64          `json:"win_len"`
	Batches   int            `json:"batches"`
	BatchSize int            `json:"batch_size"`
	WindowLen int            `json:"window_len"`
	// Fuel is the call's own budget (ScoreInput.Fuel); 0: the worker
	// engine's per-call budget.
	Fuel uint64 `json:"fuel,omitempty"`
}

// workerTensor is one payload tensor of a decode call (and one model
// tensor of a score call, Len unused).
type workerTensor struct {
	Name  string  `json:"name"`
	Dtype string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Len   int64   `json:"len"`
}

// workerResp answers one call. Failure is a deterministic rule failure (it
// is recorded); Err is any other error (it is not).
type workerResp struct {
	// after, in the worker, runs once the response is sent: what the call
	// no longer needs but the node need not wait for (a finalize's input
	// mappings).
	after      func()
	Err        string              `json:"err,omitempty"`
	NeedModule bool                `json:"need_module,omitempty"`
	Failure    *syncer.RuleFailure `json:"failure,omitempty"`
	Info       *wire.PluginInfo    `json:"info,omitempty"`
	Fuel       uint64              `json:"fuel,omitempty"`
	Selected   []bool              `json:"selected,omitempty"`
	// ScoreBits holds the scores' IEEE-754 bits (JSON has no NaN): an
	// aggregation's per-input scores, or a score call's (before, after)
	// loss per batch.
	ScoreBits []uint64 `json:"score_bits,omitempty"`
	HasScores bool     `json:"has_scores,omitempty"`
	Accept    bool     `json:"accept,omitempty"`
	Code      uint32   `json:"code,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	Fin       *finResp `json:"fin,omitempty"`

	outOff int64 // the request's output room (node side)
}

// finReq is a finalize call (Engine.Finalize): the rules and where each
// input's values are.
type finReq struct {
	Rule      syncer.RuleRef   `json:"rule"`
	Outer     syncer.RuleRef   `json:"outer"`
	Verifiers []syncer.RuleRef `json:"verifiers,omitempty"`
	Quorum    int              `json:"quorum"`
	Inputs    []workerValues   `json:"inputs"`
	Weights   workerValues     `json:"weights"`
	Momentum  *workerValues    `json:"momentum,omitempty"`
	// The output room holds the new weights within its first WeightsRoom
	// bytes and the momentum within the rest, each placed by the worker
	// (finResp says where) at the alignment of the guest block that
	// writes it, so that the block can map it.
	WeightsRoom int64 `json:"weights_room"`
	// AggregateOnly: no outer step; the aggregate (N f32) is placed where
	// the new weights would be (syncer.FinalizeInput.AggregateOnly).
	AggregateOnly bool `json:"aggregate_only,omitempty"`
	// WeightsHeader: syncer.FinalizeInput.WeightsHeader (the new weights'
	// blob is it followed by the values; the sweep may hash both blobs).
	WeightsHeader []byte `json:"weights_header,omitempty"`
}

// workerValues locates values: ranges of the file at Path, which the worker
// opens itself (read-only), or, without a path, ranges of the call's input
// bytes in the arena (offsets from InOff).
type workerValues struct {
	Path   string             `json:"path,omitempty"`
	Ranges []syncer.ByteRange `json:"ranges"`
}

// finResp is a finalize's result (its fuel is workerResp.Fuel).
type finResp struct {
	Status        string    `json:"status"`
	Reason        string    `json:"reason,omitempty"`
	Rejected      []string  `json:"rejected"`
	Selected      []bool    `json:"selected"`
	Kept          int       `json:"kept"`
	AggregateHash wire.Hash `json:"aggregate_hash"`
	// WeightsOff and MomentumOff are the arena offsets of the new state.
	WeightsOff  int64 `json:"weights_off,omitempty"`
	MomentumOff int64 `json:"momentum_off,omitempty"`
	// StateHashed: the sweep hashed the new state (syncer.StateHashes):
	// WeightsHash of the request's WeightsHeader and the new weights,
	// MomentumHash of the new momentum.
	StateHashed  bool      `json:"state_hashed,omitempty"`
	WeightsHash  wire.Hash `json:"weights_hash,omitempty"`
	MomentumHash wire.Hash `json:"momentum_hash,omitempty"`
}

// WorkerError is a local failure of a plugin worker: it was killed at the
// wall-clock backstop, died (its memory limit, a crash) or could not be
// started. It is never a rule's result: the syncer does not record it, and
// abstains from finalizing until a later tick.
type WorkerError struct {
	Op     string
	Reason string
	Err    error // the cause, when there is one (a context's end)
}

func (e *WorkerError) Error() string {
	return fmt.Sprintf("plugins: worker %s: %s (a local failure, not recorded)", e.Op, e.Reason)
}

func (e *WorkerError) Unwrap() error { return e.Err }

// Is makes every WorkerError a syncer.ErrLocal.
func (e *WorkerError) Is(target error) bool { return target == syncer.ErrLocal }

// IsWorkerError reports whether err is a local worker failure.
func IsWorkerError(err error) bool {
	var we *WorkerError
	return errors.As(err, &we)
}

func encodeHeader(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) > maxWorkerHeader {
		return nil, fmt.Errorf("worker message of %d bytes exceeds %d", len(b), maxWorkerHeader)
	}
	return b, nil
}

// workerStartTimeout bounds a worker's start-up (compiling the built-ins);
// call backstops count only from a ready worker.
const workerStartTimeout = 2 * time.Minute

// Default pool and cache sizes.
const (
	// DefaultWorkers is the default number of worker processes.
	DefaultWorkers = 2
	// DefaultCacheBytes bounds the published-module bytes whose compiled
	// code a runtime keeps (LRU; built-ins are not counted and never
	// evicted): four modules of the 16 MiB maximum. Compiled code is a few
	// times its module's size.
	DefaultCacheBytes = 64 << 20
)
