package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// maxPayloadFile bounds weights and gradient files read by the CLI; the
// node enforces its own (smaller) request limit.
const maxPayloadFile = 1 << 30

func newTrainCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Post, join, run and inspect training runs",
		Long: `Commands for sponsors (post-task, set-init-weights, get-receipt), trainers
(list-runs, enroll-trainer, get-weights, submit-gradient, leave) and anyone
watching a run (get-run, finalize-round).`,
		RunE: groupRunE,
	}
	cmd.AddCommand(newPostTaskCmd(), newSetInitWeightsCmd(), newListRunsCmd(), newGetRunCmd(), newGetReceiptCmd(),
		newEnrollCmd(), newLeaveCmd(), newSubmitCmd(), newFinalizeCmd(), newGetWeightsCmd(), newCancelRunCmd(), newChallengeCmd(), newGetChallengesCmd(), newWaitCmd())
	for _, f := range auditCommands {
		cmd.AddCommand(f())
	}
	return cmd
}

func newPostTaskCmd() *cobra.Command {
	var specPath, weightsPath, keyPath, datasetKeyPath, corpusPath string
	var noConvert bool
	c := &cobra.Command{
		Use:   "post-task --spec FILE [--init-weights FILE] [--no-convert] [--dataset-key FILE] [--corpus FILE] [--key FILE]",
		Short: "Post a training task spec and escrow its reward pool",
		Long: `Post a TrainingTaskSpec (the seed's JSON, accepted verbatim, plus the optional
fields aggregation, verification, outer_optimizer, slashing, …). The request is
signed by --key, which must be the spec's sponsor_did. --init-weights attaches the
initial model as safetensors; it can also be sent later with set-init-weights.
The node refuses an invalid spec (e.g. quorum K > trainer_count M) and stores nothing.

The weights must be in the spec's architecture.dtype (f32: F32, bf16: BF16).
For a bf16 spec the CLI rounds F32 tensors to BF16 (to nearest, ties to even)
before it hashes and signs the file, and says so on stderr; --no-convert
refuses instead. BF16 weights under an f32 spec are refused (never widened).

Confidential tier: the node's key broker seals the run's dataset key. By default
it makes one and returns it once (printed here: keep it, it encrypts the dataset).
--dataset-key FILE (64 hex digits, e.g. from "openssl rand -hex 32") gives your
own instead, so the dataset can be encrypted and added first
(tenzro dataset add --encrypt-key FILE --task-id T) and the spec can name its
ipfs:// CID.`,
		Example: `  tenzro train post-task --spec spec.json --init-weights init.safetensors --key sponsor.key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := readInputFile("spec", specPath, wire.MaxSpecBytes)
			if err != nil {
				return err
			}
			spec, canon, err := wire.ParseSpec(raw)
			if err != nil {
				return fmt.Errorf("--spec %s: %w", specPath, err)
			}
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			if spec.SponsorDID != key.DID.String() {
				return fmt.Errorf("--key is %s but the spec's sponsor_did is %q: the sponsor signs the posting", key.DID, spec.SponsorDID)
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.PostTaskParams{Spec: json.RawMessage(raw), Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			var weights *blobFile
			if weightsPath != "" {
				want, err := spec.Architecture.TensorDtype()
				if err != nil {
					return fmt.Errorf("--spec %s: %w", specPath, err)
				}
				path, cleanup, err := toRunDtype(cmd.ErrOrStderr(), "init-weights", weightsPath, want, noConvert)
				if err != nil {
					return err
				}
				defer cleanup()
				if weights, err = hashBlobFile("init-weights", path, maxPayloadFile); err != nil {
					return err
				}
				p.InitWeightsHash = weights.hash
			}
			if datasetKeyPath != "" {
				if p.DatasetKey, err = readHexKeyFile("--dataset-key", datasetKeyPath); err != nil {
					return err
				}
			}
			var corpus *blobFile
			if corpusPath != "" {
				sc, err := spec.ScoringRef()
				if err != nil || sc == nil {
					return usagef("--corpus: the spec does not score (no scoring field): %v", err)
				}
				if corpus, err = hashBlobFile("corpus", corpusPath, maxPayloadFile); err != nil {
					return err
				}
				if corpus.hash != sc.Corpus {
					return usagef("--corpus %s hashes to %s, the spec's scoring.corpus is %s", corpusPath, corpus.hash, sc.Corpus)
				}
			}
			p.Signature = key.Sign(p.Preimage(key.DID.String(), wire.SpecHash(canon), p.InitWeightsHash))
			c := nodeClient(cmd)
			if weights != nil {
				// Streamed with PUT /blobs first; inline against an older node.
				if p.InitWeights, err = weights.send(cmd.Context(), c, key, ""); err != nil {
					return err
				}
				if p.InitWeights != nil {
					p.InitWeightsHash = wire.Hash{}
				}
			}
			if corpus != nil {
				// The evaluator's corpus: streamed with PUT /blobs first; inline otherwise.
				if p.ScoreCorpus, err = corpus.send(cmd.Context(), c, key, ""); err != nil {
					return err
				}
			}
			res, err := c.PostTask(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "posted %s (spec_hash %s, status %s)\n", res.TaskID, res.SpecHash, res.Status)
			if res.DatasetKey != nil && datasetKeyPath == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "dataset key (shown once; encrypts the dataset): %x\n", res.DatasetKey)
			}
			return nil
		},
	}
	c.Flags().StringVar(&specPath, "spec", "", "task spec JSON file")
	c.Flags().StringVar(&weightsPath, "init-weights", "", "initial weights (safetensors)")
	c.Flags().BoolVar(&noConvert, "no-convert", false, "refuse F32 weights under a bf16 spec instead of rounding them to BF16")
	c.Flags().StringVar(&datasetKeyPath, "dataset-key", "", "Confidential tier: your own dataset key (file of 64 hex digits)")
	c.Flags().StringVar(&corpusPath, "corpus", "", "a scored spec's CSV corpus (its content hash is the spec's scoring.corpus; sent to the node before the posting)")
	c.Flags().StringVar(&keyPath, "key", "", "sponsor key file (default $TENZRO_KEY, then ~/.tenzro/key.json)")
	_ = c.MarkFlagRequired("spec")
	return c
}

func newSetInitWeightsCmd() *cobra.Command {
	var task, weightsPath, keyPath string
	var noConvert bool
	c := &cobra.Command{
		Use:   "set-init-weights --task-id ID --weights FILE [--no-convert] [--key FILE]",
		Short: "Send a posted run's initial weights (safetensors), signed by the sponsor",
		Long: `The weights must be in the spec's architecture.dtype: for a bf16 spec the CLI
rounds F32 tensors to BF16 (to nearest, ties to even) before it hashes and signs
the file, and says so on stderr; --no-convert refuses instead.`,
		Example: `  tenzro train set-init-weights --task-id train-1 --weights init.safetensors --key sponsor.key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if weightsPath == "" {
				return usagef("--weights is required")
			}
			path, cleanup, err := toRunDtype(cmd.ErrOrStderr(), "weights", weightsPath, runSpecDtype(cmd, task), noConvert)
			if err != nil {
				return err
			}
			defer cleanup()
			w, err := hashBlobFile("weights", path, maxPayloadFile)
			if err != nil {
				return err
			}
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.SetInitWeightsParams{TaskID: task, WeightsHash: w.hash, Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			p.Signature = key.Sign(p.PreimageFor(key.DID.String(), w.hash))
			c := nodeClient(cmd)
			if p.Weights, err = w.send(cmd.Context(), c, key, task); err != nil {
				return err
			}
			if p.Weights != nil {
				p.WeightsHash = wire.Hash{}
			}
			res, err := c.SetInitWeights(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "initial weights set for %s (status %s)\n", res.TaskID, res.Status)
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().StringVar(&weightsPath, "weights", "", "initial weights (safetensors)")
	c.Flags().BoolVar(&noConvert, "no-convert", false, "refuse F32 weights under a bf16 spec instead of rounding them to BF16")
	c.Flags().StringVar(&keyPath, "key", "", "sponsor key file (default $TENZRO_KEY, then ~/.tenzro/key.json)")
	for _, f := range []string{"task-id", "weights"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

func newListRunsCmd() *cobra.Command {
	var status string
	c := &cobra.Command{
		Use:   "list-runs [--status S]",
		Short: "List the node's runs",
		Example: `  tenzro train list-runs
  tenzro train list-runs --status awaiting_enrollment --format json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			runs, err := nodeClient(cmd).ListRuns(cmd.Context(), wire.ListRunsParams{Status: status})
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				if runs == nil {
					runs = []wire.RunSummary{}
				}
				return emitJSON(cmd, runs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tSTATUS\tROUND\tMAX_ROUNDS\tTRAINERS\tM\tK\tTIER")
			for _, r := range runs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.TaskID, r.Status, r.Round, r.Rounds, r.Trainers, r.M, r.K, r.Tier)
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&status, "status", "", "only runs with this status (awaiting_enrollment, running, sealed, cancelled)")
	return c
}

func newGetRunCmd() *cobra.Command {
	var task string
	c := &cobra.Command{
		Use:   "get-run --task-id ID",
		Short: "Show a run: status, round, trainers and their metrics",
		Long: `Show one run. With --format json the output is the node's RunView:
.task_spec, .status, .round, .trainer_metrics[did] = {submitted, accepted,
missed_rounds, current_reward}, .trainers, .fragments, .round_roots, …`,
		Example: `  tenzro train get-run --task-id train-1
  tenzro train get-run --task-id train-1 --format json | jq '.trainer_metrics'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := nodeClient(cmd)
			raw, err := c.CallRaw(cmd.Context(), wire.MethodGetRun, wire.TaskIDParams{TaskID: task})
			if err != nil {
				return err
			}
			var r *wire.RunView
			if err := json.Unmarshal(raw, &r); err != nil || r == nil {
				return fmt.Errorf("getRun answer: %v", err)
			}
			tr, err := c.GetTranscript(cmd.Context(), task)
			if err != nil {
				return fmt.Errorf("transcript of %s: %w", task, err)
			}
			prog := machine.RunProgress(r, tr)
			if jsonOutput(cmd) {
				return emitJSON(cmd, withProgress(raw, prog))
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "task      %s\nstatus    %s\nround     %d\nsyncer    %s\nspec_hash %s\nmodel     %s\nescrow    %s\n",
				r.TaskID, r.Status, r.Round, orDash(r.Syncer), r.SpecHash, r.ModelHash, orDash(r.Escrow))
			printProgress(out, r, prog)
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TRAINER\tSTATUS\tSHARDS\tSTAKE\tSUBMITTED\tACCEPTED(final)\tPENDING\tMISSED\tREWARD(final)")
			status := map[string]wire.TrainerView{}
			for _, t := range r.Trainers {
				status[t.DID] = t
			}
			dids := make([]string, 0, len(r.TrainerMetrics))
			for d := range r.TrainerMetrics {
				dids = append(dids, d)
			}
			for _, t := range r.Trainers {
				if _, ok := r.TrainerMetrics[t.DID]; !ok {
					dids = append(dids, t.DID)
				}
			}
			sort.Strings(dids)
			for _, d := range dids {
				m := r.TrainerMetrics[d]
				tv := status[d]
				shards := "-"
				if len(tv.ShardAssignments) > 0 {
					shards = fmt.Sprintf("%v from r%d", tv.ShardAssignments, tv.ShardsFromRound)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\n", d, orDash(tv.Status), shards, orDash(tv.Stake), m.Submitted, m.Accepted,
					pendingCell(prog.Trainers[d]), m.MissedRounds, orDash(m.CurrentReward))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(out, "PENDING: submissions not final yet (kept/rejected by a commit of a round not final yet). When they count: %s.\n", prog.FinalWhen)
			return err
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	_ = c.MarkFlagRequired("task-id")
	return c
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newGetReceiptCmd() *cobra.Command {
	var task, out string
	c := &cobra.Command{
		Use:   "get-receipt --task-id ID [--format json | --out FILE]",
		Short: "Fetch a sealed run's training receipt",
		Long: `Fetch the receipt of a sealed run. --format json prints it; --out writes it to a
file. Check it offline with "tenzro receipt verify --receipt FILE".`,
		Example: `  tenzro train get-receipt --task-id train-1 --out receipt.json
  tenzro receipt verify --receipt receipt.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := nodeClient(cmd).GetReceiptRaw(cmd.Context(), task)
			if err != nil {
				return err
			}
			pretty, err := indentRaw(raw)
			if err != nil {
				return fmt.Errorf("receipt from the node is not JSON: %w", err)
			}
			pretty = append(pretty, '\n')
			if out != "" {
				if err := os.WriteFile(out, pretty, 0o644); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
			}
			if jsonOutput(cmd) {
				_, err := cmd.OutOrStdout().Write(pretty)
				return err
			}
			var r wire.Receipt
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("decode receipt: %w", err)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "task        %s\nrun_root    %s\nfinal_model %s\nrounds      %d\nsyncer      %s\n", r.TaskID, r.RunRoot, r.FinalModelHash, r.Rounds, r.SyncerDID)
			if out != "" {
				fmt.Fprintf(w, "written to  %s\n", out)
			}
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().StringVar(&out, "out", "", "write the receipt JSON to this file")
	_ = c.MarkFlagRequired("task-id")
	return c
}

func newEnrollCmd() *cobra.Command {
	var task, didStr, stake, keyPath, attPath string
	c := &cobra.Command{
		Use:   "enroll-trainer --task-id ID --did DID --stake AMOUNT [--key FILE]",
		Short: "Enrol a trainer in a run with a stake (attoTNZO)",
		Long: `Enrol --did in a run, staking --stake attoTNZO from its balance. The request is
signed by --key, whose DID must be --did (--did may be omitted). Enrolment is
possible in any round: a late joiner becomes active from the next round.
Verified/Confidential tiers need --attestation (an attestation claim JSON file).`,
		Example: `  tenzro train enroll-trainer --task-id train-1 --did did:tenzro:machine:z6Mk... --stake 100000000000000000000 --key t0.key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			if didStr == "" {
				didStr = key.DID.String()
			}
			if didStr != key.DID.String() {
				return fmt.Errorf("--did %s is not the DID of --key (%s): a trainer enrols itself", didStr, key.DID)
			}
			if _, err := wire.ParseAmount(stake); err != nil {
				return usagef("--stake: %v", err)
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.EnrollParams{TaskID: task, TrainerDID: didStr, Stake: stake, Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			if attPath != "" {
				if p.Attestation, err = readJSONFile("attestation", attPath); err != nil {
					return err
				}
			}
			p.Signature = key.Sign(p.Preimage())
			res, err := nodeClient(cmd).Enroll(cmd.Context(), p)
			if err != nil {
				return err
			}
			return printEnroll(cmd, "enrolled", res)
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().StringVar(&didStr, "did", "", "trainer DID (default: the DID of --key)")
	c.Flags().StringVar(&stake, "stake", "", "stake in attoTNZO (decimal)")
	c.Flags().StringVar(&keyPath, "key", "", "trainer key file (default $TENZRO_KEY, then ~/.tenzro/key.json)")
	c.Flags().StringVar(&attPath, "attestation", "", "attestation claim JSON (Verified/Confidential tiers)")
	for _, f := range []string{"task-id", "stake"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

func readJSONFile(flag, path string) (json.RawMessage, error) {
	b, err := readInputFile(flag, path, 16<<20)
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("--%s %s: not valid JSON", flag, path)
	}
	return json.RawMessage(b), nil
}

func printEnroll(cmd *cobra.Command, verb string, r *wire.EnrollResult) error {
	if jsonOutput(cmd) {
		return emitJSON(cmd, r)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s in %s: trainer %s, shard_assignments %v from round %d; run %s\n", verb, r.TrainerDID, r.TaskID, r.Status, r.ShardAssignments, r.ShardsFromRound, r.RunStatus)
	if r.ShardsNote != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "  (%s)\n", r.ShardsNote)
	}
	return nil
}

func newLeaveCmd() *cobra.Command {
	var task, keyPath string
	c := &cobra.Command{
		Use:     "leave --task-id ID [--key FILE]",
		Short:   "Leave a run; shards are rebalanced from the next round",
		Example: `  tenzro train leave --task-id train-1 --key t3.key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.LeaveParams{TaskID: task, TrainerDID: key.DID.String(), Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			p.Signature = key.Sign(p.Preimage())
			res, err := nodeClient(cmd).Leave(cmd.Context(), p)
			if err != nil {
				return err
			}
			return printEnroll(cmd, "left:", res)
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().StringVar(&keyPath, "key", "", "trainer key file (default $TENZRO_KEY, then ~/.tenzro/key.json)")
	_ = c.MarkFlagRequired("task-id")
	return c
}

func newSubmitCmd() *cobra.Command {
	var task, payloadPath, keyPath, attPath string
	var round, fragment uint64
	var metrics map[string]string
	var noConvert bool
	c := &cobra.Command{
		Use:   "submit-gradient --task-id ID --round N --fragment I --payload FILE [--no-convert] [--key FILE] [--metrics train_loss=X,...]",
		Short: "Submit one outer gradient (safetensors) for a round and fragment",
		Long: `Submit the pseudo-gradient θ_before − θ_after of one fragment as safetensors
(same tensor names, dtype and shapes as the fragment's weights from get-weights).
A payload's dtype is the run's: for a bf16 run without compression the CLI rounds
F32 tensors to BF16 (to nearest, ties to even) before it stamps, hashes and signs
the payload, and says so on stderr; --no-convert refuses instead. BF16 tensors for
an F32 run are refused (never widened).
The payload must name its trainer, task, round and fragment in its
__metadata__ (docs/protocol/safetensors.md §6): a file without them is
stamped (re-encoded to a temporary file with the binding of --key, --task-id,
--round and --fragment); one that names anything else is refused. The CLI
computes payload_hash (BLAKE3-256 of the bound file) and signs the submission
preimage (docs/PROTOCOL.md §4) with --key. The node refuses wrong rounds or
fragments, duplicates, bad shapes and late submissions with a precise error.
--metrics attaches what you measured (train_loss, eval_loss, samples,
step_time_ms, ...; signed with the submission, docs/protocol/metrics.md); the
node's dashboard plots it.`,
		Example: `  tenzro train get-weights --task-id train-1 --fragment 0 --out w0.safetensors
  tenzro train submit-gradient --task-id train-1 --round 0 --fragment 0 --payload g0.safetensors --key t0.key
  tenzro train submit-gradient --task-id train-1 --round 1 --fragment 0 --payload g1.safetensors --metrics train_loss=0.82,samples=768`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("round") || !cmd.Flags().Changed("fragment") {
				return usagef("--round and --fragment are required")
			}
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			if payloadPath == "" {
				return usagef("--payload is required")
			}
			converted, cleanupConv, err := toRunDtype(cmd.ErrOrStderr(), "payload", payloadPath, runPayloadDtype(cmd, task, fragment), noConvert)
			if err != nil {
				return err
			}
			defer cleanupConv()
			path, cleanup, err := bindPayloadFile(converted, safetensors.Binding{Trainer: key.DID.String(), Task: task, Round: round, Fragment: fragment})
			if err != nil {
				return err
			}
			defer cleanup()
			payload, err := hashBlobFile("payload", path, maxPayloadFile)
			if err != nil {
				return err
			}
			g := &wire.OuterGradient{TaskID: task, TrainerDID: key.DID.String(), Round: round, FragmentIndex: fragment,
				PayloadHash: payload.hash}
			if g.Metrics, err = parseMetrics(metrics); err != nil {
				return err
			}
			if attPath != "" {
				if g.Attestation, err = readJSONFile("attestation", attPath); err != nil {
					return err
				}
			}
			if g.ChainID, err = nodeChainID(cmd); err != nil {
				return err
			}
			g.Signature = key.Sign(g.Preimage())
			// The payload goes first, raw, with PUT /blobs/<payload_hash>;
			// the signed submission then names it by hash (inline, base64,
			// against a node without /blobs).
			c := nodeClient(cmd)
			if g.GradientPayload, err = payload.send(cmd.Context(), c, key, task); err != nil {
				return err
			}
			res, err := c.Submit(cmd.Context(), g)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			msg := fmt.Sprintf("accepted: round %d fragment %d, payload %s (%d accepted for this fragment)", res.Round, res.FragmentIndex, res.PayloadHash, res.AcceptedCount)
			switch {
			case res.Forwarded:
				msg = fmt.Sprintf("forwarded: round %d fragment %d, payload %s relayed to the syncer over gossip (watch the run on the syncer for acceptance)", res.Round, res.FragmentIndex, res.PayloadHash)
			case !res.Accepted:
				msg = fmt.Sprintf("not accepted: round %d fragment %d", res.Round, res.FragmentIndex)
			}
			if res.Finalized {
				msg += "; fragment complete (the syncer commits it now)"
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().Uint64Var(&round, "round", 0, "round number")
	c.Flags().Uint64Var(&fragment, "fragment", 0, "fragment index")
	c.Flags().StringVar(&payloadPath, "payload", "", "outer gradient (safetensors)")
	c.Flags().BoolVar(&noConvert, "no-convert", false, "refuse F32 tensors for a bf16 run instead of rounding them to BF16")
	c.Flags().StringVar(&keyPath, "key", "", "trainer key file (default $TENZRO_KEY, then ~/.tenzro/key.json)")
	c.Flags().StringVar(&attPath, "attestation", "", "attestation claim JSON (Verified/Confidential tiers)")
	c.Flags().StringToStringVar(&metrics, "metrics", nil, "signed metrics to report, name=number pairs (e.g. train_loss=0.82,eval_loss=0.9)")
	for _, f := range []string{"task-id", "round", "fragment", "payload"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

func newGetWeightsCmd() *cobra.Command {
	var task, out string
	var fragment uint64
	c := &cobra.Command{
		Use:     "get-weights --task-id ID --fragment I --out FILE",
		Short:   "Download a fragment's current weights as safetensors",
		Example: `  tenzro train get-weights --task-id train-1 --fragment 0 --out w0.safetensors`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("fragment") {
				return usagef("--fragment is required")
			}
			if out == "" {
				return usagef("--out is required")
			}
			c := nodeClient(cmd)
			w, n, err := getWeightsFile(cmd.Context(), c, task, fragment, out)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, map[string]any{"task_id": w.TaskID, "round": w.Round, "fragment_index": w.FragmentIndex,
					"weights_hash": w.WeightsHash, "bytes": n, "out": out})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: fragment %d at round %d, %d bytes, weights_hash %s\n", out, w.FragmentIndex, w.Round, n, w.WeightsHash)
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().Uint64Var(&fragment, "fragment", 0, "fragment index")
	c.Flags().StringVar(&out, "out", "", "file to write (safetensors)")
	for _, f := range []string{"task-id", "fragment", "out"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

// postedRun is the node's view of a posted run and its parsed spec; nil
// when the node cannot tell (no such run, an unreadable spec: the node's
// refusal of the request then says so).
func postedRun(cmd *cobra.Command, task string) (*wire.RunView, *wire.TaskSpec) {
	run, err := nodeClient(cmd).GetRun(cmd.Context(), task)
	if err != nil {
		return nil, nil
	}
	spec, _, err := wire.ParseSpec(run.TaskSpec)
	if err != nil {
		return nil, nil
	}
	return run, spec
}

// runSpecDtype is the safetensors dtype of a posted run's weights, from its
// spec's architecture.dtype; "" when the node cannot tell.
func runSpecDtype(cmd *cobra.Command, task string) string {
	_, spec := postedRun(cmd, task)
	if spec == nil {
		return ""
	}
	want, _ := spec.Architecture.TensorDtype()
	return want
}

// runPayloadDtype is the dtype a payload for the run's fragment must have:
// the fragment's weights'. It is "" when the CLI cannot tell, and the
// payload then goes as it is for the node to judge: a compressed run (its
// payloads are the codec's encoding), a fragment the run does not have, a
// run the node does not know.
func runPayloadDtype(cmd *cobra.Command, task string, fragment uint64) string {
	run, spec := postedRun(cmd, task)
	if spec == nil {
		return ""
	}
	if c, err := spec.CompressionRef(); err != nil || c != nil || fragment >= uint64(len(run.Fragments)) {
		return ""
	}
	return run.Fragments[fragment].Dtype
}
