package syncer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/tenzro/train/wire"
)

// Window enumeration and the deterministic choice of the windows a
// submission is scored on (docs/protocol/scoring.md §3). Integer arithmetic
// only: any validator derives the same indices from the same chain
// randomness.

// ScoreBatchDomain separates the batch-selection hash from every other
// SHA-256 of the protocol.
const ScoreBatchDomain = "tenzro/train/score-batches/v1"

// Holdout of the trainer's data loader (data.make_windows, holdout=0.2): the
// first ⌊n·4/5⌋ points of a series of n points train. Python's
// int(n * (1.0 - 0.2)) equals n*4/5 rounded down for every n below 2^50
// (trainer/tests/test_score_reference.py checks a range).
const (
	holdoutKeepNum = 4
	holdoutKeepDen = 5
)

// WindowIndex enumerates a corpus's training windows in the trainer's order
// (data.make_windows): series after series, starts 0, stride, 2·stride, …
// while the whole window lies in the first ⌊n·4/5⌋ points. Window i belongs
// to shard i mod shard_count (data.shard_indices).
type WindowIndex struct {
	windowLen, stride int
	first             []int // first[s] = index of series s's first window; first[len] = Count
}

// NewWindowIndex indexes series of the given lengths for windows of
// windowLen = context_len + horizon points.
func NewWindowIndex(seriesLens []int, windowLen, stride int) (*WindowIndex, error) {
	if windowLen < 1 || windowLen > maxScoreWindowLen || stride < 1 {
		return nil, fmt.Errorf("window length %d, stride %d: want 1..%d and >= 1", windowLen, stride, maxScoreWindowLen)
	}
	w := &WindowIndex{windowLen: windowLen, stride: stride, first: make([]int, 0, len(seriesLens)+1)}
	total := 0
	for s, n := range seriesLens {
		if n < 0 || n > math.MaxInt32 {
			return nil, fmt.Errorf("series %d has %d points", s, n)
		}
		w.first = append(w.first, total)
		if cut := n * holdoutKeepNum / holdoutKeepDen; cut >= windowLen {
			total += (cut-windowLen)/stride + 1
		}
	}
	w.first = append(w.first, total)
	return w, nil
}

// Count is the number of training windows.
func (w *WindowIndex) Count() int { return w.first[len(w.first)-1] }

// Locate returns the series and start point of window i.
func (w *WindowIndex) Locate(i int) (series, start int, err error) {
	if i < 0 || i >= w.Count() {
		return 0, 0, fmt.Errorf("window %d outside 0..%d", i, w.Count()-1)
	}
	// the last series whose first window is <= i (series without windows
	// share their successor's first index)
	s, _ := slices.BinarySearch(w.first, i+1)
	s--
	return s, (i - w.first[s]) * w.stride, nil
}

