package main

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/tenzro/train/wire/safetensors"
)

// toRunDtype returns the path of the file to hash, sign and send in place
// of path (given with --flag) for a run whose weights and payloads are
// want (F32 or BF16; PROTOCOL §5: payload dtype = weights dtype = spec
// dtype). For a BF16 run the file's F32 tensors are rounded to BF16 (to
// nearest, ties to even: safetensors.ToBF16To) into a temporary file that
// cleanup removes, and one line on stderr says so; noConvert refuses
// instead. BF16 tensors for an F32 run are always refused: widening them
// would invent precision. Other dtypes, a file that is not safetensors and
// an unknown want ("") are left as they are, for the node to judge.
func toRunDtype(stderr io.Writer, flag, path, want string, noConvert bool) (string, func(), error) {
	nothing := func() {}
	if want == "" {
		return path, nothing, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", nothing, usageError{fmt.Errorf("--%s: %w", flag, err)}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", nothing, fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	if st.Size() > maxPayloadFile {
		return "", nothing, fmt.Errorf("--%s %s: %d bytes, limit %d", flag, path, st.Size(), int64(maxPayloadFile))
	}
	tensors, _, err := safetensors.ParseHeaderAt(f, st.Size(), safetensors.DefaultLimits)
	if err != nil {
		return path, nothing, nil // not safetensors: the node refuses it with its own reason
	}
	var f32, bf16 int
	var firstF32, firstBF16 string
	for _, t := range tensors {
		switch t.Dtype {
		case "F32":
			if f32++; f32 == 1 {
				firstF32 = t.Name
			}
		case "BF16":
			if bf16++; bf16 == 1 {
				firstBF16 = t.Name
			}
		}
	}
	switch {
	case want == "F32" && bf16 > 0:
		return "", nothing, fmt.Errorf("--%s %s: %d tensor(s) are BF16 (first %q) but the run's dtype is F32: the CLI never widens BF16 to F32 (that would invent precision); send F32 values", flag, path, bf16, firstBF16)
	case want != "BF16" || f32 == 0:
		return path, nothing, nil
	case noConvert:
		return "", nothing, fmt.Errorf("--%s %s: %d tensor(s) are F32 (first %q) but the run's dtype is BF16; --no-convert refuses to round them (drop it to convert, or send BF16)", flag, path, f32, firstF32)
	}
	tmp, err := os.CreateTemp("", "tenzro-bf16-*.safetensors")
	if err != nil {
		return "", nothing, fmt.Errorf("convert --%s: %w", flag, err)
	}
	remove := func() { _ = os.Remove(tmp.Name()) }
	w := bufio.NewWriterSize(tmp, 1<<20)
	n, err := safetensors.ToBF16To(w, f, st.Size(), safetensors.DefaultLimits)
	if err == nil {
		err = w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		remove()
		return "", nothing, fmt.Errorf("convert --%s %s to BF16: %w", flag, path, err)
	}
	fmt.Fprintf(stderr, "converted --%s %s: %d F32 tensor(s) rounded to BF16 (nearest, ties to even), the run's dtype; --no-convert refuses instead\n", flag, path, n)
	return tmp.Name(), remove, nil
}
