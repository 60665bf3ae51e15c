package e2e

// trainerValue is a deterministic pseudo-random value in [−1, 1) per
// trainer, round, fragment and element: every test trainer's gradient
// points its own way, so the copy rule (docs/protocol/copies.md) never
// takes two honest test trainers for copies of each other.
func trainerValue(i, round, f, j int) float32 {
	x := uint64(i)<<48 ^ uint64(round)<<32 ^ uint64(f)<<24 ^ uint64(j)
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float32(int64(x>>40)%2000-1000) / 1000
}
