package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// TestScoreFuelBudget: a score call with ScoreInput.Fuel runs under that
// budget, not the engine's — in process and in a worker (the request
// carries it) — and the same call with a budget too small is the same
// recorded out-of-fuel failure on both. The "odd" case needs 3 108 759
// fuel (TestScoreGolden); the engines' own budget is 10⁶.
func TestScoreFuelBudget(t *testing.T) {
	ctx := context.Background()
	const engineFuel = 1_000_000
	engines := map[string]*Engine{"in process": newEngine(t, Config{Fuel: engineFuel})}
	if w := fuelWorker(t, Config{Fuel: engineFuel}); w != nil {
		engines["worker"] = w
	}
	c := loadScoreCase(t, "odd")
	const golden = "a7761f163b122a7a/3108759" // TestScoreGolden
	for name, e := range engines {
		for _, tc := range []struct {
			fuel   uint64
			budget uint64 // the out-of-fuel budget named; 0 = scores
		}{
			{0, engineFuel},                            // the engine's budget
			{2_000_000, 2_000_000},                     // the spec's, still too small
			{3_108_758, 3_108_758},                     // one short
			{3_108_759, 0},                             // exactly enough
			{100_000_000, 0},                           // the spec's, ample
			{wire.MinScoringFuel, wire.MinScoringFuel}, // the spec's floor
		} {
			t.Run(fmt.Sprintf("%s/%d", name, tc.fuel), func(t *testing.T) {
				in := c.in
				in.Fuel = tc.fuel
				out, err := e.Score(ctx, in)
				if tc.budget == 0 {
					if err != nil || scoreDigest(out) != golden {
						t.Fatalf("got %s %v, want %s", scoreDigest(out), err, golden)
					}
					return
				}
				var rf *syncer.RuleFailure
				if !errors.As(err, &rf) || rf.Code != CodeOutOfFuel || !strings.Contains(rf.Reason, fmt.Sprintf("(budget %d)", tc.budget)) {
					t.Fatalf("err = %v, want out of fuel under budget %d", err, tc.budget)
				}
				if out.Fuel != tc.budget { // an out-of-fuel call used all of it
					t.Errorf("fuel %d reported for an out-of-fuel call under %d", out.Fuel, tc.budget)
				}
			})
		}
	}
	// A larger engine budget does not override a smaller spec budget.
	in := c.in
	in.Fuel = 2_000_000
	var rf *syncer.RuleFailure
	if _, err := testEngine(t).Score(ctx, in); !errors.As(err, &rf) || rf.Code != CodeOutOfFuel {
		t.Fatalf("engine budget 2e10, call budget 2e6: %v, want out of fuel", err)
	}
	// The engine profile records the engine's budget, whatever a call's.
	if p := engines["in process"].Profile(); !strings.Contains(string(p.Details), fmt.Sprintf(`"fuel":%d,`, engineFuel)) {
		t.Errorf("profile %s, want the engine's fuel %d", p.Details, engineFuel)
	}
}

// TestScaledWallClock: a call's backstop scales with its budget as the
// engine's relates to its own, never below the engine's, capped.
func TestScaledWallClock(t *testing.T) {
	for _, tc := range []struct {
		wall       time.Duration
		base, fuel uint64
		want       time.Duration
	}{
		{DefaultWallClock, DefaultFuel, DefaultFuel, DefaultWallClock},
		{DefaultWallClock, DefaultFuel, 1_000_000_000, DefaultWallClock},              // smaller: the engine's
		{DefaultWallClock, DefaultFuel, 2 * DefaultFuel, 2 * DefaultWallClock},        // 10¹¹: 20 min
		{DefaultWallClock, DefaultFuel, 200_000_000_000_000 / 100, 400 * time.Minute}, // 2·10¹²: 40×
		{DefaultWallClock, DefaultFuel, 10_000_000_000_000, 2000 * time.Minute},       // MaxScoringFuel: 200×
		{time.Second, 1_000, 10_000_000_000_000, 7 * 24 * time.Hour},                  // capped
		{time.Duration(1<<63 - 1), DefaultFuel, 10_000_000_000_000, time.Duration(1<<63 - 1)},
		{time.Second, 0, 5, time.Second},
	} {
		if got := ScaledWallClock(tc.wall, tc.base, tc.fuel); got != tc.want {
			t.Errorf("ScaledWallClock(%v, %d, %d) = %v, want %v", tc.wall, tc.base, tc.fuel, got, tc.want)
		}
	}
	e := newEngine(t, Config{Fuel: 1_000_000, WallClock: time.Second})
	ctx := withFuel(context.Background(), 100_000_000)
	if f, w := e.fuelFor(ctx), e.wallFor(ctx); f != 100_000_000 || w != 100*time.Second {
		t.Errorf("call budget: fuel %d wall %v, want 1e8 and 100s", f, w)
	}
	if f, w := e.fuelFor(WithProbeBudget(ctx)), e.wallFor(WithProbeBudget(ctx)); f != 1_000_000 || w != ProbeWallClock {
		t.Errorf("a probe keeps its own budget: fuel %d wall %v", f, w)
	}
}
