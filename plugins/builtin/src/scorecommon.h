/* Shared code of the built-in "score" evaluators (TimesFMScore,
 * GraniteTTMScore, ChronosBoltScore; ABI.md §4.2, docs/protocol/scoring.md):
 * the error-message builder, the host's tensor table and the lookup of a
 * named tensor of a given shape in it, the reference linear layer (a dot in
 * four f32 lanes folded as (l0 + l2) + (l1 + l3)), LayerNorm, the window
 * normalization (data._normalize), the overflow-checked allocation and
 * tenzro_score's table prologue (TZ_SCORE_BIND_TABLE).
 *
 * Every function is static, as it was in each evaluator before this header:
 * each module still compiles to the same bytes (plugins/builtin/build.sh,
 * then cmp against plugins/builtin/wasm/; docs/RATIONALE.md, "the evaluators
 * share scorecommon.h"). An evaluator whose arithmetic differs keeps its
 * own version (ChronosBoltScore: `linear` for layers with or without a
 * bias, after #define TZ_SCORE_OWN_LINEAR; `dot`; RMS norm). */
#ifndef TZ_SCORECOMMON_H
#define TZ_SCORECOMMON_H
#include "common.h"
#include "detmath.h"

/* Score error codes (rule-specific range, ABI.md §5). */
#define TZ_ERR_LAYOUT 104 /* a tensor is missing, extra or of the wrong shape */
#define TZ_ERR_WINDOW 105 /* window length or count does not match */

/* Message builder: error texts name the tensor and the numbers. */
static char tz_msg[256];
static uint32_t tz_msg_len;
static void m_str(const char *s) {
  while (*s && tz_msg_len < sizeof(tz_msg) - 1) tz_msg[tz_msg_len++] = *s++;
  tz_msg[tz_msg_len] = 0;
}
static void m_u64(uint64_t v) {
  char d[24];
  int i = 0;
  do d[i++] = (char)('0' + v % 10), v /= 10;
  while (v);
  while (i && tz_msg_len < sizeof(tz_msg) - 1) tz_msg[tz_msg_len++] = d[--i];
  tz_msg[tz_msg_len] = 0;
}
static void m_reset(void) { tz_msg_len = 0, tz_msg[0] = 0; }
static int32_t m_fail(int32_t code) { return tz_fail(code, tz_msg); }

/* One entry of the host's tensor table (ABI.md §4.2): 8 u32. */
typedef struct {
  uint32_t name_ptr, name_len, off, ndim, dim[4];
} tz_tentry;

/* A linear layer [out, in]; b = 0: no bias (ChronosBoltScore's T5 stacks;
 * only its own linear reads such a layer). */
typedef struct {
  const float *w, *b;
  uint32_t out, in;
} lin_t;
/* A LayerNorm's weight and bias. */
typedef struct {
  const float *g, *b;
} ln_t;

/* Table lookup state. */
static const tz_tentry *g_tab;
static uint32_t g_ntab;
static uint8_t *g_used;
static float *g_wf;

static int name_eq(const tz_tentry *t, const char *s) {
  const char *n = (const char *)(uintptr_t)t->name_ptr;
  uint32_t i = 0;
  for (; i < t->name_len; i++)
    if (s[i] == 0 || s[i] != n[i]) return 0;
  return s[i] == 0;
}

/* Finds `name` with shape (d0[, d1]) (d1 = 0: one dimension). */
static int32_t find(const char *name, uint32_t d0, uint32_t d1, const float **out) {
  for (uint32_t i = 0; i < g_ntab; i++) {
    const tz_tentry *t = &g_tab[i];
    if (!name_eq(t, name)) continue;
    uint32_t nd = d1 ? 2u : 1u;
    if (t->ndim != nd || t->dim[0] != d0 || (d1 && t->dim[1] != d1)) {
      m_reset();
      m_str("tensor ");
      m_str(name);
      m_str(" has the wrong shape for the parameters (want [");
      m_u64(d0);
      if (d1) {
        m_str(", ");
        m_u64(d1);
      }
      m_str("])");
      return m_fail(TZ_ERR_LAYOUT);
    }
    g_used[i] = 1;
    *out = g_wf + t->off;
    return TZ_OK;
  }
  m_reset();
  m_str("tensor ");
  m_str(name);
  m_str(" is missing");
  return m_fail(TZ_ERR_LAYOUT);
}

/* name = a ‖ b ‖ c into buf (160 bytes). */
static const char *cat3(char *buf, const char *a, const char *b, const char *c) {
  uint32_t i = 0;
  while (*a && i < 159) buf[i++] = *a++;
  while (*b && i < 159) buf[i++] = *b++;
  while (*c && i < 159) buf[i++] = *c++;
  buf[i] = 0;
  return buf;
}

/* (l0 + l2) + (l1 + l3) */
static inline float fold4(v128_t a) {
  v128_t s = wasm_f32x4_add(a, wasm_i32x4_shuffle(a, a, 2, 3, 0, 1));
  return wasm_f32x4_extract_lane(s, 0) + wasm_f32x4_extract_lane(s, 1);
}

