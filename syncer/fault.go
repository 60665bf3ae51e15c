package syncer

import "github.com/tenzro/train/wire"

// Fault makes this node's syncer misbehave on purpose, for the challenge
// tests only: tenzro-node sets it from flags that exist only in builds with
// the faultinject tag (cmd/tenzro-node/fault.go); production builds cannot
// set it. Other nodes with the same binary compute correctly (their
// re-execution never applies it).
type Fault struct {
	// WrongAggregate: the commit of (Round, Fragment) of any run carries a
	// wrong aggregate hash (and so a wrong result hash).
	WrongAggregate *FaultAt
	// Withhold: after committing (Round, Fragment), this node deletes the
	// fragment's input payloads it holds and never serves them.
	Withhold *FaultAt
}

// FaultAt names a round and fragment.
type FaultAt struct {
	Round    uint64
	Fragment int
}

func (a *FaultAt) is(round uint64, f int) bool {
	return a != nil && a.Round == round && a.Fragment == f
}

// applyFault alters a computed commit as the node's Fault says.
func (n *Node) applyFault(round uint64, c *computed) {
	f := n.cfg.Fault
	if f == nil || !f.WrongAggregate.is(round, c.fragment) || c.commit.Status != wire.FragAggregated {
		return
	}
	c.commit.AggregateHash[0] ^= 0xff
	n.log.Warn("FAULT INJECTED: committing a wrong aggregate hash", "round", round, "fragment", c.fragment)
}
