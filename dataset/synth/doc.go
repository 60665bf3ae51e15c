// Package synth owns the synth:// dataset refs: synthetic corpora (KernelSynth
// with TSMixup) that trainers and evaluators generate window by window from
// (generator version, seed, split, index) with the reference generator in
// trainer/src/tenzro_trainer/synth.py. The node never generates data; this
// package parses a ref strictly and computes its dataset_hash (the hash of
// the generator's definition), so a posting whose hash does not match its ref
// is refused (CheckRef). It imports only wire, so the state machine can use it.
// Vectors shared with Python: ../testdata/synth_vectors.json.
package synth