#ifndef TZ_SCORE_OWN_LINEAR /* ChronosBoltScore defines its own (bias-less layers) */
/* One output's dot with one row, accumulated in four lanes (the reference
 * order every blocking below reproduces exactly). */
static inline v128_t dot1(const float *w, const float *x, uint32_t body, uint32_t tail) {
  v128_t a = wasm_f32x4_splat(0);
  for (uint32_t c = 0; c < body; c += 4) a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(w + c), wasm_v128_load(x + c)));
  if (tail) a = wasm_f32x4_add(a, wasm_f32x4_mul(tz_load4(w + body, tail), tz_load4(x + body, tail)));
  return a;
}

/* y[r][o] = b[o] + dot(W[o], x[r]) for rows r < R (x rows of l->in, y rows of
 * l->out). Blocks of four rows × two outputs share their loads (eight
 * accumulators); the arithmetic of every output is dot1's whatever the
 * blocking, so the bits do not depend on it. */
static void linear(const float *x, uint32_t R, const lin_t *l, float *y) {
  const uint32_t in = l->in, out = l->out, body = in & ~3u, tail = in - body;
  const v128_t z = wasm_f32x4_splat(0);
  uint32_t r = 0;
  for (; r + 4 <= R; r += 4) {
    const float *x0 = x + (size_t)r * in, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
    float *y0 = y + (size_t)r * out;
    uint32_t o = 0;
    for (; o + 2 <= out; o += 2) {
      const float *w = l->w + (size_t)o * in, *u = w + in;
      v128_t a0 = z, a1 = z, a2 = z, a3 = z, b0 = z, b1 = z, b2 = z, b3 = z;
      for (uint32_t c = 0; c < body; c += 4) {
        v128_t wv = wasm_v128_load(w + c), uv = wasm_v128_load(u + c);
        v128_t v0 = wasm_v128_load(x0 + c), v1 = wasm_v128_load(x1 + c);
        v128_t v2 = wasm_v128_load(x2 + c), v3 = wasm_v128_load(x3 + c);
        a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(wv, v0));
        a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(wv, v1));
        a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(wv, v2));
        a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(wv, v3));
        b0 = wasm_f32x4_add(b0, wasm_f32x4_mul(uv, v0));
        b1 = wasm_f32x4_add(b1, wasm_f32x4_mul(uv, v1));
        b2 = wasm_f32x4_add(b2, wasm_f32x4_mul(uv, v2));
        b3 = wasm_f32x4_add(b3, wasm_f32x4_mul(uv, v3));
      }
      if (tail) {
        v128_t wv = tz_load4(w + body, tail), uv = tz_load4(u + body, tail);
        v128_t v0 = tz_load4(x0 + body, tail), v1 = tz_load4(x1 + body, tail);
        v128_t v2 = tz_load4(x2 + body, tail), v3 = tz_load4(x3 + body, tail);
        a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(wv, v0));
        a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(wv, v1));
        a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(wv, v2));
        a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(wv, v3));
        b0 = wasm_f32x4_add(b0, wasm_f32x4_mul(uv, v0));
        b1 = wasm_f32x4_add(b1, wasm_f32x4_mul(uv, v1));
        b2 = wasm_f32x4_add(b2, wasm_f32x4_mul(uv, v2));
        b3 = wasm_f32x4_add(b3, wasm_f32x4_mul(uv, v3));
      }
      float bw = l->b[o], bu = l->b[o + 1];
      y0[o] = bw + fold4(a0), y0[o + 1] = bu + fold4(b0);
      y0[out + o] = bw + fold4(a1), y0[out + o + 1] = bu + fold4(b1);
      y0[2 * out + o] = bw + fold4(a2), y0[2 * out + o + 1] = bu + fold4(b2);
      y0[3 * out + o] = bw + fold4(a3), y0[3 * out + o + 1] = bu + fold4(b3);
    }
    for (; o < out; o++) {
      const float *w = l->w + (size_t)o * in;
      y0[o] = l->b[o] + fold4(dot1(w, x0, body, tail));
      y0[out + o] = l->b[o] + fold4(dot1(w, x1, body, tail));
      y0[2 * out + o] = l->b[o] + fold4(dot1(w, x2, body, tail));
      y0[3 * out + o] = l->b[o] + fold4(dot1(w, x3, body, tail));
    }
  }
  for (; r < R; r++) {
    const float *x0 = x + (size_t)r * in;
    float *y0 = y + (size_t)r * out;
    for (uint32_t o = 0; o < out; o++) y0[o] = l->b[o] + fold4(dot1(l->w + (size_t)o * in, x0, body, tail));
  }
}
#endif

