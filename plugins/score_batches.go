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
// submission.
func PickScoreWindows(d BatchDraw, n int, shards []int, shardCount, count int) (own, control []int, err error) {
	return syncer.PickScoreWindows(d, n, shards, shardCount, count)
}
