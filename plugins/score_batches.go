package plugins

import "github.com/tenzro/train/syncer"

// The batch draw of a scored submission lives with the node that commits
// scores (syncer/score_batches.go, docs/protocol/scoring.md §3); these are
// its names here, where the evaluator and its tests live.

// ScoreBatchDomain separates the batch-selection hash from every other
// SHA-256 of the protocol.
const ScoreBatchDomain = syncer.ScoreBatchDomain

// WindowIndex enumerates a corpus's training windows in the trainer's order.
type WindowIndex = syncer.WindowIndex

// BatchDraw names one scored submission and its chain randomness.
type BatchDraw = syncer.BatchDraw

// ErrFewWindows is returned when a pool holds fewer windows than a batch.
var ErrFewWindows = syncer.ErrFewWindows

// NewWindowIndex indexes series of the given lengths for windows of
// windowLen points.
func NewWindowIndex(seriesLens []int, windowLen, stride int) (*WindowIndex, error) {
	return syncer.NewWindowIndex(seriesLens, windowLen, stride)
}

// PickScoreWindows draws the own and control batches of one scored
// submission (contiguous shards with gap windows between them).
func PickScoreWindows(d BatchDraw, n, gap int, shards []int, shardCount, count int) (own, control []int, err error) {
	return syncer.PickScoreWindows(d, n, gap, shards, shardCount, count)
}

// ShardRange is the windows [lo, hi) of shard s (syncer.ShardRange).
func ShardRange(s, shardCount, n, gap int) (lo, hi int) {
	return syncer.ShardRange(s, shardCount, n, gap)
}

// ShardLayout says which windows each shard holds (syncer.ShardLayout).
type ShardLayout = syncer.ShardLayout

// PickScoreWindowsIn draws the own and control batches over any shard
// layout (syncer.PickScoreWindowsIn).
func PickScoreWindowsIn(d BatchDraw, layout ShardLayout, shards []int, count int) (own, control []int, err error) {
	return syncer.PickScoreWindowsIn(d, layout, shards, count)
}

// SeriesShardBlocks is the series-balanced split (syncer.SeriesShardBlocks).
func SeriesShardBlocks(counts []int, shardCount, gap int) ([][][2]int, error) {
	return syncer.SeriesShardBlocks(counts, shardCount, gap)
}
