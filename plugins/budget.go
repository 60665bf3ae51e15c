package plugins

import (
	"context"
	"time"
)

// Probe budgets. Publishing a plugin calls its tenzro_abi_version, and
// posting a run calls its aggregator once on K zero inputs of 8 values (the
// quorum probe). Both are open to anyone, so they run under a small fixed
// budget instead of the run's: a well-formed plugin needs a few thousand
// fuel for either (a Go wasip1 plugin's runtime start-up a few million), and
// ProbeFuel is about 3 s at the measured 3.5e8 fuel/s. A probe is never
// recorded in a transcript, so these numbers are local policy, not protocol
// (RATIONALE "plugins: budgets").
const (
	// ProbeFuel bounds one probe call (and its _initialize).
	ProbeFuel = 1_000_000_000
	// ProbeWallClock is the wall-clock backstop of a probe call. It does
	// not depend on Config.WallClock, so a test with a tiny run backstop
	// still publishes reliably on a loaded machine.
	ProbeWallClock = 30 * time.Second
)

type probeKey struct{}

// WithProbeBudget marks ctx so that plugin calls made with it run under
// ProbeFuel and ProbeWallClock.
func WithProbeBudget(ctx context.Context) context.Context {
	return context.WithValue(ctx, probeKey{}, true)
}

func isProbe(ctx context.Context) bool { v, _ := ctx.Value(probeKey{}).(bool); return v }

type fuelKey struct{}

// withFuel marks ctx so that plugin calls made with it run under fuel
// instead of the engine's per-call budget, with a backstop scaled to match
// (wallFor). A score call of a run whose spec sets scoring.fuel is made so
// (ScoreInput.Fuel); the engine profile still records Config.Fuel, the
// budget of every other call.
func withFuel(ctx context.Context, fuel uint64) context.Context {
	return context.WithValue(ctx, fuelKey{}, fuel)
}

// callFuel is the budget withFuel set on ctx (0: none).
func callFuel(ctx context.Context) uint64 { v, _ := ctx.Value(fuelKey{}).(uint64); return v }

// fuelFor is the fuel budget of one call made with ctx.
func (e *Engine) fuelFor(ctx context.Context) uint64 {
	if isProbe(ctx) {
		return min(e.cfg.Fuel, ProbeFuel)
	}
	if f := callFuel(ctx); f != 0 {
		return f
	}
	return e.cfg.Fuel
}

// wallFor is the wall-clock backstop of one call made with ctx.
func (e *Engine) wallFor(ctx context.Context) time.Duration {
	if isProbe(ctx) {
		return ProbeWallClock
	}
	if f := callFuel(ctx); f != 0 {
		return ScaledWallClock(e.cfg.WallClock, e.cfg.Fuel, f)
	}
	return e.cfg.WallClock
}

// maxScaledWallClock caps ScaledWallClock (a week: far above any budget a
// spec may set, MaxScoringFuel at the default ratio is ≈ 33 h).
const maxScaledWallClock = 7 * 24 * time.Hour

// ScaledWallClock is the backstop of a call whose budget is fuel on an
// engine whose per-call budget is base with backstop wall: wall scaled by
// fuel/base, as DefaultWallClock relates to DefaultFuel, never below wall
// (a smaller budget keeps the engine's backstop) and at most a week.
func ScaledWallClock(wall time.Duration, base, fuel uint64) time.Duration {
	if base == 0 || fuel <= base {
		return wall
	}
	w := float64(wall) * (float64(fuel) / float64(base))
	if w >= float64(maxScaledWallClock) {
		return max(wall, maxScaledWallClock)
	}
	return max(wall, time.Duration(w))
}

type outputKey struct{}

// withOutput makes the aggregate of a call made with ctx land in buf (a
// worker passes its arena's output room, saving a copy).
func withOutput(ctx context.Context, buf []byte) context.Context {
	return context.WithValue(ctx, outputKey{}, buf)
}

// outputBuffer is the buffer an aggregate of n bytes is written to.
func outputBuffer(ctx context.Context, n int) []byte {
	if b, ok := ctx.Value(outputKey{}).([]byte); ok && len(b) == n {
		return b
	}
	return make([]byte, n)
}
