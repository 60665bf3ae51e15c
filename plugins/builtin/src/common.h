/* Shared helpers for the built-in rules (not part of the public C SDK). */
#ifndef TZ_BUILTIN_COMMON_H
#define TZ_BUILTIN_COMMON_H
#include "../../sdk/c/tenzro_plugin.h"
#include <wasm_simd128.h>

#define TZ_MAX_K 256u

/* Loads 4 consecutive f32 starting at p; only `valid` lanes are read, the
 * others are zero (used for the tail of a fragment). */
static inline v128_t tz_load4(const float *p, uint32_t valid) {
  if (valid >= 4) return wasm_v128_load(p);
  float t[4] = {0, 0, 0, 0};
  for (uint32_t i = 0; i < valid; i++) t[i] = p[i];
  return wasm_v128_load(t);
}
static inline void tz_store4(float *p, v128_t v, uint32_t valid) {
  if (valid >= 4) {
    wasm_v128_store(p, v);
    return;
  }
  float t[4];
  wasm_v128_store(t, v);
  for (uint32_t i = 0; i < valid; i++) p[i] = t[i];
}

/* Non-finite values (ABI.md §11). Every comparison of values in the built-in
 * rules uses one total order: -Inf < negative < -0 < +0 < positive < +Inf <
 * NaN, with every NaN equal (canonicalised to 0x7fc00000 before sorting).
 * So a sorted coordinate, and every order statistic taken from it, depends
 * only on the multiset of the K values, never on which input holds which. */

/* The f32 bits as an i32 key that orders as above (an involution). */
static inline v128_t tz_key(v128_t v) {
  return wasm_v128_xor(v, wasm_v128_and(wasm_i32x4_shr(v, 31), wasm_i32x4_splat(0x7fffffff)));
}
static inline v128_t tz_canon_nan(v128_t v) {
  return wasm_v128_bitselect(wasm_i32x4_splat(0x7fc00000), v, wasm_f32x4_ne(v, v));
}

/* Compare-exchange of keys: swaps lanes where b < a (stable). */
static inline void tz_cx(v128_t *a, v128_t *b) {
  v128_t m = wasm_i32x4_lt(*b, *a);
  v128_t lo = wasm_v128_bitselect(*b, *a, m);
  v128_t hi = wasm_v128_bitselect(*a, *b, m);
  *a = lo;
  *b = hi;
}

/* Odd-even transposition sort of k vectors, lane-wise ascending in the
 * total order (NaN last, canonical). */
static inline void tz_sort_lanes(v128_t *v, uint32_t k) {
  for (uint32_t i = 0; i < k; i++) v[i] = tz_key(tz_canon_nan(v[i]));
  for (uint32_t r = 0; r < k; r++)
    for (uint32_t i = r & 1u; i + 1 < k; i += 2) tz_cx(&v[i], &v[i + 1]);
  for (uint32_t i = 0; i < k; i++) v[i] = tz_key(v[i]);
}

/* a before b in the same total order for f64 scores and distances (NaN
 * last): how Krum, MultiKrum and Bulyan rank neighbours and inputs, so a
 * non-finite input gets a non-finite score and is never preferred to a
 * finite one, wherever it sits. */
static inline int tz_dless(double a, double b) { return a < b || (b != b && a == a); }

/* f64 lane helpers: a f32x4 as two f64x2. */
static inline v128_t tz_lo64(v128_t v) { return wasm_f64x2_promote_low_f32x4(v); }
static inline v128_t tz_hi64(v128_t v) { return wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 0, 1)); }
static inline v128_t tz_join32(v128_t lo, v128_t hi) {
  v128_t a = wasm_f32x4_demote_f64x2_zero(lo);
  v128_t b = wasm_f32x4_demote_f64x2_zero(hi);
  return wasm_i32x4_shuffle(a, b, 0, 1, 4, 5);
}

/* Chunked mode (ABI.md §6): a fragment may arrive as consecutive coordinate
 * ranges whose starts are multiples of 1024. Every reduction over
 * coordinates below keeps its running sums as four f64 lanes (lane l sums
 * the coordinates c with c mod 4 = l, in ascending c) and the host carries
 * those lanes from chunk to chunk untouched, so a chunked run adds exactly
 * the same numbers in exactly the same order as a whole one: the lanes are
 * only folded (lane0+lane1)+(lane2+lane3)... at the very end. A tail of
 * fewer than 4 coordinates is padded with zeros, which adds +0.0 to a sum of
 * squares (never -0.0), leaving it unchanged. */

/* Four f64 lanes of a running sum, as two f64x2: a = lanes 0,1; b = 2,3. */
typedef struct {
  v128_t a, b;
} tz_lanes;

/* Folds the lanes: (a+b) then lane 0 + lane 1, the order every built-in has
 * always used. */
static inline double tz_fold(tz_lanes l) {
  v128_t s = wasm_f64x2_add(l.a, l.b);
  return wasm_f64x2_extract_lane(s, 0) + wasm_f64x2_extract_lane(s, 1);
}

