package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/plugins/buildtool"
	"github.com/tenzro/train/plugins/conformance"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

func init() { registerCommand(newPluginCmd) }

// maxTensorFile bounds a safetensors file read by `plugin run`.
const maxTensorFile = 8 << 30

func newPluginCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "plugin",
		Short: "Build, test, hash, publish and run Wasm rule plugins",
		Long: `Rule plugins are WebAssembly modules (ABI v1, plugins/ABI.md) that aggregate
fragment updates, verify submissions or apply the outer step, deterministically,
in a metered sandbox. Built-in rules: Mean, TrimmedMean, CoordinateMedian, Krum,
MultiKrum, Bulyan, GeometricMedian, CenteredClipping; verifiers Finite,
L2NormBound, NormRatio; outer step Nesterov.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	c.AddCommand(newPluginBuildCmd(), newPluginTestCmd(), newPluginHashCmd(), newPluginPublishCmd(), newPluginRunCmd(), newPluginListCmd())
	return c
}

func newPluginBuildCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "build DIR",
		Short: "Build a plugin from Go (wasip1) or C sources and attach DIR/manifest.json",
		Example: `  tenzro plugin build plugins/examples/go-median --out median.wasm
  tenzro plugin build plugins/examples/c-meanclip`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mod, err := buildtool.Build(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if out == "" {
				out = filepath.Base(filepath.Clean(args[0])) + ".wasm"
			}
			if err := os.WriteFile(out, mod, 0o644); err != nil {
				return err
			}
			h := wire.SHA256(mod)
			if jsonOutput(cmd) {
				return emitJSON(cmd, map[string]any{"out": out, "hash": h, "size": len(mod)})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes) sha256:%s\n", out, len(mod), h)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "output file (default DIR's name + .wasm)")
	return c
}

// loadModule reads a .wasm file, or builds a source directory.
func loadModule(ctx context.Context, path string) ([]byte, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return buildtool.Build(ctx, path)
	}
	return readInputFile("module", path, plugins.MaxModuleBytes)
}

func newPluginTestCmd() *cobra.Command {
	var params string
	var k int
	c := &cobra.Command{
		Use:   "test MODULE.wasm|DIR",
		Short: "Run the conformance suite (ABI, determinism on both engines, symmetry, chunking, limits, errors)",
		Example: `  tenzro plugin test median.wasm
  tenzro plugin test plugins/examples/c-meanclip --params '{"clip":2}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mod, err := loadModule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			rep, err := conformance.Run(cmd.Context(), mod, conformance.Options{Params: json.RawMessage(params), K: k, Workers: 1})
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				if err := emitJSON(cmd, rep); err != nil {
					return err
				}
			} else {
				fmt.Fprint(cmd.OutOrStdout(), rep.String())
			}
			if !rep.Passed() {
				return &exitError{code: exitFailed, msg: "conformance: FAILED"}
			}
			return nil
		},
	}
	c.Flags().StringVar(&params, "params", "", "rule parameters as a JSON object")
	c.Flags().IntVar(&k, "k", 0, "number of inputs (default 7)")
	return c
}

func newPluginHashCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hash MODULE.wasm",
		Short: "Validate a module and print its hash, instrumented hash and cost-table hash",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mod, err := loadModule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			e, err := plugins.NewEngine(cmd.Context(), plugins.Config{Workers: 1})
			if err != nil {
				return err
			}
			defer e.Close(cmd.Context())
			info, err := e.Publish(cmd.Context(), mod)
			if err != nil {
				return err
			}
			return printInfo(cmd, info)
		},
	}
}

func printInfo(cmd *cobra.Command, info *wire.PluginInfo) error {
	if jsonOutput(cmd) {
		return emitJSON(cmd, info)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s, %d bytes)\n  sha256:%s\n  instrumented sha256:%s\n  cost table sha256:%s\n",
		info.Name, info.Version, info.Kind, info.Size, info.Hash, info.InstrumentedHash, info.CostTableHash)
	return nil
}

