package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
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
	// Unchecked says what a valid result did not establish, for want of an
	// anchor (the chain at --rpc, or a run-log proof with --proof).
	Unchecked []string `json:"unchecked,omitempty"`
}

func newReceiptVerifyCmd() *cobra.Command {
	var path, root, transcriptPath string
	var full bool
	var pv proofVerifyFlags
	var lf lightVerifyFlags
	c := &cobra.Command{
		Use:   "verify --receipt FILE [--root HEX] [--full [--transcript FILE]] [--rpc URL] [--proof FILE ...] [--light URL --genesis FILE]",
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

--light URL (any node's CometBFT RPC) with --genesis FILE checks the receipt
against the chain with no node of your own: CometBFT's light client verifies
headers (trust root: the latest header signed by the genesis validators, or
--trust-height/--trust-hash; --light-witnesses cross-check the primary), and the
sealed run (run root, election record) and the chain's receipt signer are read
with proofs against the verified header's app hash; a lying node is refused.
Exit 0 valid, 1 invalid (the reason is printed), 2 usage.`,
		Example: `  tenzro receipt verify --receipt receipt.json
  tenzro receipt verify --receipt receipt.json --full --transcript transcript.json
  tenzro receipt verify --receipt receipt.json --rpc http://127.0.0.1:8545
  tenzro receipt verify --receipt receipt.json --proof proof.json --genesis genesis.json
  tenzro receipt verify --receipt receipt.json --light http://127.0.0.1:26657 --genesis genesis.json`,
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
			if err := lf.validate(&pv); err != nil {
				return err
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
				var rounds []wire.RoundCommit
				if err == nil {
					_, rounds, _, err = audit.CheckFull(b, transcript)
				}
				switch {
				case err != nil:
					fail(err)
				case !audit.SignerCommitted(rc, rounds) && !cmd.Flags().Changed("rpc") && lf.url == "":
					// A self-listed later ticket and a genuine one look alike
					// in the transcript: only the chain's election decides.
					fail(fmt.Errorf("the signer %s committed no fragment: only the chain's election record tells a genuine later-ticket signer from a key that listed itself; verify with --rpc", rc.SyncerDID))
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
			if res.Valid == 1 && lf.url != "" {
				res.Checks = append(res.Checks, "light")
				run, err := lf.check(cmd, lf.genesis, b)
				if err != nil {
					fail(fmt.Errorf("against the light-verified chain: %w", err))
				} else {
					r := run.RunRoot
					res.Root, res.Height = &r, run.Height
				}
			}
			if res.Valid == 1 && pv.proof != "" {
				res.Checks = append(res.Checks, "proof")
				if err := pv.check(cmd, rc.RunRoot); err != nil {
					fail(err)
				}
			}
			if res.Valid == 1 {
				res.Unchecked = unanchored(res.Checks)
			}
			if jsonOutput(cmd) {
				if err := emitJSON(cmd, res); err != nil {
					return err
				}
			} else if res.Valid == 1 {
				w := cmd.OutOrStdout()
				what := "valid"
				if len(res.Unchecked) > 0 {
					what = "valid as far as checked"
				}
				fmt.Fprintf(w, "%s: receipt of %s, run root %s, %d rounds, signed by %s (checked: %s)\n", what, rc.TaskID, rc.RunRoot, rc.Rounds, rc.SyncerDID, strings.Join(res.Checks, ", "))
				for _, u := range res.Unchecked {
					fmt.Fprintf(w, "not checked: %s\n", u)
				}
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
	lf.register(c)
	_ = c.MarkFlagRequired("receipt")
	return c
}

// lightVerifyFlags check a receipt through a light client of any node.
type lightVerifyFlags struct {
	url, genesis string
	witnesses    []string
	trustHeight  int64
	trustHash    string
}

func (l *lightVerifyFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&l.url, "light", "", "a node's CometBFT RPC (http://host:port): check the receipt against headers a light client verifies (with --genesis)")
	c.Flags().StringSliceVar(&l.witnesses, "light-witnesses", nil, "with --light: other nodes' CometBFT RPCs that cross-check every header (default: the --light node is its own witness)")
	c.Flags().Int64Var(&l.trustHeight, "trust-height", 0, "with --light: the height of a block you trust (with --trust-hash); default: the latest header, if signed by the genesis validators")
	c.Flags().StringVar(&l.trustHash, "trust-hash", "", "with --light: the hash (hex) of the block at --trust-height")
}

func (l *lightVerifyFlags) validate(pv *proofVerifyFlags) error {
	if l.url == "" {
		if len(l.witnesses) > 0 || l.trustHeight != 0 || l.trustHash != "" {
			return usagef("--light-witnesses, --trust-height and --trust-hash go with --light")
		}
		return nil
	}
	if pv.genesis == "" {
		return usagef("--light needs the network's genesis (--genesis FILE): its chain id and validators are the light client's trust root")
	}
	if (l.trustHeight == 0) != (l.trustHash == "") {
		return usagef("--trust-height and --trust-hash go together (a block you trust)")
	}
	if l.trustHeight < 0 {
		return usagef("--trust-height %d: want a height ≥ 1", l.trustHeight)
	}
	l.genesis = pv.genesis
	if pv.proof == "" {
		pv.genesis = "" // --genesis serves the light client, not a proof file
	}
	return nil
}

// check starts a light client of the --light node and checks the receipt
// against the state it proves.
func (l *lightVerifyFlags) check(cmd *cobra.Command, genesis string, receipt []byte) (*audit.SealedRun, error) {
	gen, err := chain.LoadGenesis(genesis)
	if err != nil {
		return nil, usageError{err}
	}
	var hash []byte
	if l.trustHash != "" {
		if hash, err = hex.DecodeString(l.trustHash); err != nil || len(hash) != 32 {
			return nil, usagef("--trust-hash %q: want 64 hex digits (a block hash)", l.trustHash)
		}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
	defer cancel()
	lc, err := chain.StartLight(ctx, chain.LightOptions{Genesis: gen, Primary: l.url, Witnesses: l.witnesses, TrustHeight: l.trustHeight, TrustHash: hash,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	return lc.CheckReceipt(ctx, receipt)
}

// unanchored lists what a verification with checks did not establish:
// without the chain (--rpc) or a run-log proof (--proof) nothing ties the
// receipt's run root to a run on chain, and without the chain nothing ties
// its syncers to the run's election record; without --full the transcript
// behind the run root was not recomputed.
func unanchored(checks []string) []string {
	has := func(c string) bool { return slices.Contains(checks, c) }
	var out []string
	if has("light") {
		checks = append(checks, "chain") // the light-verified chain anchors as the node does
	}
	if !has("chain") && !has("proof") {
		out = append(out, "that this run root is the one committed on chain for the task (no anchor: give --rpc, or --proof with --genesis, --header or --app-hash)")
	}
	if !has("chain") {
		out = append(out, "that the syncers are the entrants of the run's election on chain (give --rpc)")
	}
	if !has("full") {
		out = append(out, "the transcript behind the run root (give --full)")
	}
	return out
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