/* Adds ||a - b||^2 over n coordinates to the lanes (b may be NULL: ||a||^2). */
static inline void tz_sqdist_accum(const float *a, const float *b, uint32_t n, tz_lanes *l) {
  v128_t s0 = l->a, s1 = l->b;
  for (uint32_t c = 0; c < n; c += 4) {
    uint32_t valid = n - c;
    v128_t va = tz_load4(a + c, valid);
    v128_t d0 = tz_lo64(va), d1 = tz_hi64(va);
    if (b) {
      v128_t vb = tz_load4(b + c, valid);
      d0 = wasm_f64x2_sub(d0, tz_lo64(vb));
      d1 = wasm_f64x2_sub(d1, tz_hi64(vb));
    }
    s0 = wasm_f64x2_add(s0, wasm_f64x2_mul(d0, d0));
    s1 = wasm_f64x2_add(s1, wasm_f64x2_mul(d1, d1));
  }
  l->a = s0;
  l->b = s1;
}

static inline uint32_t tz_npairs(uint32_t k) { return k * (k - 1) / 2; }

/* Adds this chunk's squared differences of every pair (i<j, in order
 * (0,1),(0,2),...,(1,2),...) to acc (one tz_lanes per pair). Coordinates are
 * visited in blocks of 2048 for cache locality; the block size does not
 * change the arithmetic (each lane still sums its coordinates in order). */
static void tz_pair_accum(const float *x, uint32_t k, uint32_t n, tz_lanes *acc) {
  const uint32_t B = 2048;
  for (uint32_t c0 = 0; c0 < n; c0 += B) {
    uint32_t c1 = c0 + B < n ? c0 + B : n;
    uint32_t p = 0;
    for (uint32_t i = 0; i < k; i++)
      for (uint32_t j = i + 1; j < k; j++, p++) {
        const float *a = x + (uint64_t)i * n, *b = x + (uint64_t)j * n;
        tz_sqdist_accum(a + c0, b + c0, c1 - c0, &acc[p]);
      }
  }
}

/* The K x K squared-distance matrix from finished pair lanes:
 * d[i*k+j] = d[j*k+i], d[i*k+i] = 0. */
static void tz_pair_finish(const tz_lanes *acc, uint32_t k, double *d) {
  uint32_t p = 0;
  for (uint32_t i = 0; i < k; i++) {
    d[i * k + i] = 0;
    for (uint32_t j = i + 1; j < k; j++, p++) {
      double v = tz_fold(acc[p]);
      d[i * k + j] = v;
      d[j * k + i] = v;
    }
  }
}

static inline void tz_lanes_zero(tz_lanes *l, uint32_t count) {
  for (uint32_t i = 0; i < count; i++) l[i].a = l[i].b = wasm_f64x2_splat(0.0);
}

/* Chunk-call geometry shared by the chunked entry points: c0 is the first
 * coordinate of the chunk, ntotal the fragment's length. */
static inline int32_t tz_check_chunk(uint32_t n, uint32_t c0, uint32_t ntotal) {
  if ((c0 & 3u) != 0 || (uint64_t)c0 + n > ntotal) return tz_fail(TZ_ERR_PARAMS, "chunk outside the fragment or misaligned");
  return TZ_OK;
}

/* Writes the chunk plan (ABI.md §6): passes, carry bytes. */
static inline void tz_plan(uint32_t *plan, uint32_t passes, uint32_t carry) {
  plan[0] = passes;
  plan[1] = carry;
}

/* Krum score of input i over the members of set (mask[j] != 0): the sum of
 * its nb smallest squared distances to the other members, ascending order. */
static double tz_krum_score(const double *d, uint32_t k, uint32_t i, const uint8_t *mask, uint32_t nb) {
  double v[TZ_MAX_K];
  uint32_t m = 0;
  for (uint32_t j = 0; j < k; j++)
    if (j != i && mask[j]) {
      double x = d[i * k + j];
      uint32_t q = m++;
      while (q > 0 && tz_dless(x, v[q - 1])) { v[q] = v[q - 1]; q--; }
      v[q] = x;
    }
  double s = 0;
  for (uint32_t q = 0; q < nb && q < m; q++) s += v[q];
  return s;
}

/* Number of neighbours Krum sums over: K-f-2 (Blanchard et al.), at least 1
 * (the same clamp as Flower's aggregate_krum). */
static inline uint32_t tz_krum_nb(uint32_t members, uint32_t f) {
  int64_t nb = (int64_t)members - (int64_t)f - 2;
  return nb < 1 ? 1u : (uint32_t)nb;
}

static inline int32_t tz_check_common(uint32_t dtype, uint32_t k, uint32_t n) {
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  if (k == 0 || k > TZ_MAX_K) return tz_fail(TZ_ERR_TOO_FEW, "K must be in 1..256");
  if (n == 0) return tz_fail(TZ_ERR_PARAMS, "N must be positive");
  return TZ_OK;
}

/* Copies input idx as f32 into out. */
static inline void tz_copy_input(const float *x, uint32_t n, uint32_t idx, float *out) {
  __builtin_memcpy(out, x + (uint64_t)idx * n, (size_t)n * 4);
}
#endif
