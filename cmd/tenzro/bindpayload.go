package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/tenzro/train/wire/safetensors"
)

// bindPayloadFile returns the path of the payload to submit: path itself
// when it is bound to b already, else a temporary file holding it stamped
// with b (safetensors.md §6), removed by cleanup. A payload bound to
// another trainer, task, round or fragment is refused: signing it would be
// a copy, which the node refuses too.
func bindPayloadFile(path string, b safetensors.Binding) (string, func(), error) {
	nothing := func() {}
	if path == "" {
		return "", nothing, usagef("--payload is required")
	}
	f, err := os.Open(path)
	if err != nil {
		return "", nothing, usageError{fmt.Errorf("--payload: %w", err)}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", nothing, fmt.Errorf("--payload %s: %w", path, err)
	}
	if st.Size() > maxPayloadFile {
		return "", nothing, fmt.Errorf("--payload %s: %d bytes, limit %d", path, st.Size(), int64(maxPayloadFile))
	}
	tmp, err := os.CreateTemp("", "tenzro-payload-*.safetensors")
	if err != nil {
		return "", nothing, fmt.Errorf("stamp --payload: %w", err)
	}
	remove := func() { _ = os.Remove(tmp.Name()) }
	w := bufio.NewWriterSize(tmp, 1<<20)
	wrote, err := safetensors.BindTo(w, f, st.Size(), b, safetensors.DefaultLimits)
	if err == nil && wrote {
		err = w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		remove()
		return "", nothing, fmt.Errorf("--payload %s: %w", path, err)
	}
	if !wrote {
		remove()
		return path, nothing, nil
	}
	return tmp.Name(), remove, nil
}
