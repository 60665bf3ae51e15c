// Package safetensors reads and writes the safetensors tensor-file format
// (https://github.com/huggingface/safetensors) strictly: an 8-byte
// little-endian header length N, N bytes of JSON header, then the tensor
// data.
//
// Parse accepts a file only if every byte is accounted for: a JSON object
// without duplicate keys, each entry exactly {dtype, shape, data_offsets}
// with a known dtype and a byte size equal to prod(shape)·sizeof(dtype), the
// data regions tiling the data section from 0 to its end without overlap or
// holes, and an optional __metadata__ string→string map. Tensors come back
// sorted by name, their Data sub-slices of the input (no copy).
//
// Encode writes the canonical form that two implementations agree on byte
// for byte (docs/protocol/safetensors.md): header keys sorted bytewise,
// compact JSON, entry keys in the order dtype, shape, data_offsets,
// __metadata__ first, header padded with spaces to a multiple of 8, data in
// name order. For ASCII names this is exactly what Python's json.dumps
// writer (separators (",", ":")) produces for tensors given in name order.
//
// The package also converts between F32 tensors and []float32, and between
// float32 and bfloat16 (round to nearest even; exact widening).
package safetensors
