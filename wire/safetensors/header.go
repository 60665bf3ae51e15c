package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// TensorAt is a tensor of a stored file, located but not read: its data is
// the Len bytes at Offset from the start of the file.
type TensorAt struct {
	Name   string
	Dtype  string
	Shape  []int64
	Offset int64
	Len    int64
}

// ParseHeaderAt reads and checks the header of a safetensors file of size
// bytes through r, exactly as Parse does, without reading tensor data. The
// tensors come sorted by name.
func ParseHeaderAt(r io.ReaderAt, size int64, lim Limits) (tensors []TensorAt, metadata map[string]string, err error) {
	lim = lim.withDefaults()
	if size < 8 {
		return nil, nil, fmt.Errorf("%w: %d bytes, need at least 8 for the header length", ErrShort, size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, nil, fmt.Errorf("%w: reading the header length: %v", ErrShort, err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > uint64(lim.MaxHeader) {
		return nil, nil, fmt.Errorf("%w: header length %d, limit %d", ErrLimit, n, lim.MaxHeader)
	}
	if n > uint64(size-8) {
		return nil, nil, fmt.Errorf("%w: header length %d beyond the file's %d bytes after the length", ErrShort, n, size-8)
	}
	header := make([]byte, n)
	if _, err := r.ReadAt(header, 8); err != nil {
		return nil, nil, fmt.Errorf("%w: reading the header: %v", ErrShort, err)
	}
	entries, metadata, err := parseHeader(header, lim)
	if err != nil {
		return nil, nil, err
	}
	if err := checkLayout(entries, size-8-int64(n), lim); err != nil {
		return nil, nil, err
	}
	base := 8 + int64(n)
	tensors = make([]TensorAt, len(entries))
	for i, e := range entries {
		tensors[i] = TensorAt{Name: e.Name, Dtype: e.Dtype, Shape: e.Shape, Offset: base + e.begin, Len: e.end - e.begin}
	}
	slices.SortFunc(tensors, func(a, b TensorAt) int { return cmpString(a.Name, b.Name) })
	return tensors, metadata, nil
}

// Header returns the header (with its 8-byte length) that Encode and
// EncodeTo write for tensors, whose Data is not read, and the tensors in
// the order their data follows it (sorted by name).
func Header(tensors []Tensor, metadata map[string]string) (header []byte, sorted []Tensor, err error) {
	sorted, h, _, err := encodeHeaderOf(tensors, metadata, false)
	if err != nil {
		return nil, nil, err
	}
	return h, sorted, nil
}

// EncodeTo writes what Encode returns to w — the header, then each tensor's
// data from its own slice — without assembling the file in memory (a
// fragment's new weights are written once, hashed as they go).
func EncodeTo(w io.Writer, tensors []Tensor, metadata map[string]string) (int64, error) {
	sorted, h, _, err := encodeHeader(tensors, metadata)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(h)
	total := int64(n)
	for _, t := range sorted {
		if err != nil {
			return total, err
		}
		n, err = w.Write(t.Data)
		total += int64(n)
	}
	return total, err
}
