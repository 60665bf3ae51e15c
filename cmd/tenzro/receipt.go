package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/wire"
)

// maxReceiptFile bounds a receipt read from disk: a version-2 receipt is at
// most syncer.MaxReceiptBytes; a little more is read so that an indented
// one, or a version-1 one, gets the parser's precise refusal.
const maxReceiptFile = 4 << 20

func newReceiptCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipt",
		Short: "Verify receipts (offline, in full, against the chain), prove inclusion, replay a run",
		Long: `verify mirrors the 0x1008 TRAINING_VERIFY precompile (valid or invalid, with the
reason): offline by default, --full with the transcript, --rpc against the run
root committed on chain, --proof against a block header's app hash. prove prints
a round's inclusion proof in the run root, or (--task-id) the run root's
inclusion proof in the chain's run log. replay re-executes the run.`,
		RunE: groupRunE,
	}
	cmd.AddCommand(newReceiptVerifyCmd(), newReceiptProveCmd(), newReceiptReplayCmd())
	return cmd
}

// receiptVerifyResult is what verify prints with --format json.
type receiptVerifyResult struct {
	wire.VerifyReceiptResult
	// Checks lists what was checked: compact, full, chain, proof.
	Checks []string `json:"checks"`
}

func newReceiptVerifyCmd() *cobra.Command {
	var path, root, transcriptPath string
	var full bool
	var pv proofVerifyFlags
	c := &cobra.Command{
		Use:   "verify --receipt FILE [--root HEX] [--full [--transcript FILE]] [--rpc URL] [--proof FILE ...]",
		Short: "Verify a receipt (exit 0 valid, 1 invalid, 2 usage)",
		Long: `Verify a version-2 training receipt. Always, offline and in milliseconds: the spec
hash, the syncers' election proofs (RFC 9381 VRF over the run's election alpha)
and their ticket order, that the signer is one of them, the signature, and the
settlement (each reward is ⌊(pool + slashes)·weight/Σweight⌋ and Σ reward +
sponsor refund = pool + slashes). --root checks against a claimed run root.

--full also checks the transcript (the round commits, by the receipt's
transcript_hash): from --transcript FILE ('tenzro train get-transcript --out'),
else fetched from the node at --rpc. It recomputes every round commit hash and
the run root, and checks that every fragment was committed by the syncer the
receipt names at that ticket and that every named syncer committed a fragment,
except a signer ranked above every committer (the chain lets the next tickets
sign when the committers do not).

--rpc URL (given explicitly) also asks that node (tenzro_training_verifyReceipt,
no root) whether the run root is the one committed on chain for the task and
the syncers are the chain's election entrants at their tickets.

--proof FILE (from 'tenzro receipt prove --task-id') checks that the run root is
in the chain's run log committed by a block's app hash: --app-hash HEX, or
--header FILE (a signed header of block height+1; light-verified offline when
--genesis FILE is given too), or --genesis FILE alone (the header in the proof
file, or fetched from the chain node (--rpc, or --comet-rpc), light-verified against the genesis validators).
Exit 0 valid, 1 invalid (the reason is printed), 2 usage.`,
		Example: `  tenzro receipt verify --receipt receipt.json
  tenzro receipt verify --receipt receipt.json --full --transcript transcript.json
  tenzro receipt verify --receipt receipt.json --rpc http://127.0.0.1:8545
  tenzro receipt verify --receipt receipt.json --proof proof.json --genesis genesis.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readInputFile("receipt", path, maxReceiptFile)
			if err != nil {
				return err
			}
			var rootBytes []byte
			if root != "" {
				if rootBytes, err = audit.ParseRoot(root); err != nil {
					return usagef("--root: %v", err)
				}
			}
			var transcript []byte
			if transcriptPath != "" {
				full = true
				if transcript, err = readInputFile("transcript", transcriptPath, audit.MaxTranscriptBytes); err != nil {
					return err
				}
			}
			if err := pv.validate(); err != nil {
				return err
			}
			res := receiptVerifyResult{VerifyReceiptResult: wire.VerifyReceiptResult{Valid: 1}, Checks: []string{"compact"}}
			fail := func(err error) { res.Valid, res.Reason = 0, err.Error() }
			if err := audit.CheckReceipt(b, rootBytes); err != nil {
				fail(err)
			}
			rc, _ := audit.ParseReceipt(b)
			if res.Valid == 1 && full {
				res.Checks = append(res.Checks, "full")
				if transcript == nil {
					transcript, err = fetchTranscript(cmd.Context(), nodeClient(cmd), rc)
				}
				if err == nil {
					err = audit.CheckReceiptFull(b, transcript)
				}
				if err != nil {
					fail(err)
				}
			}
			if res.Valid == 1 && cmd.Flags().Changed("rpc") {
				res.Checks = append(res.Checks, "chain")
				r, err := nodeClient(cmd).VerifyReceipt(cmd.Context(), wire.VerifyReceiptParams{Receipt: b})
				switch {
				case err != nil:
					fail(fmt.Errorf("against the chain: %w", err))
				case r.Valid != 1:
					fail(fmt.Errorf("against the chain: %s", r.Reason))
				default:
					res.Root, res.Height = r.Root, r.Height
				}
			}
			if res.Valid == 1 && pv.proof != "" {
				res.Checks = append(res.Checks, "proof")
				if err := pv.check(cmd, rc.RunRoot); err != nil {
					fail(err)
				}
			}
			if jsonOutput(cmd) {
				if err := emitJSON(cmd, res); err != nil {
					return err
				}
			} else if res.Valid == 1 {
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "valid: receipt of %s, run root %s, %d rounds, signed by %s (%s)\n", rc.TaskID, rc.RunRoot, rc.Rounds, rc.SyncerDID, strings.Join(res.Checks, ", "))
				switch {
				case res.Root != nil && res.Height > 0:
					fmt.Fprintf(w, "committed on chain at height %d: run root %s\n", res.Height, res.Root)
				case res.Root != nil:
					fmt.Fprintf(w, "committed in the node's state: run root %s\n", res.Root)
				}
			}
			if res.Valid != 1 {
				return &exitError{code: exitFailed, msg: "invalid: " + res.Reason}
			}
			return nil
		},
	}
	c.Flags().StringVar(&path, "receipt", "", "receipt JSON file (from 'tenzro train get-receipt')")
	c.Flags().StringVar(&root, "root", "", "claimed run root (64 hex digits; default: the receipt's own)")
	c.Flags().BoolVar(&full, "full", false, "also check the whole transcript (from --transcript, else fetched from --rpc)")
	c.Flags().StringVar(&transcriptPath, "transcript", "", "transcript blob ('tenzro train get-transcript --out'); implies --full")
	pv.register(c, true)
	_ = c.MarkFlagRequired("receipt")
	return c
}

// fetchTranscript gets rc's transcript blob from a node: its round commits
// (getTranscript) in canonical form when they hash to transcript_hash, else
// the blob by that hash (getPayload), checked.
func fetchTranscript(ctx context.Context, cl interface {
	GetTranscript(ctx context.Context, task string) ([]wire.RoundCommit, error)
	GetPayload(ctx context.Context, h wire.Hash) ([]byte, error)
}, rc *wire.Receipt) ([]byte, error) {
	rounds, err := cl.GetTranscript(ctx, rc.TaskID)
	if err == nil {
		blob, _, berr := audit.TranscriptBlob(rounds)
		if berr == nil && uint64(len(blob)) == rc.TranscriptSize {
			if audit.BlobHash(blob) == rc.TranscriptHash {
				return blob, nil
			}
		}
	}
	blob, perr := cl.GetPayload(ctx, rc.TranscriptHash)
	if perr != nil {
		return nil, fmt.Errorf("transcript %s of %s: the node's getTranscript gave %s and getPayload %v",
			rc.TranscriptHash, rc.TaskID, describeFetch(rounds, err), perr)
	}
	return blob, nil
}

func describeFetch(rounds []wire.RoundCommit, err error) string {
	if err != nil {
		return "an error (" + err.Error() + ")"
	}
	return fmt.Sprintf("%d rounds that are not the receipt's transcript", len(rounds))
}

// proofVerifyFlags are the flags that check a run-root proof file against a
// block's app hash; 'tenzro receipt verify' and 'tenzro chain verify-proof'
// share them and checkRunRootProofFile.
type proofVerifyFlags struct {
	proof, appHash, header, genesis string
}

// register adds the flags to c, and --comet-rpc unless c inherits it (tenzro chain).
func (p *proofVerifyFlags) register(c *cobra.Command, withNode bool) {
	c.Flags().StringVar(&p.proof, "proof", "", "run-root proof file (from 'tenzro receipt prove --task-id' or 'tenzro chain prove')")
	c.Flags().StringVar(&p.appHash, "app-hash", "", "with --proof: the app hash (hex) of the state after the proof's height, from a header you trust")
	c.Flags().StringVar(&p.header, "header", "", "with --proof: signed header of block height+1 (CometBFT JSON, e.g. a node's /commit)")
	c.Flags().StringVar(&p.genesis, "genesis", "", "with --proof: the network's genesis.json; light-verify the header against its validators")
	if withNode {
		addCometFlags(c.Flags(), "to fetch a header for --genesis")
	}
}

func (p *proofVerifyFlags) validate() error {
	if p.proof == "" {
		if p.appHash != "" || p.header != "" || p.genesis != "" {
			return usagef("--app-hash, --header and --genesis check a --proof file")
		}
		return nil
	}
	if p.appHash == "" && p.header == "" && p.genesis == "" {
		return usagef("--proof needs the app hash it is checked against: --app-hash, --header or --genesis")
	}
	if p.appHash != "" && (p.header != "" || p.genesis != "") {
		return usagef("--app-hash is the trusted app hash: give it alone, or a header (--header / --genesis) instead")
	}
	return nil
}

// check verifies the proof file against the app hash the flags give and,
// when runRoot is not zero, that it proves runRoot.
func (p *proofVerifyFlags) check(cmd *cobra.Command, runRoot wire.Hash) error {
	raw, err := readInputFile("proof", p.proof, 1<<20)
	if err != nil {
		return err
	}
	pf, err := parseProofFile(raw)
	if err != nil {
		return usagef("--proof: %v", err)
	}
	var ah wire.Hash
	switch {
	case p.appHash != "":
		if ah, err = wire.ParseHash(p.appHash); err != nil {
			return usagef("--app-hash: %v", err)
		}
	default:
		var shRaw []byte
		switch {
		case p.header != "":
			if shRaw, err = readInputFile("header", p.header, chain.MaxHeaderBytes); err != nil {
				return err
			}
		case len(pf.SignedHeader) > 0:
			shRaw = pf.SignedHeader
		}
		if shRaw == nil { // --genesis alone, the proof without a header: fetch it
			url, err := chainNodeURL(cmd)
			if err != nil {
				return err
			}
			c, err := chain.NewClient(url)
			if err != nil {
				return usageError{err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			if ah, err = c.VerifiedAppHashAfter(ctx, p.genesis, pf.Proof.Height); err != nil {
				return err
			}
			break
		}
		sh, err := chain.ParseSignedHeader(shRaw)
		if err != nil {
			return err
		}
		if p.genesis != "" {
			gen, err := chain.LoadGenesis(p.genesis)
			if err != nil {
				return usageError{err}
			}
			if ah, err = chain.VerifySignedHeader(gen, sh, pf.Proof.Height); err != nil {
				return err
			}
		} else if ah, err = chain.HeaderAppHash(sh, pf.Proof.Height); err != nil {
			return err
		}
	}
	if !pf.AppHash.IsZero() && pf.AppHash != ah {
		return fmt.Errorf("the proof file's app hash %s is not the header's %s", pf.AppHash, ah)
	}
	return chain.VerifyRunRootProof(&pf.Proof, ah, runRoot)
}

type inclusionOut struct {
	Round    uint64      `json:"round"`
	Leaf     wire.Hash   `json:"leaf"`
	Index    uint64      `json:"leaf_index"`
	TreeSize uint64      `json:"tree_size"`
	Proof    []wire.Hash `json:"proof"`
	RunRoot  wire.Hash   `json:"run_root"`
}

func newReceiptProveCmd() *cobra.Command {
	var path, transcriptPath, task, genesis string
	var round uint64
	var height int64
	c := &cobra.Command{
		Use:   "prove (--receipt FILE --round N [--transcript FILE] | --task-id ID [--height H] [--genesis FILE])",
		Short: "Print a round's inclusion proof in the run root, or the run root's in the chain's run log",
		Long: `With --receipt and --round: the audit path proving that round N's commit is a leaf
of the receipt's run root (RFC 6962 §2.1.1). Leaves are, in order: the spec hash,
each round commit, the final model hash; so round N is leaf N+1. The round
commits come from the transcript (--transcript FILE, else fetched from --rpc) and
are checked against the receipt first.

With --task-id: the proof (JSON) that the run's sealed run root is in the chain's
run log, committed by the app hash of the proof's height, with the signed header
of block height+1 that carries that app hash, from the chain node at --rpc (or --comet-rpc) (as
'tenzro chain prove'). --height H proves at that height (the node serves its last
committed height: it waits for H, and refuses a height it has passed). Check the
file offline with 'tenzro receipt verify --receipt R --proof FILE --genesis G' (or
--header / --app-hash). With --genesis the header is light-verified here too.`,
		Example: `  tenzro receipt prove --receipt receipt.json --round 2 --transcript transcript.json --format json
  tenzro receipt prove --task-id my-run --rpc http://127.0.0.1:8545 > proof.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if task != "" {
				if path != "" || cmd.Flags().Changed("round") {
					return usagef("--task-id proves the run root on chain; --receipt/--round prove a round in the run root: give one")
				}
				return proveRunRoot(cmd, task, genesis, height)
			}
			if path == "" || !cmd.Flags().Changed("round") {
				return usagef("give --receipt and --round (a round in the run root) or --task-id (the run root on chain)")
			}
			b, err := readInputFile("receipt", path, maxReceiptFile)
			if err != nil {
				return err
			}
			rc, err := audit.ParseReceipt(b)
			if err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			var transcript []byte
			if transcriptPath != "" {
				if transcript, err = readInputFile("transcript", transcriptPath, audit.MaxTranscriptBytes); err != nil {
					return err
				}
			} else if transcript, err = fetchTranscript(cmd.Context(), nodeClient(cmd), rc); err != nil {
				return err
			}
			leaf, index, size, proof, err := audit.InclusionProof(b, transcript, round)
			if err != nil {
				return err
			}
			out := inclusionOut{Round: round, Leaf: leaf, Index: index, TreeSize: size, Proof: proof, RunRoot: rc.RunRoot}
			if out.Proof == nil {
				out.Proof = []wire.Hash{}
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, out)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "round %d: leaf %s, index %d of %d, run root %s\n", round, leaf, index, size, rc.RunRoot)
			for i, h := range proof {
				fmt.Fprintf(w, "  proof[%d] %s\n", i, h)
			}
			return nil
		},
	}
	c.Flags().StringVar(&path, "receipt", "", "receipt JSON file")
	c.Flags().Uint64Var(&round, "round", 0, "round number")
	c.Flags().StringVar(&transcriptPath, "transcript", "", "transcript blob ('tenzro train get-transcript --out'); default: fetched from --rpc")
	c.Flags().StringVar(&task, "task-id", "", "prove this run's sealed run root on chain")
	c.Flags().Int64Var(&height, "height", 0, "with --task-id: the height to prove at (default: the node's last committed height)")
	c.Flags().StringVar(&genesis, "genesis", "", "with --task-id: the network's genesis.json; light-verify the header against its validators")
	addCometFlags(c.Flags(), "with --task-id")
	return c
}
