package main

// chaincmd.go: `tenzro chain …`, the client of a chain node (a validator
// started with `tenzro-node --home`): signed transactions broadcast and
// answered once committed (with the height), reads from committed state, and
// run-root proofs against an app hash. Registered from init().

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
)

func init() { registerCommand(newChainCmd) }

// chainNodeURL is the CometBFT RPC address the chain commands talk to:
// --comet-rpc (or its old name --node) when given, else $TENZRO_CHAIN, else
// the address the JSON-RPC node at --rpc reports for its own CometBFT RPC
// (tenzro_node_info's chain.rpc_addr) — so every command takes the same --rpc
// as the rest of the CLI.
// addCometFlags adds --comet-rpc and its deprecated old name --node.
func addCometFlags(fs *pflag.FlagSet, why string) {
	usage := "the node's CometBFT RPC address (default: $TENZRO_CHAIN, else what the node at --rpc reports)"
	if why != "" {
		usage = why + ": " + usage
	}
	fs.String("comet-rpc", "", usage)
	fs.String("node", "", "old name of --comet-rpc")
	_ = fs.MarkDeprecated("node", "use --comet-rpc, or --rpc with the node's JSON-RPC address")
}

func chainNodeURL(cmd *cobra.Command) (string, error) {
	for _, name := range []string{"comet-rpc", "node"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			return f.Value.String(), nil
		}
	}
	if env := os.Getenv("TENZRO_CHAIN"); env != "" {
		return env, nil
	}
	info, err := nodeClient(cmd).Info(cmd.Context())
	if err != nil {
		return "", fmt.Errorf("finding the node's CometBFT RPC address through --rpc (or pass --comet-rpc): %w", err)
	}
	if info.Chain == nil || info.Chain.RPCAddr == "" {
		return "", fmt.Errorf("the node at --rpc does not report a CometBFT RPC address: pass --comet-rpc")
	}
	addr := strings.TrimPrefix(info.Chain.RPCAddr, "tcp://")
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return addr, nil
}

func newChainCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chain",
		Short: "Transactions and reads against a chain node (CometBFT RPC)",
		Long: `chain talks to a node of the replicated chain (a validator started with
'tenzro-node --home', see 'tenzro-node testnet'). Writes are signed transactions
that the command broadcasts and answers once committed, with the block height;
a refusal prints the chain's reason. Reads come from the node's committed state,
so every node of the network gives the same answer at the same height.

Like every other command it takes --rpc, a node's JSON-RPC address, and asks
that node for its CometBFT RPC address; --comet-rpc (or $TENZRO_CHAIN) names
the CometBFT RPC address directly. Money moves with 'tenzro ledger transfer'.`,
		Example: `  tenzro chain status --rpc http://127.0.0.1:8545
  tenzro chain balance --did did:tenzro:human:z6Mk... --comet-rpc http://127.0.0.1:26663
  tenzro chain prove --task-id my-run > proof.json
  tenzro chain verify-proof --proof proof.json --app-hash <hex> --receipt receipt.json`,
		RunE: groupRunE,
	}
	addCometFlags(cmd.PersistentFlags(), "")
	cmd.AddCommand(newChainStatusCmd(), newChainBalanceCmd(), newChainRunCmd(), newChainTransferCmd(),
		newChainPostCmd(), newChainEnrollCmd(), newChainLeaveCmd(), newChainSubmitCmd(), newChainRegisterCmd(), newChainElectionProofCmd(),
		newChainProveCmd(), newChainVerifyProofCmd(), newChainVerifyReceiptCmd())
	return cmd
}

func chainClient(cmd *cobra.Command) (*chain.Client, error) {
	url, err := chainNodeURL(cmd)
	if err != nil {
		return nil, err
	}
	c, err := chain.NewClient(url)
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// chainErr turns a refusal into the CLI's "refused" exit with the reason.
func chainErr(err error) error {
	var te *chain.TxError
	if errors.As(err, &te) {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("error: refused by the chain (code %d): %s", te.Code, te.Msg)}
	}
	return err
}

func newChainStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "status",
		Example: `  tenzro chain status --node http://127.0.0.1:26657`,
		Short:   "Show the node's chain id, last committed height and app hash",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := chainClient(cmd)
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, st)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "chain %s node %s: height %d app hash %s catching up %v\n", st.ChainID, st.Moniker, st.Height, st.AppHash, st.CatchingUp)
			return err
		},
	}
}

func newChainBalanceCmd() *cobra.Command {
	var d string
	c := &cobra.Command{
		Use:     "balance --did DID",
		Example: `  tenzro chain balance --did did:tenzro:human:z6Mk... --node http://127.0.0.1:26663`,
		Short:   "Show a DID's committed balance (attoTNZO)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := chainClient(cmd)
			if err != nil {
				return err
			}
			b, h, err := c.Balance(cmd.Context(), d)
			if err != nil {
				return chainErr(err)
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, struct {
					*wire.Balance
					Height int64 `json:"height"`
				}{b, h})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s attoTNZO (height %d)\n", b.DID, b.Balance, h)
			return err
		},
	}
	c.Flags().StringVar(&d, "did", "", "DID")
	_ = c.MarkFlagRequired("did")
	return c
}

func newChainRunCmd() *cobra.Command {
	var task string
	c := &cobra.Command{
		Use:     "run --task-id ID",
		Example: `  tenzro chain run --task-id my-run --format json`,
		Short:   "Show a run as committed on chain (spec hash, status, trainers, election, run root)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := chainClient(cmd)
			if err != nil {
				return err
			}
			v, h, err := c.Query(cmd.Context(), chain.QueryRun, task)
			if err != nil {
				return chainErr(err)
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, json.RawMessage(v))
			}
			var r struct {
				Status      string    `json:"status"`
				SpecHash    wire.Hash `json:"spec_hash"`
				Trainers    []any     `json:"trainers"`
				Submissions uint64    `json:"submissions"`
				Election    *struct {
					Winner string `json:"winner"`
				} `json:"election"`
				RunRoot *wire.Hash `json:"run_root"`
			}
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("run record: %w", err)
			}
			syncerDID, root := "-", "-"
			if r.Election != nil {
				syncerDID = r.Election.Winner
			}
			if r.RunRoot != nil {
				root = r.RunRoot.String()
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "run %s (height %d): %s, spec %s, %d trainers, %d submissions, elected syncer %s, run root %s\n",
				task, h, r.Status, r.SpecHash, len(r.Trainers), r.Submissions, syncerDID, root)
			return err
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "task id")
	_ = c.MarkFlagRequired("task-id")
	return c
}

