package syncer

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Fault makes this node's syncer misbehave on purpose, for the challenge
// tests only: tenzro-node sets it from flags that exist only in builds with
// the faultinject tag (cmd/tenzro-node/fault_inject.go); production builds
// cannot set it. Other nodes with the same binary compute correctly (their
// re-execution never applies it).
//
// A fault applies only to a commit this node makes as ticket 0 of the
// run's succession (the first elected syncer): every node of a test network
// can run with the same flags, and the next syncer, which re-does the
// fragment after the rollback, is honest.
type Fault struct {
	// WrongAggregate: the commit of (Round, Fragment) of any run carries a
	// wrong aggregate hash (and so a wrong result hash).
	WrongAggregate *FaultAt
	// WrongScore: the commit of (Round, Fragment) of a scored run carries
	// its first scored input's pay verdict inverted (the wrong score a
	// syncer colluding with a free rider would commit).
	WrongScore *FaultAt
	// WrongScoredSet: the commit of (Round, Fragment) of a scored run
	// carries a scored set that is not the chain's draw: the first drawn
	// input's score is dropped (a syncer sparing a colluding free rider its
	// check), or, when the draw picked none, the first kept input gets a
	// failing score (a syncer penalizing an input the draw spared). The
	// chain refuses either commit.
	WrongScoredSet *FaultAt
	// WrongStale: the commit of (Round, Fragment), Round ≥ 1, names its
	// first kept input a replay of the same trainer's input of round
	// Round − 1 (an invented stale verdict, copies.md §6: a syncer robbing
	// an honest trainer of its pay and a slash of its stake). With fewer
	// than the spec's K inputs then kept, the commit is made no_quorum (the
	// weights kept), so the chain takes it and only re-execution can tell.
	WrongStale *FaultAt
	// Withhold: once this node computed its commit of (Round, Fragment),
	// before it sends it, the payloads the commit keeps are withheld:
	// WithholdingBlobs answers "not found" for them (to peers, getPayload
	// and this node alike).
	Withhold *FaultAt

	mu       sync.Mutex
	withheld map[wire.Hash]bool
}

// FaultAt names a round and fragment.
type FaultAt struct {
	Round    uint64
	Fragment int
}

func (a *FaultAt) is(round uint64, f int) bool {
	return a != nil && a.Round == round && a.Fragment == f
}

// Withheld says whether h is withheld.
func (f *Fault) Withheld(h wire.Hash) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.withheld[h]
}

func (f *Fault) withhold(hs ...wire.Hash) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.withheld == nil {
		f.withheld = map[wire.Hash]bool{}
	}
	for _, h := range hs {
		f.withheld[h] = true
	}
}

// inventStale is the WrongStale fault: the first kept input of c named a
// replay of round − 1.
func (n *Node) inventStale(round uint64, c *computed, quorum int) {
	kept := 0
	for j := range c.commit.Inputs {
		if c.commit.Inputs[j].Rejected == "" {
			kept++
		}
	}
	for j := range c.commit.Inputs {
		in := &c.commit.Inputs[j]
		if in.Rejected != "" {
			continue
		}
		q := round - 1
		in.StaleOfRound, in.Selected, in.Sketch, in.Score = &q, false, nil, nil
		in.Rejected = fmt.Sprintf("replay: its values are a copy of its own input of round %d (stale)", q)
		if kept-1 < quorum && c.commit.Status == wire.FragAggregated {
			c.commit.Status, c.commit.Reason = wire.FragNoQuorum, fmt.Sprintf("%d of K=%d inputs kept", kept-1, quorum)
			c.commit.WeightsAfter, c.commit.MomentumAfter, c.commit.AggregateHash = c.commit.WeightsBefore, wire.Hash{}, wire.Hash{}
			for k := range c.commit.Inputs {
				c.commit.Inputs[k].Selected, c.commit.Inputs[k].Score = false, nil
			}
		}
		n.log.Warn("FAULT INJECTED: committing an invented stale verdict", "round", round, "fragment", c.fragment, "trainer", in.TrainerDID, "stale_of_round", q)
		return
	}
}

