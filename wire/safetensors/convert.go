package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// F32Values decodes a tensor's elements as float32: F32 as is, BF16 and F16
// widened exactly. Other dtypes (F64 would lose precision) are refused.
func F32Values(t Tensor) ([]float32, error) {
	size, err := byteSize(t.Dtype, t.Shape)
	if err != nil {
		return nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	if size != int64(len(t.Data)) {
		return nil, fmt.Errorf("%w: tensor %q: %s %v needs %d bytes, has %d", ErrLayout, t.Name, t.Dtype, t.Shape, size, len(t.Data))
	}
	switch t.Dtype {
	case "F32":
		out := make([]float32, len(t.Data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
		return out, nil
	case "BF16":
		out := make([]float32, len(t.Data)/2)
		for i := range out {
			out[i] = BF16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
		return out, nil
	case "F16":
		out := make([]float32, len(t.Data)/2)
		for i := range out {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: tensor %q: dtype %s does not convert to float32 exactly", ErrDtype, t.Name, t.Dtype)
}

// FromF32 builds an F32 tensor (little-endian). The caller keeps
// prod(shape) == len(v); Encode refuses a tensor where it does not hold.
func FromF32(name string, shape []int64, v []float32) Tensor {
	data := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(f))
	}
	return Tensor{Name: name, Dtype: "F32", Shape: append([]int64{}, shape...), Data: data}
}

// FromF32AsBF16 builds a BF16 tensor, rounding each value with F32ToBF16.
func FromF32AsBF16(name string, shape []int64, v []float32) Tensor {
	data := make([]byte, 2*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint16(data[2*i:], F32ToBF16(f))
	}
	return Tensor{Name: name, Dtype: "BF16", Shape: append([]int64{}, shape...), Data: data}
}

// F32ToBF16 rounds f to bfloat16 bits, to nearest with ties to even. NaNs
// stay NaN (quiet, sign kept); overflow rounds to ±Inf as IEEE 754 does.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 widens bfloat16 bits to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F16ToF32 widens IEEE 754 binary16 bits to float32 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // ±0
		return math.Float32frombits(sign)
	}
	// Subnormal: man·2^-24.
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// ToBF16To writes the safetensors file of size bytes read through r to w
// with every F32 tensor rounded to BF16 (F32ToBF16: to nearest, ties to
// even), streaming the data; other tensors and the metadata are kept, and
// the output is in canonical form. It returns how many tensors it rounded:
// with none it writes nothing (use the original file as it is).
func ToBF16To(w io.Writer, r io.ReaderAt, size int64, lim Limits) (int, error) {
	tensors, md, err := ParseHeaderAt(r, size, lim)
	if err != nil {
		return 0, err
	}
	ts := make([]Tensor, len(tensors))
	at := make(map[string]TensorAt, len(tensors))
	converted := 0
	for i, t := range tensors {
		ts[i] = Tensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape}
		if t.Dtype == "F32" {
			ts[i].Dtype = "BF16"
			converted++
		}
		at[t.Name] = t
	}
	if converted == 0 {
		return 0, nil
	}
	sorted, h, _, err := encodeHeaderOf(ts, md, false)
	if err != nil {
		return 0, err
	}
	if _, err := w.Write(h); err != nil {
		return 0, err
	}
	const chunk = 1 << 16 // F32 values per read
	in := make([]byte, 4*chunk)
	out := make([]byte, 2*chunk)
	for _, t := range sorted {
		src := at[t.Name]
		if src.Dtype != "F32" {
			if _, err := io.Copy(w, io.NewSectionReader(r, src.Offset, src.Len)); err != nil {
				return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			continue
		}
		for off := int64(0); off < src.Len; {
			n := min(int64(len(in)), src.Len-off)
			if _, err := r.ReadAt(in[:n], src.Offset+off); err != nil {
				return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			for i := int64(0); i < n/4; i++ {
				binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))))
			}
			if _, err := w.Write(out[:n/2]); err != nil {
				return 0, err
			}
			off += n
		}
	}
	return converted, nil
}