// broadcastAndPrint sends tx and prints the committed outcome.
func broadcastAndPrint(cmd *cobra.Command, tx []byte, err error) error {
	if err != nil {
		return usageError{err}
	}
	c, err := chainClient(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
	defer cancel()
	res, err := c.Broadcast(ctx, tx)
	if err != nil {
		return chainErr(err)
	}
	if jsonOutput(cmd) {
		return emitJSON(cmd, res)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "committed at height %d (tx %s): %s\n", res.Height, res.Hash, res.Result)
	return err
}

func newChainTransferCmd() *cobra.Command {
	var to, amount, keyPath string
	c := &cobra.Command{
		Use:     "transfer --to DID --amount AMOUNT --key FILE",
		Example: `  tenzro chain transfer --to did:tenzro:machine:z6Mk... --amount 1000000000000000000 --key sponsor.key`,
		Short:   "Send attoTNZO from the key's DID (a signed transaction; answers once committed)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			if _, err := wire.ParseAmount(amount); err != nil {
				return usagef("--amount: %v", err)
			}
			cid, err := cometChainID(cmd)
			if err != nil {
				return err
			}
			tx, err := chain.TransferTx(cid, k, to, amount, newNonce())
			return broadcastAndPrint(cmd, tx, err)
		},
	}
	c.Flags().StringVar(&to, "to", "", "recipient DID")
	c.Flags().StringVar(&amount, "amount", "", "amount in attoTNZO (decimal)")
	c.Flags().StringVar(&keyPath, "key", "", "sender's key file")
	for _, f := range []string{"to", "amount", "key"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

func newChainPostCmd() *cobra.Command {
	var specPath, weightsPath, keyPath string
	c := &cobra.Command{
		Use:     "post-task --spec FILE --key FILE [--init-weights FILE]",
		Example: `  tenzro chain post-task --spec spec.json --key sponsor.key --init-weights init.safetensors`,
		Short:   "Post a task spec and escrow its reward pool (signed by the sponsor; built-in Mean rule only)",
		Long: `post-task sends a posting straight to the chain: the spec, the built-in Mean rule,
Finite verifier and Nesterov outer step (a node's tenzro_training_postTask resolves
any rule and keeps the weights' bytes), and with --init-weights the hash and layout
of the initial weights, computed here (the bytes stay off chain: a node that
serves them must hold them).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			spec, err := readInputFile("spec", specPath, wire.MaxSpecBytes)
			if err != nil {
				return err
			}
			parsed, _, err := wire.ParseSpec(spec)
			if err != nil {
				return usagef("--spec: %v", err)
			}
			var layout *wire.InitLayout
			if weightsPath != "" {
				raw, err := readInputFile("init-weights", weightsPath, machine.MaxInitWeights)
				if err != nil {
					return err
				}
				if layout, _, err = machine.InitLayoutOf(raw, parsed.Architecture.FragmentCount); err != nil {
					return usagef("--init-weights: %v", err)
				}
				// A node's postTask checks these too; here no node sees the
				// weights, so this command does (it never converts: the
				// bytes a node serves must be the ones laid out here).
				if err := syncer.CheckInit(parsed, layout); err != nil {
					return usagef("--init-weights: %v", err)
				}
			}
			rules, err := chain.MeanRules()
			if err != nil {
				return err
			}
			cid, err := cometChainID(cmd)
			if err != nil {
				return err
			}
			tx, err := chain.PostTaskTx(cid, k, spec, layout, rules, newNonce())
			return broadcastAndPrint(cmd, tx, err)
		},
	}
	c.Flags().StringVar(&specPath, "spec", "", "task spec JSON file")
	c.Flags().StringVar(&weightsPath, "init-weights", "", "initial safetensors file (hashed and laid out here, not sent)")
	c.Flags().StringVar(&keyPath, "key", "", "sponsor's key file")
	_ = c.MarkFlagRequired("spec")
	_ = c.MarkFlagRequired("key")
	return c
}

func newChainEnrollCmd() *cobra.Command {
	var task, stake, keyPath string
	c := &cobra.Command{
		Use:     "enroll --task-id ID --stake AMOUNT --key FILE",
		Example: `  tenzro chain enroll --task-id my-run --stake 100000000000000000000 --key trainer.key`,
		Short:   "Enrol the key's DID as a trainer of a run, locking the stake",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cid, err := cometChainID(cmd)
			if err != nil {
				return err
			}
			tx, err := chain.EnrollTx(cid, k, task, stake, newNonce())
			return broadcastAndPrint(cmd, tx, err)
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "task id")
	c.Flags().StringVar(&stake, "stake", "", "stake in attoTNZO")
	c.Flags().StringVar(&keyPath, "key", "", "trainer's key file")
	for _, f := range []string{"task-id", "stake", "key"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

// proofFile is what `chain prove` and `receipt prove --task-id` write: the
// proof, the app hash that the header of block height+1 carries on the node
// asked, and that signed header (CometBFT JSON), so the file can be checked
// offline ('tenzro receipt verify --proof FILE --genesis G').
type proofFile struct {
	Proof        chain.RunRootProof `json:"proof"`
	AppHash      wire.Hash          `json:"app_hash"`
	SignedHeader json.RawMessage    `json:"signed_header,omitempty"`
}

func parseProofFile(raw []byte) (*proofFile, error) {
	var pf proofFile
	if err := json.Unmarshal(raw, &pf); err != nil {
		return nil, err
	}
	return &pf, nil
}

// proveRunRoot prints task's run-root proof from the chain node at --node
// (at height when > 0), with the signed header of block height+1; with
// genesis the header is light-verified against its validators first.
func proveRunRoot(cmd *cobra.Command, task, genesis string, height int64) error {
	c, err := chainClient(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
	defer cancel()
	var v []byte
	if height > 0 {
		for {
			var at int64
			v, at, err = c.QueryAt(ctx, chain.QueryRunProof, task, height)
			if err == nil || at > height || ctx.Err() != nil {
				break
			}
			if at == 0 { // transport error: no height known
				return chainErr(err)
			}
			time.Sleep(100 * time.Millisecond) // the node has not reached height yet
		}
		if err != nil {
			return chainErr(fmt.Errorf("proof at height %d: %w (a node proves at its last committed height only: omit --height, or give one it has not passed)", height, err))
		}
	} else if v, _, err = c.Query(ctx, chain.QueryRunProof, task); err != nil {
		return chainErr(err)
	}
	var pf proofFile
	if err := json.Unmarshal(v, &pf.Proof); err != nil {
		return fmt.Errorf("proof: %w", err)
	}
	sh, err := c.SignedHeaderAfter(ctx, pf.Proof.Height)
	if err != nil {
		return err
	}
	if genesis != "" {
		gen, err := chain.LoadGenesis(genesis)
		if err != nil {
			return usageError{err}
		}
		if pf.AppHash, err = chain.VerifySignedHeader(gen, sh, pf.Proof.Height); err != nil {
			return err
		}
		if err := chain.VerifyRunRootProof(&pf.Proof, pf.AppHash, wire.Hash{}); err != nil {
			return err
		}
	} else if pf.AppHash, err = chain.HeaderAppHash(sh, pf.Proof.Height); err != nil {
		return err
	}
	if pf.SignedHeader, err = chain.EncodeSignedHeader(sh); err != nil {
		return err
	}
	return emitJSON(cmd, pf)
}

func newChainProveCmd() *cobra.Command {
	var task, genesis string
	var height int64
	c := &cobra.Command{
		Use:     "prove --task-id ID [--height H] [--genesis FILE]",
		Example: `  tenzro chain prove --task-id my-run > proof.json`,
		Short:   "Print a sealed run root's inclusion proof against the app hash of the last committed height",
		Long: `prove prints (JSON) the proof that the run's sealed run root is in the chain's
run log, committed by the app hash of the proof's height, together with that app
hash and the signed header of block height+1 that carries it on this node. With
--genesis the header is verified as a light client does (signed by more than two
thirds of the genesis validators' power), so the node need not be trusted;
without it, check the file with 'tenzro chain verify-proof' (or 'tenzro receipt
verify --proof'), which can light-verify the header it holds offline. Same as
'tenzro receipt prove --task-id'.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return proveRunRoot(cmd, task, genesis, height)
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "task id")
	c.Flags().StringVar(&genesis, "genesis", "", "the network's genesis.json: verify the header against its validators")
	c.Flags().Int64Var(&height, "height", 0, "prove at this height (default: the node's last committed height)")
	_ = c.MarkFlagRequired("task-id")
	return c
}

func newChainVerifyProofCmd() *cobra.Command {
	var receiptPath string
	var pv proofVerifyFlags
	c := &cobra.Command{
		Use:     "verify-proof --proof FILE (--app-hash HEX | --header FILE | --genesis FILE) [--receipt FILE]",
		Example: `  tenzro chain verify-proof --proof proof.json --app-hash 1C85... --receipt receipt.json`,
		Short:   "Check a run-root proof offline against an app hash (and a receipt's run root)",
		Long: `verify-proof checks, without a chain, that the proof's run root is in the run log
committed by the app hash of the state after the proof's height: --app-hash (from
the header of block height+1 that you trust), or --header FILE (a signed header of
that block), light-verified against the genesis validators with --genesis FILE
(which alone uses the header in the proof file). With --receipt it also verifies
the receipt (as 'tenzro receipt verify') and that its run root is the proven one.
Prints 1 (valid) or 0 (invalid, with the reason on stderr), like the 0x1008
precompile. 'tenzro receipt verify --receipt R --proof FILE' is the same check.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pv.proof == "" {
				return usagef("--proof is required")
			}
			if err := pv.validate(); err != nil {
				return err
			}
			var root wire.Hash
			if receiptPath != "" {
				rc, err := readInputFile("receipt", receiptPath, maxReceiptFile)
				if err != nil {
					return err
				}
				if err := audit.CheckReceipt(rc, nil); err != nil {
					fmt.Fprintln(cmd.OutOrStdout(), 0)
					return &exitError{code: exitFailed, msg: "invalid: receipt: " + err.Error()}
				}
				parsed, _ := audit.ParseReceipt(rc)
				root = parsed.RunRoot
			}
			if err := pv.check(cmd, root); err != nil {
				var ue usageError
				if errors.As(err, &ue) {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), 0)
				return &exitError{code: exitFailed, msg: "invalid: " + err.Error()}
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), 1)
			return err
		},
	}
	pv.register(c, false)
	c.Flags().StringVar(&receiptPath, "receipt", "", "receipt whose run root must be the proven one")
	_ = c.MarkFlagRequired("proof")
	return c
}

func newChainRegisterCmd() *cobra.Command {
	var stake, keyPath string
	c := &cobra.Command{
		Use:     "register-syncer --stake AMOUNT --key FILE",
		Example: `  tenzro chain register-syncer --stake 1000000000000000000000 --key node.key`,
		Short:   "Lock stake as a syncer candidate (elections weight candidates by stake)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cid, err := cometChainID(cmd)
			if err != nil {
				return err
			}
			tx, err := chain.RegisterSyncerTx(cid, k, stake, newNonce())
			return broadcastAndPrint(cmd, tx, err)
		},
	}
	c.Flags().StringVar(&stake, "stake", "", "stake in attoTNZO")
	c.Flags().StringVar(&keyPath, "key", "", "candidate's key file")
	_ = c.MarkFlagRequired("stake")
	_ = c.MarkFlagRequired("key")
	return c
}

func newChainElectionProofCmd() *cobra.Command {
	var task, keyPath string
	c := &cobra.Command{
		Use:     "enter-election --task-id ID --key FILE",
		Example: `  tenzro chain enter-election --task-id my-run --key node.key`,
		Short:   "Enter a run's syncer election: prove the run's VRF alpha with the candidate's key and send the proof",
		Long: `enter-election reads the run's spec hash from the chain, computes the RFC 9381 proof
over the run's election alpha with the key (a registered candidate's), and sends it
before the run starts. When the M-th trainer enrols the chain elects among every
candidate with a proof, weighted by stake.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			c, err := chainClient(cmd)
			if err != nil {
				return err
			}
			v, _, err := c.Query(cmd.Context(), chain.QueryRun, task)
			if err != nil {
				return chainErr(err)
			}
			var r struct {
				SpecHash wire.Hash `json:"spec_hash"`
			}
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("run record: %w", err)
			}
			pi, err := vrf.Prove(k.Priv, election.Alpha(task, r.SpecHash))
			if err != nil {
				return err
			}
			cid, err := cometChainID(cmd)
			if err != nil {
				return err
			}
			tx, err := chain.ElectionProofTx(cid, k, task, pi, newNonce())
			return broadcastAndPrint(cmd, tx, err)
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "task id")
	c.Flags().StringVar(&keyPath, "key", "", "candidate's key file")
	_ = c.MarkFlagRequired("task-id")
	_ = c.MarkFlagRequired("key")
	return c
}

func newChainVerifyReceiptCmd() *cobra.Command {
	var receiptPath string
	c := &cobra.Command{
		Use:     "verify-receipt --receipt FILE",
		Example: `  tenzro chain verify-receipt --receipt receipt.json --node http://127.0.0.1:26663`,
		Short:   "Verify a receipt against the chain: 1 (valid) or 0 (invalid, reason on stderr)",
		Long: `verify-receipt checks the receipt on its own (as 'tenzro receipt verify'), then
against the node's committed state: the run is sealed on chain with the receipt's
run root, by the syncer that signed it. A receipt re-signed by any other key, or
for a root the chain never sealed, prints 0. Any node of the network gives the
same answer.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := readInputFile("receipt", receiptPath, maxReceiptFile)
			if err != nil {
				return err
			}
			c, err := chainClient(cmd)
			if err != nil {
				return err
			}
			if err := c.CheckReceipt(cmd.Context(), rc); err != nil {
				fmt.Fprintln(cmd.OutOrStdout(), 0)
				return &exitError{code: exitFailed, msg: "invalid: " + err.Error()}
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), 1)
			return err
		},
	}
	c.Flags().StringVar(&receiptPath, "receipt", "", "receipt JSON file")
	_ = c.MarkFlagRequired("receipt")
	return c
}

func newChainLeaveCmd() *cobra.Command {
	var task, keyPath string
	c := &cobra.Command{
		Use:     "leave --task-id ID --key FILE",
		Example: `  tenzro chain leave --task-id my-run --key trainer.key`,
		Short:   "Leave a run: the stake (minus slashes) is refunded at once; accepted work still earns at seal",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cid, err := cometChainID(cmd)
			if err != nil {
				return err
			}
			tx, err := chain.LeaveTx(cid, k, task, newNonce())
			return broadcastAndPrint(cmd, tx, err)
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "task id")
	c.Flags().StringVar(&keyPath, "key", "", "trainer's key file")
	_ = c.MarkFlagRequired("task-id")
	_ = c.MarkFlagRequired("key")
	return c
}

func newChainSubmitCmd() *cobra.Command {
	var task, payloadPath, keyPath string
	var round, fragment uint64
	c := &cobra.Command{
		Use:     "submit-record --task-id ID --round R --fragment F --payload FILE --key FILE",
		Example: `  tenzro chain submit-record --task-id my-run --round 0 --fragment 3 --payload grad3.safetensors --key trainer.key`,
		Short:   "Put the record of a submission on chain: the payload's hash and size, signed by the trainer (the bytes stay off chain)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			f, err := os.Open(payloadPath)
			if err != nil {
				return usageError{fmt.Errorf("--payload: %w", err)}
			}
			defer f.Close()
			hsh := wire.NewContentHasher()
			n, err := io.Copy(hsh, io.LimitReader(f, machine.MaxPayloadBytes+1))
			if err != nil {
				return fmt.Errorf("--payload %s: %w", payloadPath, err)
			}
			if n > machine.MaxPayloadBytes {
				return usagef("--payload %s: larger than %d bytes", payloadPath, machine.MaxPayloadBytes)
			}
			cid, err := cometChainID(cmd)
			if err != nil {
				return err
			}
			tx, err := chain.SubmissionTx(cid, k, task, round, fragment, hsh.Sum(), uint64(n))
			return broadcastAndPrint(cmd, tx, err)
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "task id")
	c.Flags().Uint64Var(&round, "round", 0, "round")
	c.Flags().Uint64Var(&fragment, "fragment", 0, "fragment index")
	c.Flags().StringVar(&payloadPath, "payload", "", "the submitted safetensors payload (hashed here, not sent)")
	c.Flags().StringVar(&keyPath, "key", "", "trainer's key file")
	for _, f := range []string{"task-id", "payload", "key"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}