// AppendWindows appends the raw values of the given windows to dst, as
// ScoreInput.Windows holds them (little-endian f32). series are the
// corpus's series in its order, rounded to f32.
func (w *WindowIndex) AppendWindows(dst []byte, series [][]float32, idx []int) ([]byte, error) {
	if len(series) != len(w.first)-1 {
		return nil, fmt.Errorf("%d series, the index has %d", len(series), len(w.first)-1)
	}
	for _, i := range idx {
		s, a, err := w.Locate(i)
		if err != nil {
			return nil, err
		}
		if a+w.windowLen > len(series[s]) {
			return nil, fmt.Errorf("series %d has %d points, window %d needs %d", s, len(series[s]), i, a+w.windowLen)
		}
		for _, v := range series[s][a : a+w.windowLen] {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	}
	return dst, nil
}

// BatchDraw names one scored submission and the chain randomness its
// batches come from (randomness that exists only after the fragment's grace
// window closes).
type BatchDraw struct {
	Randomness [32]byte
	TaskID     string
	Round      uint64
	Fragment   uint64
	Trainer    string
}

// Seed is SHA-256 over the domain-separated canonical encoding of the draw
// (wire.Canon): Str(domain) ‖ Bytes(randomness) ‖ Str(task) ‖ U64(round) ‖
// U64(fragment) ‖ Str(trainer DID).
func (d BatchDraw) Seed() wire.Hash {
	return wire.NewCanon(ScoreBatchDomain).Bytes(d.Randomness[:]).Str(d.TaskID).U64(d.Round).U64(d.Fragment).Str(d.Trainer).Sum()
}

// windowPool is the ascending list of the windows below n whose shard
// (index mod shardCount) is in set, addressed by position without
// materializing it: position p is window ⌊p/|set|⌋·shardCount + set[p mod |set|].
type windowPool struct {
	set        []int
	shardCount int
	size       int
}

func newWindowPool(set []int, shardCount, n int) windowPool {
	p := windowPool{set: set, shardCount: shardCount}
	for _, s := range set {
		if s < n {
			p.size += (n-s-1)/shardCount + 1
		}
	}
	return p
}

func (p windowPool) at(pos int) int {
	return pos/len(p.set)*p.shardCount + p.set[pos%len(p.set)]
}

// uniform returns a uniform integer in [0, m) from the seed, the pool tag
// and the draw number: the first 8 bytes (big-endian) of SHA-256(seed ‖
// u64 tag ‖ u64 k ‖ u64 attempt), rejected while ≥ the largest multiple of
// m below 2^64 (no modulo bias).
func uniform(seed wire.Hash, tag, k uint64, m uint64) uint64 {
	limit := math.MaxUint64 - (math.MaxUint64%m+1)%m // largest multiple of m, minus 1
	var buf [32 + 24]byte
	copy(buf[:], seed[:])
	binary.BigEndian.PutUint64(buf[32:], tag)
	binary.BigEndian.PutUint64(buf[40:], k)
	for attempt := uint64(0); ; attempt++ {
		binary.BigEndian.PutUint64(buf[48:], attempt)
		h := wire.SHA256(buf[:])
		if x := binary.BigEndian.Uint64(h[:8]); x <= limit {
			return x % m
		}
	}
}

// pick draws count distinct positions of the pool by a partial
// Fisher–Yates shuffle (draw k swaps position k with k + uniform(size−k))
// and returns their windows in draw order.
func (p windowPool) pick(seed wire.Hash, tag uint64, count int) []int {
	swapped := map[int]int{}
	get := func(pos int) int {
		if v, ok := swapped[pos]; ok {
			return v
		}
		return p.at(pos)
	}
	out := make([]int, count)
	for k := 0; k < count; k++ {
		j := k + int(uniform(seed, tag, uint64(k), uint64(p.size-k)))
		out[k] = get(j)
		swapped[j] = get(k)
	}
	return out
}

// Pool tags of the draw.
const (
	tagOwn     = 0
	tagControl = 1
)

// ErrFewWindows is returned when a pool holds fewer windows than a batch.
var ErrFewWindows = errors.New("syncer: too few windows to draw a batch")

// PickScoreWindows draws the two batches of one scored submission: count
// distinct windows of the trainer's own shards and count distinct windows
// of every other shard (the control), out of n training windows split into
// shardCount shards (window i in shard i mod shardCount). Shards must be
// distinct and in 0..shardCount−1, and leave at least one shard to the
// control.
func PickScoreWindows(d BatchDraw, n int, shards []int, shardCount, count int) (own, control []int, err error) {
	if shardCount < 2 || len(shards) == 0 || len(shards) >= shardCount {
		return nil, nil, fmt.Errorf("syncer: %d of %d shards: want at least one own shard and one other", len(shards), shardCount)
	}
	if count < 1 || count > maxScoreBatchSize || n < 0 {
		return nil, nil, fmt.Errorf("syncer: batch of %d windows out of %d, want 1..%d", count, n, maxScoreBatchSize)
	}
	in := make([]bool, shardCount)
	for _, s := range shards {
		if s < 0 || s >= shardCount || in[s] {
			return nil, nil, fmt.Errorf("syncer: shard %d repeated or outside 0..%d", s, shardCount-1)
		}
		in[s] = true
	}
	var ownSet, otherSet []int
	for s, mine := range in {
		if mine {
			ownSet = append(ownSet, s)
		} else {
			otherSet = append(otherSet, s)
		}
	}
	seed := d.Seed()
	po, pc := newWindowPool(ownSet, shardCount, n), newWindowPool(otherSet, shardCount, n)
	if po.size < count || pc.size < count {
		return nil, nil, fmt.Errorf("%w: own shards hold %d, the others %d, a batch is %d", ErrFewWindows, po.size, pc.size, count)
	}
	return po.pick(seed, tagOwn, count), pc.pick(seed, tagControl, count), nil
}

// Bounds of the draw (plugins.MaxScoreWindowLen and MaxScoreBatchSize, the
// evaluator call's limits).
const (
	maxScoreWindowLen = 1 << 20
	maxScoreBatchSize = 4096
)
