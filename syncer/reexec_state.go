package syncer

import (
	"context"
	"errors"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// FragmentState answers tenzro_training_getFragmentState: the committed
// keys re-executing the commit of (task, round, fragment) reads — the run
// (its header and every key under machine.RunPrefix), the commit record,
// the run as the round started and the fragment's submission records of
// the round and of the StaleLookbackRounds before (the stale rule's). A
// client loads them into a StaticChain and runs Reexecute itself, fetching the bytes by hash (tenzro receipt replay
// --local); it trusts this node for chain state, not for the computation.
func (n *Node) FragmentState(ctx context.Context, p *wire.ReplayFragmentParams) (*wire.FragmentState, error) {
	if p.TaskID == "" {
		return nil, machine.Errf(machine.KindInvalid, "task_id is empty")
	}
	out := &wire.FragmentState{Entries: []wire.StateEntry{}}
	err := n.view(ctx, func(v machine.View) error {
		// The same reads as Reexecute, so a missing piece is the same refusal.
		job, err := loadReexecJob(ctx, v, p.TaskID, p.Round, int(p.Fragment))
		if err != nil {
			return err
		}
		out.Height = v.Block.Height
		get := func(ks machine.Keyspace, key []byte) error {
			val, err := v.KV.Get(ctx, ks, key)
			if err != nil {
				return err
			}
			out.Entries = append(out.Entries, wire.StateEntry{Keyspace: string(ks), Key: append(wire.HexBytes{}, key...), Value: val})
			return nil
		}
		if err := get(machine.KSRuns, machine.RunKey(p.TaskID)); err != nil {
			return err
		}
		// The run's parts (enrolments, fragments, records) under their own keys.
		if err := v.KV.Scan(ctx, machine.KSRuns, machine.RunPrefix(p.TaskID), func(k, val []byte) error {
			out.Entries = append(out.Entries, wire.StateEntry{Keyspace: string(machine.KSRuns), Key: append(wire.HexBytes{}, k...), Value: append([]byte(nil), val...)})
			return nil
		}); err != nil {
			return err
		}
		if err := get(machine.KSTranscript, machine.CommitRecKey(p.TaskID, p.Round, int(p.Fragment))); err != nil {
			return err
		}
		if err := get(machine.KSTranscript, machine.SnapKey(p.TaskID, p.Round)); err != nil {
			return err
		}
		// The fragment's records of this round and of the rounds the stale
		// rule compares with (copies.md §6).
		for d := uint64(0); d <= wire.StaleLookbackRounds && d <= p.Round; d++ {
			err := v.KV.Scan(ctx, machine.KSTranscript, machine.RecordPrefix(p.TaskID, p.Round-d, int(p.Fragment)), func(k, val []byte) error {
				out.Entries = append(out.Entries, wire.StateEntry{Keyspace: string(machine.KSTranscript), Key: append(wire.HexBytes{}, k...), Value: append([]byte(nil), val...)})
				return nil
			})
			if err != nil {
				return err
			}
		}
		// With the input sketch on, the commits of the older rounds, whose
		// sketches the stale rule compares with (copies.md §7).
		if job.snap.r.TaskSpec().SketchDim() > 0 {
			for q := uint64(0); q+wire.StaleLookbackRounds < p.Round; q++ {
				if err := get(machine.KSTranscript, machine.RoundCommitKey(p.TaskID, q)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return out, err
}

// LoadState writes state entries into kv (a client's scratch store).
func LoadState(ctx context.Context, kv machine.KV, entries []wire.StateEntry) error {
	b := &machine.Batch{}
	for _, e := range entries {
		ks := machine.Keyspace(e.Keyspace)
		known := false
		for _, k := range machine.AllKeyspaces {
			known = known || k == ks
		}
		if !known {
			return machine.Errf(machine.KindInvalid, "state entry in unknown key space %q", e.Keyspace)
		}
		b.Ops = append(b.Ops, machine.Op{KS: ks, Key: e.Key, Value: e.Value})
	}
	return kv.Commit(ctx, b)
}

// StaticChain is a Chain over a fixed state: it reads, never writes (a
// client re-executing a commit with a Node).
type StaticChain struct {
	KV    machine.KV
	Block machine.Block
}

var _ Chain = StaticChain{}

// View implements Chain.
func (c StaticChain) View(_ context.Context, fn func(machine.View) error) error {
	return fn(machine.View{KV: c.KV, Block: c.Block})
}

// Submit implements Chain: a static state takes no transactions.
func (c StaticChain) Submit(context.Context, []byte) (machine.Pending, error) {
	return nil, errors.New("a static chain state takes no transactions")
}

// Changed implements Chain: a static state never changes.
func (c StaticChain) Changed() <-chan struct{} { return make(chan struct{}) }
