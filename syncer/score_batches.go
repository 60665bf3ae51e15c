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
// while the whole window lies in the first ⌊n·4/5⌋ points. Shards are
// contiguous blocks of that enumeration with a gap between them
// (ShardRange, data.shard_indices).
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

// ShardGap is the number of windows left out at the start of every shard
// but the first (ShardRange): ⌈windowLen/stride⌉ − 1, so that no window of
// one shard shares a point with a window of another.
func (w *WindowIndex) ShardGap() int { return ShardGap(w.windowLen, w.stride) }

// ShardGap is ⌈windowLen/stride⌉ − 1 = ⌊(windowLen − 1)/stride⌋: two
// windows of one series whose indices differ by more than this share no
// point (data.shard_gap).
func ShardGap(windowLen, stride int) int {
	if windowLen < 1 || stride < 1 {
		return 0
	}
	return (windowLen - 1) / stride
}

// ShardRange is the windows [lo, hi) of shard s of shardCount over n
// windows (data.shard_range): the contiguous block from ⌊s·n/S⌋ to
// ⌊(s+1)·n/S⌋, less its first g windows when s > 0, where g is gap capped
// at ⌊n/S⌋ − 1 (so a small corpus keeps a window in every shard when
// n ≥ S, at the price of shards that touch). Windows in a gap belong to no
// shard: they are neither trained on nor drawn for a control batch.
func ShardRange(s, shardCount, n, gap int) (lo, hi int) {
	lo = int(int64(s) * int64(n) / int64(shardCount))
	hi = int(int64(s+1) * int64(n) / int64(shardCount))
	if c := n/shardCount - 1; gap > c {
		gap = max(c, 0)
	}
	if s > 0 {
		lo += gap
	}
	return lo, hi
}

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

// SeriesCounts returns the training windows of each series, in order.
func (w *WindowIndex) SeriesCounts() []int {
	out := make([]int, len(w.first)-1)
	for i := range out {
		out[i] = w.first[i+1] - w.first[i]
	}
	return out
}

// SeriesShardBlocks is the series-balanced split (spec "shard_split":
// "series"; data.series_shard_blocks; scoring.md §3): the blocks [lo, hi)
// of the enumeration each of shardCount shards holds, ascending. Series
// after series, with counts[i] training windows in series i: a series with
// ⌊counts[i]/S⌋ > gap is cut into S contiguous time blocks, block s to
// shard s (ShardRange over that series' windows, with the gap); a
// shorter series is dealt whole to the shard holding the fewest windows so
// far (ties: the lowest shard).
func SeriesShardBlocks(counts []int, shardCount, gap int) ([][][2]int, error) {
	if shardCount < 1 || gap < 0 {
		return nil, fmt.Errorf("syncer: %d shards, gap %d: want ≥ 1 and ≥ 0", shardCount, gap)
	}
	out := make([][][2]int, shardCount)
	size := make([]int, shardCount)
	base := 0
	for i, n := range counts {
		switch {
		case n < 0:
			return nil, fmt.Errorf("syncer: series %d has %d windows", i, n)
		case n/shardCount > gap:
			for s := range shardCount {
				lo, hi := ShardRange(s, shardCount, n, gap)
				out[s] = append(out[s], [2]int{base + lo, base + hi})
				size[s] += hi - lo
			}
		case n > 0:
			s := 0
			for k := 1; k < shardCount; k++ {
				if size[k] < size[s] {
					s = k
				}
			}
			out[s] = append(out[s], [2]int{base, base + n})
			size[s] += n
		}
		base += n
	}
	return out, nil
}

// ShardLayout says which windows each shard holds: Blocks(s) are shard s's
// blocks [lo, hi) of the enumeration, ascending and disjoint.
type ShardLayout struct {
	count  int
	blocks func(s int) [][2]int
}

// ContiguousShards is the default layout: shard s is ShardRange(s,
// shardCount, n, gap).
func ContiguousShards(n, gap, shardCount int) ShardLayout {
	return ShardLayout{count: shardCount, blocks: func(s int) [][2]int {
		lo, hi := ShardRange(s, shardCount, n, gap)
		return [][2]int{{lo, hi}}
	}}
}

// SeriesShards is the series-balanced layout (SeriesShardBlocks) over the
// index's series.
func (w *WindowIndex) SeriesShards(shardCount int) (ShardLayout, error) {
	b, err := SeriesShardBlocks(w.SeriesCounts(), shardCount, w.ShardGap())
	if err != nil {
		return ShardLayout{}, err
	}
	return ShardLayout{count: shardCount, blocks: func(s int) [][2]int { return b[s] }}, nil
}

// Layout returns the spec's shard layout over the index (shard_split).
func (w *WindowIndex) Layout(split string, shardCount int) (ShardLayout, error) {
	switch split {
	case "":
		return ContiguousShards(w.Count(), w.ShardGap(), shardCount), nil
	case wire.ShardSplitSeries:
		return w.SeriesShards(shardCount)
	}
	return ShardLayout{}, fmt.Errorf("syncer: shard_split %q unknown", split)
}

// Count is the number of shards.
func (l ShardLayout) Count() int { return l.count }

// Blocks returns shard s's blocks.
func (l ShardLayout) Blocks(s int) [][2]int { return l.blocks(s) }

// windowPool is the ascending list of the windows of the shards in set,
// addressed by position without materializing it: the shards' blocks one
// after another in ascending shard order (each shard's blocks ascending).
type windowPool struct {
	lo, end []int // block k is windows lo[k]..; positions below end[k] are in blocks 0..k
	size    int
}

func newWindowPool(set []int, layout ShardLayout) windowPool {
	var p windowPool
	for _, s := range set {
		for _, b := range layout.Blocks(s) {
			if b[1] > b[0] {
				p.size += b[1] - b[0]
				p.lo, p.end = append(p.lo, b[0]), append(p.end, p.size)
			}
		}
	}
	return p
}

func (p windowPool) at(pos int) int {
	k, _ := slices.BinarySearch(p.end, pos+1) // the first block whose end exceeds pos
	start := 0
	if k > 0 {
		start = p.end[k-1]
	}
	return p.lo[k] + pos - start
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
// shardCount contiguous shards with gap windows between them (ShardRange).
// Shards must be distinct and in 0..shardCount−1, and leave at least one
// shard to the control.
func PickScoreWindows(d BatchDraw, n, gap int, shards []int, shardCount, count int) (own, control []int, err error) {
	if n < 0 || gap < 0 {
		return nil, nil, fmt.Errorf("syncer: batch of %d windows out of %d (gap %d): want a corpus and a gap ≥ 0", count, n, gap)
	}
	return PickScoreWindowsIn(d, ContiguousShards(n, gap, shardCount), shards, count)
}

// PickScoreWindowsIn is PickScoreWindows over any shard layout (the own
// pool is the windows of the trainer's shards, the control pool those of
// every other shard).
func PickScoreWindowsIn(d BatchDraw, layout ShardLayout, shards []int, count int) (own, control []int, err error) {
	shardCount := layout.Count()
	if shardCount < 2 || len(shards) == 0 || len(shards) >= shardCount {
		return nil, nil, fmt.Errorf("syncer: %d of %d shards: want at least one own shard and one other", len(shards), shardCount)
	}
	if count < 1 || count > maxScoreBatchSize {
		return nil, nil, fmt.Errorf("syncer: batch of %d windows, want 1..%d", count, maxScoreBatchSize)
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
	po, pc := newWindowPool(ownSet, layout), newWindowPool(otherSet, layout)
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