// applyFault alters a computed commit as the node's Fault says (quorum:
// the run's K).
func (n *Node) applyFault(round uint64, c *computed, quorum int) {
	f := n.cfg.Fault
	if f != nil && c.commit.Ticket == 0 && f.WrongScore.is(round, c.fragment) {
		for j := range c.commit.Inputs {
			if sc := c.commit.Inputs[j].Score; sc != nil && sc.Failed == "" {
				wrong := *sc
				wrong.Pass = !wrong.Pass
				c.commit.Inputs[j].Score = &wrong
				n.log.Warn("FAULT INJECTED: committing a wrong score", "round", round, "fragment", c.fragment, "trainer", c.commit.Inputs[j].TrainerDID)
				break
			}
		}
	}
	if f != nil && c.commit.Ticket == 0 && c.commit.Scoring != nil && f.WrongScoredSet.is(round, c.fragment) {
		moved := -1
		for j := range c.commit.Inputs {
			if c.commit.Inputs[j].Score != nil {
				c.commit.Inputs[j].Score, moved = nil, j
				break
			}
		}
		if moved < 0 {
			for j := range c.commit.Inputs {
				if c.commit.Inputs[j].Rejected == "" {
					c.commit.Inputs[j].Score, moved = &wire.InputScore{OwnBefore: wire.F64Of(1), OwnAfter: wire.F64Of(1), CtlBefore: wire.F64Of(1), CtlAfter: wire.F64Of(1)}, j
					break
				}
			}
		}
		if moved >= 0 {
			n.log.Warn("FAULT INJECTED: committing a scored set that is not the draw", "round", round, "fragment", c.fragment, "trainer", c.commit.Inputs[moved].TrainerDID)
		}
	}
	if f != nil && c.commit.Ticket == 0 && round >= 1 && f.WrongStale.is(round, c.fragment) {
		n.inventStale(round, c, quorum)
	}
	if f == nil || c.commit.Ticket != 0 || !f.WrongAggregate.is(round, c.fragment) || c.commit.Status != wire.FragAggregated {
		return
	}
	c.commit.AggregateHash[0] ^= 0xff
	n.log.Warn("FAULT INJECTED: committing a wrong aggregate hash", "round", round, "fragment", c.fragment)
}

// withholdFault withholds a computed fragment's kept payloads.
func (n *Node) withholdFault(round uint64, c *computed) {
	f := n.cfg.Fault
	if f == nil || c.commit.Ticket != 0 || !f.Withhold.is(round, c.fragment) {
		return
	}
	var hs []wire.Hash
	for _, in := range c.commit.Inputs {
		if in.Rejected == "" {
			hs = append(hs, in.PayloadHash)
		}
	}
	f.withhold(hs...)
	n.log.Warn("FAULT INJECTED: withholding the committed fragment's payloads", "round", round, "fragment", c.fragment, "payloads", len(hs))
}

// WithholdingBlobs is a blob store that answers "not found" for what its
// Fault withholds (tests only: wired by faultinject builds).
type WithholdingBlobs struct {
	Blobs
	Fault *Fault
}

// Has implements Blobs.
func (b WithholdingBlobs) Has(ctx context.Context, h wire.Hash) (bool, error) {
	if b.Fault.Withheld(h) {
		return false, nil
	}
	return b.Blobs.Has(ctx, h)
}

// Get implements Blobs.
func (b WithholdingBlobs) Get(ctx context.Context, h wire.Hash) ([]byte, error) {
	if b.Fault.Withheld(h) {
		return nil, machine.ErrNotFound
	}
	return b.Blobs.Get(ctx, h)
}

// Open implements Blobs.
func (b WithholdingBlobs) Open(ctx context.Context, h wire.Hash) (io.ReadCloser, int64, error) {
	if b.Fault.Withheld(h) {
		return nil, 0, machine.ErrNotFound
	}
	return b.Blobs.Open(ctx, h)
}
