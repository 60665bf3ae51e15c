package syncer

import (
	"slices"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// An entrant of a run's succession keeps the run's initial weights file
// beside every fragment's current weights and momentum, so that any of
// them serves a replay even when the run was posted through a node few
// peers reach (issue 27); a node outside the succession keeps none.
func TestReplicaHashes(t *testing.T) {
	h := func(b byte) wire.Hash { var x wire.Hash; x[0] = b; return x }
	const me, other = "did:tenzro:machine:zMe", "did:tenzro:machine:zOther"
	r := &machine.Run{Succession: []string{other, me}, HasInit: true, InitFile: h(9),
		Fragments: []*machine.RunFragment{{WeightsHash: h(1)}, {WeightsHash: h(2), MomentumHash: h(3)}}}
	for _, c := range []struct {
		name string
		run  *machine.Run
		who  string
		want []wire.Hash
	}{
		{"entrant", r, me, []wire.Hash{h(9), h(1), h(2), h(3)}},
		{"not an entrant", r, "did:tenzro:machine:zNobody", nil},
		{"no initial weights yet", &machine.Run{Succession: []string{me}, Fragments: []*machine.RunFragment{{WeightsHash: h(1)}}}, me, []wire.Hash{h(1)}},
	} {
		if got := replicaHashes(c.run, c.who); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