func newPluginPublishCmd() *cobra.Command {
	var keyPath string
	c := &cobra.Command{
		Use:     "publish MODULE.wasm",
		Short:   "Publish a module to the node's plugin registry (signed)",
		Example: `  tenzro plugin publish median.wasm --key author.key`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			mod, err := loadModule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.PublishPluginParams{DID: key.DID.String(), Module: mod, Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			p.Signature = key.Sign(p.Preimage())
			var info wire.PluginInfo
			if err := nodeClient(cmd).Call(cmd.Context(), wire.MethodPublishPlugin, p, &info); err != nil {
				return err
			}
			return printInfo(cmd, &info)
		},
	}
	c.Flags().StringVar(&keyPath, "key", "", "author key file")
	return c
}

func newPluginListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the built-in plugins (offline)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := plugins.NewEngine(cmd.Context(), plugins.Config{})
			if err != nil {
				return err
			}
			defer e.Close(cmd.Context())
			list, err := e.List(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, list)
			}
			for _, p := range list {
				fmt.Fprintf(cmd.OutOrStdout(), "%-18s %-9s sha256:%s\n", p.Name, p.Kind, p.Hash)
			}
			return nil
		},
	}
}

type runFlags struct {
	rule, params, inputs, out, modules          string
	weights, grad, momentum, momentumOut, dtype string
	outer, noNesterov                           bool
	lr, beta                                    float32
	memPages                                    uint32
	fuel                                        uint64
}

func newPluginRunCmd() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run",
		Short: "Run a rule on your own safetensors files (or the outer step with its state files)",
		Long: `Aggregation: every tensor name present in all inputs (same dtype and shape) is
aggregated separately; OUT holds F32 tensors. Outer step (--outer): applies
Nesterov momentum (PyTorch SGD semantics) to --weights with the pseudo-gradient
--grad and the optional --momentum state, writing --out and --momentum-out.

Rules run in a plugin worker process, as on the node: a looping or
memory-hungry module is stopped by its fuel budget, its memory limit or the
wall-clock backstop, never by taking this process down.`,
		Example: `  tenzro plugin run --rule 'TrimmedMean{alpha_bps=2500}' --inputs a.safetensors,b.safetensors,c.safetensors,d.safetensors --out mean.safetensors
  tenzro plugin run --rule sha256:<hex> --module median.wasm --inputs a.safetensors,b.safetensors --out out.safetensors
  tenzro plugin run --outer --weights w.safetensors --grad agg.safetensors --momentum m.safetensors --out w2.safetensors --momentum-out m2.safetensors`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPlugin(cmd, f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.rule, "rule", "", "rule: a built-in name with inline params, or sha256:<hex>")
	fl.StringVar(&f.params, "params", "", "rule parameters as a JSON object")
	fl.StringVar(&f.inputs, "inputs", "", "comma-separated safetensors files, in canonical trainer order")
	fl.StringVar(&f.out, "out", "", "output safetensors file")
	fl.StringVar(&f.modules, "module", "", "comma-separated local .wasm modules to load first (for sha256: rules)")
	fl.BoolVar(&f.outer, "outer", false, "apply the outer step instead of aggregating")
	fl.StringVar(&f.weights, "weights", "", "outer step: current weights")
	fl.StringVar(&f.grad, "grad", "", "outer step: the aggregate (pseudo-gradient)")
	fl.StringVar(&f.momentum, "momentum", "", "outer step: momentum state (omit on the first step)")
	fl.StringVar(&f.momentumOut, "momentum-out", "", "outer step: where to write the new momentum")
	fl.Float32Var(&f.lr, "lr", 0.7, "outer step: learning rate")
	fl.Float32Var(&f.beta, "beta", 0.9, "outer step: momentum factor")
	fl.BoolVar(&f.noNesterov, "no-nesterov", false, "outer step: plain momentum")
	fl.Uint32Var(&f.memPages, "memory-pages", 0, "guest memory limit in 64 KiB pages (default 32768)")
	fl.Uint64Var(&f.fuel, "fuel", 0, "fuel budget per call (default 5e10, the node's)")
	return c
}