/* torch.nn.LayerNorm(d), eps 1e-5: biased variance, f64 statistics. */
static void layernorm(const float *x, uint32_t R, uint32_t d, const ln_t *l, float *y) {
  for (uint32_t r = 0; r < R; r++) {
    const float *xr = x + (size_t)r * d;
    float *yr = y + (size_t)r * d;
    double s = 0;
    for (uint32_t i = 0; i < d; i++) s += (double)xr[i];
    double mean = s / (double)d, v = 0;
    for (uint32_t i = 0; i < d; i++) {
      double t = (double)xr[i] - mean;
      v += t * t;
    }
    double rstd = 1.0 / __builtin_sqrt(v / (double)d + 1e-5);
    for (uint32_t i = 0; i < d; i++)
      yr[i] = (float)((((double)xr[i] - mean) * rstd) * (double)l->g[i] + (double)l->b[i]);
  }
}

/* data._normalize: by the context's mean and population standard deviation
 * (floored at 1e-3·max(|mean|, 1)), in f64, rounded to f32. */
static int32_t normalize(const float *raw, uint32_t C, uint32_t W, float *out, uint32_t idx) {
  double s = 0;
  for (uint32_t i = 0; i < W; i++)
    if (!tz_is_finite(raw[i])) {
      m_reset();
      m_str("window ");
      m_u64(idx);
      m_str(" has a non-finite value at ");
      m_u64(i);
      return m_fail(TZ_ERR_NONFINITE);
    }
  for (uint32_t i = 0; i < C; i++) s += (double)raw[i];
  double mu = s / (double)C, v = 0;
  for (uint32_t i = 0; i < C; i++) {
    double t = (double)raw[i] - mu;
    v += t * t;
  }
  double sd = __builtin_sqrt(v / (double)C);
  double am = mu < 0 ? -mu : mu;
  double floor = 1e-3 * (am > 1.0 ? am : 1.0);
  if (sd < floor) sd = floor;
  for (uint32_t i = 0; i < W; i++) out[i] = (float)(((double)raw[i] - mu) / sd);
  return TZ_OK;
}

static void *alloc_n(uint64_t count, uint32_t size) {
  if (count == 0 || count > 0xFFFFFFF0ull / size) return 0;
  return tz_alloc((uint32_t)(count * size));
}

/* The start of every evaluator's tenzro_score, after its parameter checks:
 * the host's tensor table (contiguous tensors in canonical order, 1 to 4
 * dimensions, at most 2^30 values; the fragment's tensor range inside it)
 * and the f32 weights (BF16 widened exactly into a copy). A statement macro,
 * not a function: it reads tenzro_score's parameters by name (dtype,
 * ntensors, table, weights, frag_first, frag_count), declares tab, total
 * and g0, g1 (the fragment's value range) in it, and returns from it with
 * the error. As a helper function, even always_inline, clang 14 lays out
 * the inlined code differently and every score module's bytes change
 * (docs/RATIONALE.md). */
#define TZ_SCORE_BIND_TABLE()                                                                                             \
  const tz_tentry *tab = (const tz_tentry *)table;                                                                        \
  uint64_t total = 0;                                                                                                     \
  for (uint32_t i = 0; i < ntensors; i++) {                                                                               \
    uint64_t sz = 1;                                                                                                      \
    if (tab[i].ndim == 0 || tab[i].ndim > 4) return tz_fail(TZ_ERR_LAYOUT, "a tensor has 0 or more than 4 dimensions");   \
    for (uint32_t d = 0; d < tab[i].ndim; d++) sz *= tab[i].dim[d];                                                       \
    if (tab[i].off != total) return tz_fail(TZ_ERR_LAYOUT, "tensor offsets are not contiguous");                          \
    total += sz;                                                                                                          \
    if (total > 0x3FFFFFFFull) return tz_fail(TZ_ERR_LAYOUT, "the model has more than 2^30 values");                      \
  }                                                                                                                       \
  if (frag_count == 0 || frag_first >= ntensors || frag_count > ntensors - frag_first)                                    \
    return tz_fail(TZ_ERR_LAYOUT, "the fragment's tensor range is outside the table");                                    \
  uint32_t g0 = tab[frag_first].off;                                                                                      \
  uint32_t g1 = frag_first + frag_count < ntensors ? tab[frag_first + frag_count].off : (uint32_t)total;                  \
  /* f32 weights (BF16 widened exactly into a copy). */                                                                   \
  g_tab = tab, g_ntab = ntensors;                                                                                         \
  g_used = (uint8_t *)alloc_n(ntensors, 1);                                                                               \
  if (!g_used) return tz_fail(TZ_ERR_NOMEM, "out of memory");                                                             \
  __builtin_memset(g_used, 0, ntensors);                                                                                  \
  if (dtype == TZ_F32) {                                                                                                  \
    g_wf = (float *)weights;                                                                                              \
  } else {                                                                                                                \
    g_wf = (float *)alloc_n(total, 4);                                                                                    \
    if (!g_wf) return tz_fail(TZ_ERR_NOMEM, "out of memory for the f32 weights");                                         \
    const uint16_t *h = (const uint16_t *)weights;                                                                        \
    for (uint64_t i = 0; i < total; i++) g_wf[i] = tz_bf16_to_f32(h[i]);                                                  \
  }

#endif
