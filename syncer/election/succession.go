package election

import (
	"fmt"
	"sort"

	"github.com/tenzro/train/wire"
)

// Succession re-checks a stored election record (CheckRecord: every proof,
// output, ticket and the winner) and returns its entrants in ticket order,
// lowest first: index k is the k-th syncer of the run's succession (0 = the
// winner), the index a fragment commit records as its ticket.
func Succession(rec wire.Election) ([]wire.ElectionEntrant, error) {
	if err := CheckRecord(rec); err != nil {
		return nil, err
	}
	ts := make([]Ticket, len(rec.Candidates))
	byDID := make(map[string]int, len(rec.Candidates))
	for i, c := range rec.Candidates {
		stake, err := ParseStake(c.Stake)
		if err != nil { // CheckRecord parsed it already
			return nil, fmt.Errorf("%w %s: %v", ErrEntrant, c.DID, err)
		}
		ts[i] = Ticket{DID: c.DID, Beta: c.Output, Value: TicketValue(c.Output, stake)}
		byDID[c.DID] = i
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Less(ts[j]) })
	out := make([]wire.ElectionEntrant, len(ts))
	for k, t := range ts {
		out[k] = rec.Candidates[byDID[t.DID]]
	}
	return out, nil
}
