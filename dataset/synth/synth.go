package synth

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/tenzro/train/wire"
)

// Synthetic corpora: "synth://kernelsynth/v1?seed=S[&max_kernels=J][&mixup=P][&eval=N]"
// names KernelSynth + TSMixup windows that every trainer and evaluator
// generates from (generator version, seed, split, index); the reference
// generator is trainer/src/tenzro_trainer/synth.py. The node never generates
// data: it only checks that a posting's dataset_hash is the hash of its ref's
// definition (SynthHash), the same bytes the trainer computes
// (testdata/synth_vectors.json).
const (
	// DomainSynth is the domain tag of a synthetic corpus's definition hash.
	DomainSynth = "tenzro/train/dataset/synth/v1"
	// SynthGenerator is the only generator so far.
	SynthGenerator = "kernelsynth"
	// SynthVersion is the only generator version so far.
	SynthVersion = 1
	// MaxSynthRef bounds a synth ref's length.
	MaxSynthRef = 256
	// MaxSynthEval bounds a synth corpus's held-out windows.
	MaxSynthEval = 1 << 20
)

// SynthRef is a parsed synth:// dataset ref with its defaults filled in.
type SynthRef struct {
	Version       uint64
	Seed          uint64
	MaxKernels    uint64
	MixupPermille uint64
	EvalWindows   uint64
}

var (
	synthRefRE = regexp.MustCompile(`(?s)^synth://kernelsynth/v([0-9]{1,6})(?:\?(.*))?$`)
	synthIntRE = regexp.MustCompile(`^(0|[1-9][0-9]{0,18})$`)
)

// ErrSynthRef is wrapped by every refusal of ParseSynthRef.
var ErrSynthRef = errors.New("synth ref")

// IsSynthRef reports whether ref uses the synth:// scheme.
func IsSynthRef(ref string) bool { return strings.HasPrefix(ref, "synth://") }

// ParseSynthRef parses a synth:// ref strictly, as the trainer does: keys
// seed (required), max_kernels (1..8), mixup (permille, 0..1000) and eval
// (1..2^20), each at most once, decimal without leading zeros.
func ParseSynthRef(ref string) (SynthRef, error) {
	if len(ref) > MaxSynthRef {
		return SynthRef{}, fmt.Errorf("%w: longer than %d characters", ErrSynthRef, MaxSynthRef)
	}
	m := synthRefRE.FindStringSubmatch(ref)
	if m == nil {
		return SynthRef{}, fmt.Errorf("%w %q: want synth://kernelsynth/v1?seed=<n>[&max_kernels=J][&mixup=P][&eval=N]", ErrSynthRef, ref)
	}
	v, _ := strconv.ParseUint(m[1], 10, 64)
	if v != SynthVersion {
		return SynthRef{}, fmt.Errorf("%w %q: generator version %d unknown (have %d)", ErrSynthRef, ref, v, SynthVersion)
	}
	r := SynthRef{Version: v, MaxKernels: 5, MixupPermille: 500, EvalWindows: 512}
	seen := map[string]bool{}
	if strings.Contains(ref, "?") {
		for _, part := range strings.Split(m[2], "&") {
			k, val, ok := strings.Cut(part, "=")
			if !ok || (k != "seed" && k != "max_kernels" && k != "mixup" && k != "eval") {
				return SynthRef{}, fmt.Errorf("%w %q: unknown parameter %q", ErrSynthRef, ref, k)
			}
			if seen[k] {
				return SynthRef{}, fmt.Errorf("%w %q: %s given twice", ErrSynthRef, ref, k)
			}
			seen[k] = true
			if !synthIntRE.MatchString(val) {
				return SynthRef{}, fmt.Errorf("%w %q: %s=%q is not a decimal integer", ErrSynthRef, ref, k, val)
			}
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return SynthRef{}, fmt.Errorf("%w %q: %s out of range", ErrSynthRef, ref, k)
			}
			switch k {
			case "seed":
				r.Seed = n
			case "max_kernels":
				r.MaxKernels = n
			case "mixup":
				r.MixupPermille = n
			case "eval":
				r.EvalWindows = n
			}
		}
	}
	switch {
	case !seen["seed"]:
		return SynthRef{}, fmt.Errorf("%w %q: seed= is required", ErrSynthRef, ref)
	case r.MaxKernels < 1 || r.MaxKernels > 8:
		return SynthRef{}, fmt.Errorf("%w %q: max_kernels must be 1..8", ErrSynthRef, ref)
	case r.MixupPermille > 1000:
		return SynthRef{}, fmt.Errorf("%w %q: mixup must be 0..1000 (permille)", ErrSynthRef, ref)
	case r.EvalWindows < 1 || r.EvalWindows > MaxSynthEval:
		return SynthRef{}, fmt.Errorf("%w %q: eval must be 1..%d", ErrSynthRef, ref, MaxSynthEval)
	}
	return r, nil
}

// Hash is the corpus's dataset_hash:
//
//	SHA-256( Str("tenzro/train/dataset/synth/v1") ‖ Str("kernelsynth") ‖ U64(version) ‖
//	         U64(seed) ‖ U64(max_kernels) ‖ U64(mixup permille) ‖ U64(eval windows) )
func (r SynthRef) Hash() wire.Hash {
	return wire.NewCanon(DomainSynth).Str(SynthGenerator).U64(r.Version).U64(r.Seed).
		U64(r.MaxKernels).U64(r.MixupPermille).U64(r.EvalWindows).Sum()
}

// CheckRef checks what the node can check of a spec's dataset at posting:
// a synth:// ref must parse and its dataset_hash must be the hash of its
// definition. Other schemes name bytes the node does not hold at posting;
// trainers check their hash before training.
func CheckRef(ref, datasetHash string) error {
	if !IsSynthRef(ref) {
		return nil
	}
	r, err := ParseSynthRef(ref)
	if err != nil {
		return err
	}
	want, err := wire.ParseHash(datasetHash)
	if err != nil {
		return fmt.Errorf("dataset_hash: %w", err)
	}
	if got := r.Hash(); got != want {
		return fmt.Errorf("dataset_hash %x is not the hash of %s (%x)", want[:], ref, got[:])
	}
	return nil
}
