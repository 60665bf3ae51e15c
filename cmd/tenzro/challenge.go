package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// replayFragment is tenzro receipt replay --task-id T --round R --fragment F:
// the node recomputes the commit and prints its FragmentResultHash.
func replayFragment(cmd *cobra.Command, task string, round, fragment uint64, local bool, engine string) error {
	p := &wire.ReplayFragmentParams{TaskID: task, Round: round, Fragment: fragment}
	var res *wire.ReplayFragmentResult
	var err error
	if local {
		res, err = replayFragmentLocally(cmd.Context(), nodeClient(cmd), p, engine)
	} else {
		res, err = nodeClient(cmd).ReplayFragment(cmd.Context(), p)
	}
	if err != nil {
		return err
	}
	if jsonOutput(cmd) {
		return emitJSON(cmd, res)
	}
	errw := cmd.ErrOrStderr()
	if res.Unavailable {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n", wire.Hash{})
		fmt.Fprintf(errw, "unavailable: %s (challenge with --result-hash %s to claim the inputs cannot be had)\n", res.Why, wire.Hash{})
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s\n", res.Result)
	verdict := "agrees with the commit"
	if !res.Agrees {
		verdict = "DIFFERS from the commit: challenge it before height " + fmt.Sprint(res.FinalAt)
	}
	fmt.Fprintf(errw, "round %d fragment %d of %s: result %s, committed %s: %s (re-executed in %d ms)\n",
		res.Round, res.Fragment, res.TaskID, res.Result, res.Committed, verdict, res.ElapsedMs)
	if res.Commit != nil {
		printInputs(errw, res.Commit)
	}
	return nil
}

// printInputs writes each input of a recomputed commit: its verdict, its
// score when the run scores it (own and control loss change, before →
// after), and whether it is paid (docs/protocol/scoring.md §8).
func printInputs(w io.Writer, fc *wire.FragmentCommit) {
	if fc.Scoring != nil {
		fmt.Fprintf(w, "scoring: %s (sha256:%s) at %d bps, batches of %d, seed %s\n", fc.Scoring.Evaluator, fc.Scoring.Hash, fc.Scoring.RateBps, fc.Scoring.Batch, fc.Scoring.Seed)
	} else {
		fmt.Fprintf(w, "scoring: off (the run has no evaluator, or the commit aggregated nothing)\n")
	}
	for _, in := range fc.Inputs {
		sel := ""
		if in.Selected {
			sel = ", selected"
		}
		switch sc := in.Score; {
		case in.CopyOf != "":
			fmt.Fprintf(w, "  %s: copy of %s — paid no\n", in.TrainerDID, in.CopyOf)
		case in.StaleOfRound != nil:
			fmt.Fprintf(w, "  %s: replay of its own round %d input (stale) — paid no\n", in.TrainerDID, *in.StaleOfRound)
		case in.Rejected != "":
			fmt.Fprintf(w, "  %s: rejected (%s) — paid no\n", in.TrainerDID, in.Rejected)
		case sc == nil:
			fmt.Fprintf(w, "  %s: kept%s, not scored — paid yes\n", in.TrainerDID, sel)
		case sc.Failed != "":
			fmt.Fprintf(w, "  %s: kept%s, evaluator failed (%s) — paid no, no penalty\n", in.TrainerDID, sel, sc.Failed)
		default:
			paid := "paid yes"
			if !sc.Pass {
				paid = "paid no, failed check (forfeit)"
			}
			fmt.Fprintf(w, "  %s: kept%s, own Δ %.6g (%.9g → %.9g), control Δ %.6g (%.9g → %.9g) — %s\n", in.TrainerDID, sel,
				sc.OwnDelta(), sc.OwnBefore.Float(), sc.OwnAfter.Float(), sc.CtlDelta(), sc.CtlBefore.Float(), sc.CtlAfter.Float(), paid)
		}
	}
}

func newChallengeCmd() *cobra.Command {
	var task, keyPath, result, bond string
	var round, fragment uint64
	c := &cobra.Command{
		Use:   "challenge --task-id T --round R --fragment F --result-hash H --bond B --key K",
		Short: "Dispute a fragment commit that is not final yet (escrows the run's challenge bond)",
		Long: `Challenge the commit of (round, fragment) of a running run while it is within its
challenge window (challenge_window_blocks after its block). The challenger
escrows the run's challenge_bond (--bond must equal it) and claims --result-hash
is the commit's correct FragmentResultHash: compute it with
'tenzro receipt replay --task-id T --round R --fragment F'. A zero hash claims the
commit's inputs are unavailable. The validators re-execute the commit and vote;
2/3 of the voting power decides (docs/protocol/challenges.md):
  syncer wrong: the bond back plus half the syncer's slash; the run rolls back;
  challenge wrong: the bond goes to the run's escrow;
  undecided within vote_window_blocks: the bond back, the commit stands.
'tenzro train get-challenges --task-id T' shows the outcome.`,
		Example: `  tenzro train challenge --task-id train-1 --round 3 --fragment 1 \
    --result-hash $(tenzro receipt replay --task-id train-1 --round 3 --fragment 1) \
    --bond 1000000000000000000 --key me.key`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			h, err := wire.ParseHash(result)
			if err != nil {
				return fmt.Errorf("--result-hash: %w", err)
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.ChallengeTx{TaskID: task, Round: round, Fragment: fragment, ChallengerDID: key.DID.String(), ResultHash: h, Bond: bond,
				Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			p.Signature = key.Sign(p.Preimage())
			res, err := nodeClient(cmd).Challenge(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "challenge %s of round %d fragment %d (committed %s) taken at height %d; votes until height %d\n",
				res.ID, res.Round, res.Fragment, res.Committed, res.Height, res.VoteDeadline)
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().Uint64Var(&round, "round", 0, "round of the disputed commit")
	c.Flags().Uint64Var(&fragment, "fragment", 0, "fragment of the disputed commit")
	c.Flags().StringVar(&result, "result-hash", "", "the FragmentResultHash claimed correct (64 hex; zero: inputs unavailable)")
	c.Flags().StringVar(&bond, "bond", "", "bond in attoTNZO: the run's challenge_bond")
	c.Flags().StringVar(&keyPath, "key", "", "challenger key file")
	for _, f := range []string{"task-id", "round", "fragment", "result-hash", "bond", "key"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

func newGetChallengesCmd() *cobra.Command {
	var task string
	c := &cobra.Command{
		Use:     "get-challenges --task-id T",
		Short:   "A run's challenges: disputed commit, votes, outcome, what moved",
		Example: `  tenzro train get-challenges --task-id train-1`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			chs, err := nodeClient(cmd).Challenges(cmd.Context(), task)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, chs)
			}
			w := cmd.OutOrStdout()
			if len(chs) == 0 {
				fmt.Fprintln(w, "no challenges")
			}
			for _, ch := range chs {
				fmt.Fprintf(w, "%s round %d fragment %d by %s: %s (%d votes; syncer %s slashed %s, challenger reward %s, to escrow %s)\n",
					ch.ID, ch.Round, ch.Fragment, ch.Challenger, ch.Outcome, len(ch.Votes), ch.Syncer, ch.SyncerSlashed, ch.ChallengerReward, ch.ToEscrow)
			}
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	_ = c.MarkFlagRequired("task-id")
	return c
}

// rpcFetcher fetches blobs by hash from a node (the caller checks the hash).
type rpcFetcher struct{ cl *client.Client }

func (f rpcFetcher) Fetch(ctx context.Context, h wire.Hash, _ uint64, _ string) ([]byte, error) {
	return f.cl.GetPayload(ctx, h)
}

// replayFragmentLocally re-executes the commit in this process: the
// committed state it reads comes from the node (getFragmentState), the
// payloads, weights and momentum by hash (each checked), and the
// computation is the syncer's own code (syncer.Node.Reexecute) with this
// build's engine — the node is trusted for chain state only.
func replayFragmentLocally(ctx context.Context, cl *client.Client, p *wire.ReplayFragmentParams, engine string) (*wire.ReplayFragmentResult, error) {
	st, err := cl.FragmentState(ctx, p)
	if err != nil {
		return nil, err
	}
	kv, err := store.OpenInMemory()
	if err != nil {
		return nil, err
	}
	defer kv.Close()
	if err := syncer.LoadState(ctx, kv, st.Entries); err != nil {
		return nil, err
	}
	var eng syncer.Engine
	switch engine {
	case "native":
		eng = syncer.NewNativeEngine()
	case "wasm":
		dir, err := os.MkdirTemp("", "tenzro-replay-cache-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		pe, err := plugins.NewEngine(ctx, plugins.Config{CacheDir: dir})
		if err != nil {
			return nil, err
		}
		defer pe.Close(context.WithoutCancel(ctx))
		eng = pe
	default:
		return nil, fmt.Errorf("--engine %q: want wasm or native", engine)
	}
	key, err := did.Generate(did.KindMachine, rand.Reader) // signs nothing: Reexecute sends no transaction
	if err != nil {
		return nil, err
	}
	scratch, err := store.OpenInMemory()
	if err != nil {
		return nil, err
	}
	defer scratch.Close()
	node, err := syncer.NewNode(ctx, syncer.Config{Chain: syncer.StaticChain{KV: kv, Block: machine.Block{Height: st.Height}}, Blobs: syncer.KVBlobs{KV: scratch},
		Local: scratch, Engine: eng, Signer: syncer.KeySigner{Key: key}, Fetcher: rpcFetcher{cl}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	re, err := node.Reexecute(ctx, p.TaskID, p.Round, int(p.Fragment))
	if err != nil {
		return nil, err
	}
	return &wire.ReplayFragmentResult{TaskID: p.TaskID, Round: p.Round, Fragment: p.Fragment, Committed: re.Committed, Result: re.Result,
		Unavailable: re.Unavailable, Why: re.Why, Agrees: re.Agrees(), Commit: re.Commit, ElapsedMs: re.Elapsed.Milliseconds(), FinalAt: re.FinalAt}, nil
}
