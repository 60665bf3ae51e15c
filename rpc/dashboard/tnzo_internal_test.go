package dashboard

import (
	"testing"

	"github.com/tenzro/train/wire"
)

func TestTNZO(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"0", "0 TNZO"}, {"1000000000000000000000", "1000 TNZO"}, {"345679012345678901234", "345.679 TNZO"},
		{"125000000000", "1.25e-07 TNZO"}, {"100000000000000", "0.0001 TNZO"}, {"x", "x"},
	} {
		if got := tnzo(c.in); got != c.want {
			t.Errorf("tnzo(%s) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestTimelineWindow(t *testing.T) {
	for _, c := range []struct{ committed, max, first, last int }{
		{0, 12, 0, 11}, {8, 8, 0, 7}, {7, 12, 0, 11}, {100, 200, 41, 100}, {199, 200, 140, 199},
	} {
		v := &wire.RunView{Status: wire.StatusRunning, Round: uint64(c.committed), Fragments: []wire.FragmentView{{Index: 0}}}
		tr := make([]wire.RoundCommit, c.committed)
		for i := range tr {
			tr[i] = wire.RoundCommit{Round: uint64(i), Fragments: []wire.FragmentCommit{{Fragment: 0, Status: wire.FragAggregated}}}
		}
		tl := newTimeline(v, tr, c.max)
		if got := tl.Rounds; got[0] != c.first || got[len(got)-1] != c.last {
			t.Errorf("committed %d of %d: rounds %d..%d, want %d..%d", c.committed, c.max, got[0], got[len(got)-1], c.first, c.last)
		}
		if c.committed > 0 && c.committed-1 >= c.first && tl.Rows[0].Cells[c.committed-1-c.first].Class != wire.FragAggregated {
			t.Errorf("committed %d: last committed round not shown as aggregated", c.committed)
		}
	}
}