func readTensors(flag, path string) ([]safetensors.Tensor, error) {
	b, err := readInputFile(flag, path, maxTensorFile)
	if err != nil {
		return nil, err
	}
	ts, _, err := safetensors.Parse(b, safetensors.DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	return ts, nil
}

// tensorsAt reads a safetensors file's header only: where each tensor's
// bytes are.
func tensorsAt(flag, path string) ([]safetensors.TensorAt, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	if fi.Size() > maxTensorFile {
		return nil, fmt.Errorf("--%s %s: %d bytes, limit %d", flag, path, fi.Size(), int64(maxTensorFile))
	}
	ts, _, err := safetensors.ParseHeaderAt(fh, fi.Size(), safetensors.DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	return ts, nil
}

func byName(ts []safetensors.Tensor) map[string]safetensors.Tensor {
	m := map[string]safetensors.Tensor{}
	for _, t := range ts {
		m[t.Name] = t
	}
	return m
}

func numel(shape []int64) int {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	return n
}

func runPlugin(cmd *cobra.Command, f runFlags) error {
	ctx := cmd.Context()
	if f.out == "" {
		return usagef("--out is required")
	}
	// One call per tensor, once: nothing is reused, so nothing is staged
	// (plugins.Config.NoStaging).
	e, err := plugins.NewEngine(ctx, plugins.Config{MemoryPages: f.memPages, Fuel: f.fuel, Workers: 1, CacheDir: pluginCacheDir(), NoStaging: true})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	if f.modules != "" {
		for _, p := range strings.Split(f.modules, ",") {
			mod, err := loadModule(ctx, strings.TrimSpace(p))
			if err != nil {
				return err
			}
			if _, err := e.Publish(ctx, mod); err != nil {
				return fmt.Errorf("--module %s: %w", p, err)
			}
		}
	}
	if f.outer {
		return runOuter(cmd, e, f)
	}
	if f.rule == "" || f.inputs == "" {
		return usagef("--rule and --inputs are required (or --outer)")
	}
	// The inputs are located, not read: the engine's worker opens each file
	// and reads each tensor's bytes into the rule's memory itself, through
	// the finalize the node runs (aggregation only).
	paths := strings.Split(f.inputs, ",")
	var sets []map[string]safetensors.TensorAt
	var first []safetensors.TensorAt
	for i, p := range paths {
		paths[i] = strings.TrimSpace(p)
		ts, err := tensorsAt("inputs", paths[i])
		if err != nil {
			return err
		}
		if i == 0 {
			first = ts
		}
		m := map[string]safetensors.TensorAt{}
		for _, t := range ts {
			m[t.Name] = t
		}
		sets = append(sets, m)
	}
	rule, err := e.ResolveRule(ctx, f.rule, json.RawMessage(f.params), len(paths), len(paths))
	if err != nil {
		return usageError{err}
	}
	var out []safetensors.Tensor
	var fuel uint64
	for _, t := range first {
		n := numel(t.Shape)
		in := syncer.FinalizeInput{Rule: rule, Dtype: machine.Dtype(t.Dtype), N: n, AggregateOnly: true}
		for i, s := range sets {
			u, ok := s[t.Name]
			if !ok || u.Dtype != t.Dtype || fmt.Sprint(u.Shape) != fmt.Sprint(t.Shape) {
				return fmt.Errorf("input %s: tensor %q missing or with another dtype/shape than in %s", paths[i], t.Name, paths[0])
			}
			in.Inputs = append(in.Inputs, syncer.FileValues(paths[i], syncer.ByteRange{Off: u.Offset, Len: u.Len}))
		}
		res, err := e.Finalize(ctx, in)
		if err == nil && res.Status != wire.FragAggregated {
			err = fmt.Errorf("%s", res.Reason)
		}
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		fuel += res.Fuel
		out = append(out, safetensors.Tensor{Name: t.Name, Dtype: "F32", Shape: t.Shape, Data: res.Weights})
	}
	meta := map[string]string{"rule": rule.Name, "rule_hash": rule.Hash.String(), "rule_params": string(rule.Params), "engine_profile": e.Profile().Hash.String()}
	if err := writeTensors(f.out, out, meta); err != nil {
		return err
	}
	if jsonOutput(cmd) {
		return emitJSON(cmd, map[string]any{"rule": rule, "fuel": fuel, "out": f.out, "profile": e.Profile()})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s (sha256:%s) over %d inputs, %d tensors, fuel %d -> %s\n", rule.Name, rule.Params, rule.Hash, len(paths), len(out), fuel, f.out)
	return nil
}

// pluginCacheDir is this user's private directory for wazero's compiled
// modules, so that a run does not compile every built-in again ("" keeps
// the cache in memory when there is no usable cache directory).
func pluginCacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	dir := filepath.Join(base, "tenzro", "wasm-"+plugins.WazeroVersion)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	return dir
}

func writeTensors(path string, ts []safetensors.Tensor, meta map[string]string) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := safetensors.EncodeTo(fh, ts, meta); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

func runOuter(cmd *cobra.Command, e *plugins.Engine, f runFlags) error {
	ctx := cmd.Context()
	if f.weights == "" || f.grad == "" || f.momentumOut == "" {
		return usagef("--outer needs --weights, --grad, --out and --momentum-out")
	}
	ws, err := readTensors("weights", f.weights)
	if err != nil {
		return err
	}
	gs, err := readTensors("grad", f.grad)
	if err != nil {
		return err
	}
	var ms map[string]safetensors.Tensor
	if f.momentum != "" {
		t, err := readTensors("momentum", f.momentum)
		if err != nil {
			return err
		}
		ms = byName(t)
	}
	rule, err := e.ResolveOuter(ctx)
	if err != nil {
		return err
	}
	g := byName(gs)
	var outW, outM []safetensors.Tensor
	for _, w := range ws {
		gt, ok := g[w.Name]
		if !ok || gt.Dtype != "F32" || numel(gt.Shape) != numel(w.Shape) {
			return fmt.Errorf("--grad: tensor %q missing, not F32, or of another size", w.Name)
		}
		in := syncer.OuterStepInput{Rule: rule, Dtype: machine.Dtype(w.Dtype), N: numel(w.Shape), Weights: w.Data, Aggregate: gt.Data,
			LR: f.lr, Beta: f.beta, Nesterov: !f.noNesterov}
		if ms != nil {
			m, ok := ms[w.Name]
			if !ok || m.Dtype != "F32" || numel(m.Shape) != numel(w.Shape) {
				return fmt.Errorf("--momentum: tensor %q missing, not F32, or of another size", w.Name)
			}
			in.Momentum = m.Data
		}
		res, err := e.OuterStep(ctx, in)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", w.Name, err)
		}
		outW = append(outW, safetensors.Tensor{Name: w.Name, Dtype: w.Dtype, Shape: w.Shape, Data: res.Weights})
		outM = append(outM, safetensors.Tensor{Name: w.Name, Dtype: "F32", Shape: w.Shape, Data: res.Momentum})
	}
	meta := map[string]string{"outer": rule.Name, "outer_hash": rule.Hash.String()}
	if err := writeTensors(f.out, outW, meta); err != nil {
		return err
	}
	if err := writeTensors(f.momentumOut, outM, meta); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s step on %d tensors -> %s, %s\n", rule.Name, len(outW), f.out, f.momentumOut)
	return nil
}
