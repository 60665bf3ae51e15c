/* GraniteTTMScore: the evaluator of the Granite-TTM reference family
 * (trainer/src/tenzro_trainer/models/granite_ttm.py: granite-tsfm 0.3.11's
 * TinyTimeMixerForPrediction as that adapter configures it; Ekambaram et al.
 * 2024, "Tiny Time Mixers"), an ABI v3 "score" plugin (ABI.md §4.2,
 * docs/protocol/scoring.md §2b).
 *
 * For one submitted outer gradient of one fragment it computes the model's
 * loss on each batch of windows before and after applying the gradient to the
 * round's start weights exactly as the outer step would with an empty
 * momentum buffer (the Nesterov built-in's first step), like TimesFMScore.
 *
 * The configuration is granite_ttm.py's: one channel, patch_stride =
 * patch_len, common-channel mode, LayerNorm mixers (eps 1e-5), gated
 * attention on (softmax gates), expansion factor 2, no self-attention, no
 * positional encoding, no register or FFT tokens, std scaling (minimum_scale
 * 1e-5), a decoder of decoder_d_model = max(8, d_model / 2) with an adapter
 * when that differs from d_model, a linear head, MSE loss. In eval mode
 * (every dropout is 0) the forward pass of one window is, operation for
 * operation:
 *   x  = the normalized context (data._normalize, as TimesFMScore)
 *   loc = mean(x), scale = sqrt(var(x) + 1e-5)      (TinyTimeMixerStdScaler)
 *   s  = (x - loc) / scale; patches [T, P] of s[C - T·P ..]  (T = C / P, floor)
 *   h  = patcher(patches)                             [T, D]
 *   per encoder layer (d = D), then adapter (if D != Dd), per decoder layer (d = Dd):
 *     if T > 1 (patch mixer, over the T axis of each of the d features):
 *       u = fc2(gelu(fc1(LN(h)ᵀ))); h = h + (u ⊙ softmax(gate(u)))ᵀ
 *     feature mixer: u = fc2(gelu(fc1(LN(h)))); h = h + u ⊙ softmax(gate(u))
 *   y  = head(flatten(h)) · scale + loc               [horizon]
 *   loss = mean over windows and k < horizon of (y[k] - target[k])²
 *          (target = the normalized target: GraniteTTM.loss, nn.MSELoss)
 *
 * Determinism: every sum has one fixed order. A linear layer's output is
 * bias + dot, the dot accumulated in four f32 lanes (lane l sums the products
 * of the inputs i ≡ l mod 4, ascending; a ragged tail adds +0) folded as
 * (l0 + l2) + (l1 + l3) — TimesFMScore's arithmetic; LayerNorm statistics,
 * the scaler, the softmax gates (max, e^(z − max), their sum), the
 * normalization and the loss are f64 sums in index order; exp and erf are
 * detmath.h's. No FMA contraction (-ffp-contract=off); tz_fmaf is an exactly
 * rounded FMA where the outer step has one. */
#define TZ_ABI_VERSION 3
#include "common.h"
#include "detmath.h"
#include "fmaf.h"

/* Score error codes (rule-specific range, ABI.md §5). */
#define TZ_ERR_LAYOUT 104 /* a tensor is missing, extra or of the wrong shape */
#define TZ_ERR_WINDOW 105 /* window length or count does not match */
#define TZ_ERR_CONFIG 106 /* a parameter combination this evaluator does not implement */

/* Parameters (manifest schema order; granite_ttm.py's metadata keys). */
enum { P_CONTEXT, P_HORIZON, P_PATCH, P_DMODEL, P_LAYERS, P_DEC_LAYERS, P_COUNT };

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

typedef struct {
  const float *w, *b;
  uint32_t out, in;
} lin_t;
typedef struct {
  const float *g, *b;
} ln_t;
/* One TinyTimeMixerLayer: the patch mixer (absent when T = 1) and the
 * feature mixer, each LayerNorm, MLP (fc1, fc2) and gate. */
typedef struct {
  ln_t pn, fn;
  lin_t pfc1, pfc2, pgate, ffc1, ffc2, fgate;
} mixer_t;
typedef struct {
  uint32_t C, H, P, D, Dd, L, LD, T, start, adapter;
  lin_t patcher, adapt, head;
  mixer_t *enc, *dec;
} model_t;

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

static int32_t find_lin(const char *prefix, const char *what, uint32_t out, uint32_t in, lin_t *l) {
  char nb[160];
  int32_t rc = find(cat3(nb, prefix, what, ".weight"), out, in, &l->w);
  if (!rc) rc = find(cat3(nb, prefix, what, ".bias"), out, 0, &l->b);
  l->out = out, l->in = in;
  return rc;
}

static int32_t find_ln(const char *prefix, const char *what, uint32_t d, ln_t *l) {
  char nb[160];
  int32_t rc = find(cat3(nb, prefix, what, ".weight"), d, 0, &l->g);
  if (!rc) rc = find(cat3(nb, prefix, what, ".bias"), d, 0, &l->b);
  return rc;
}

/* The layers of one TinyTimeMixerBlock: `<base>.<i>.{patch,feature}_mixer.*`. */
static int32_t bind_block(const char *base, uint32_t n, uint32_t d, uint32_t T, mixer_t *mx) {
  int32_t rc = TZ_OK;
  for (uint32_t l = 0; !rc && l < n; l++) {
    char pre[128];
    uint32_t i = 0;
    for (const char *s = base; *s && i < 100; s++) pre[i++] = *s;
    char dg[12];
    int nd = 0;
    uint32_t v = l;
    do dg[nd++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (nd) pre[i++] = dg[--nd];
    pre[i] = 0;
    mixer_t *y = &mx[l];
    if (T > 1) {
      rc = find_ln(pre, ".patch_mixer.norm.norm", d, &y->pn);
      if (!rc) rc = find_lin(pre, ".patch_mixer.mlp.fc1", 2 * T, T, &y->pfc1);
      if (!rc) rc = find_lin(pre, ".patch_mixer.mlp.fc2", T, 2 * T, &y->pfc2);
      if (!rc) rc = find_lin(pre, ".patch_mixer.gating_block.attn_layer", T, T, &y->pgate);
    }
    if (!rc) rc = find_ln(pre, ".feature_mixer.norm.norm", d, &y->fn);
    if (!rc) rc = find_lin(pre, ".feature_mixer.mlp.fc1", 2 * d, d, &y->ffc1);
    if (!rc) rc = find_lin(pre, ".feature_mixer.mlp.fc2", d, 2 * d, &y->ffc2);
    if (!rc) rc = find_lin(pre, ".feature_mixer.gating_block.attn_layer", d, d, &y->fgate);
  }
  return rc;
}

static int32_t bind_model(model_t *m) {
  int32_t rc = find_lin("net.backbone.encoder.patcher", "", m->D, m->P, &m->patcher);
  if (!rc) rc = bind_block("net.backbone.encoder.mlp_mixer_encoder.mixers.", m->L, m->D, m->T, m->enc);
  if (!rc && m->adapter) rc = find_lin("net.decoder.adapter", "", m->Dd, m->D, &m->adapt);
  if (!rc) rc = bind_block("net.decoder.decoder_block.mixers.", m->LD, m->Dd, m->T, m->dec);
  if (!rc) rc = find_lin("net.head.base_forecast_block", "", m->H, m->T * m->Dd, &m->head);
  if (rc) return rc;
  for (uint32_t i = 0; i < g_ntab; i++) {
    if (g_used[i]) continue;
    m_reset();
    m_str("tensor ");
    const char *n = (const char *)(uintptr_t)g_tab[i].name_ptr;
    for (uint32_t j = 0; j < g_tab[i].name_len && j < 120 && tz_msg_len < 200; j++) tz_msg[tz_msg_len++] = n[j];
    tz_msg[tz_msg_len] = 0;
    m_str(" is not part of the Granite-TTM model of granite_ttm.py with these parameters");
    return m_fail(TZ_ERR_LAYOUT);
  }
  return TZ_OK;
}

/* (l0 + l2) + (l1 + l3) */
static inline float fold4(v128_t a) {
  v128_t s = wasm_f32x4_add(a, wasm_i32x4_shuffle(a, a, 2, 3, 0, 1));
  return wasm_f32x4_extract_lane(s, 0) + wasm_f32x4_extract_lane(s, 1);
}

/* One output's dot with one row, accumulated in four lanes (the reference
 * order every blocking below reproduces exactly). */
static inline v128_t dot1(const float *w, const float *x, uint32_t body, uint32_t tail) {
  v128_t a = wasm_f32x4_splat(0);
  for (uint32_t c = 0; c < body; c += 4) a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(w + c), wasm_v128_load(x + c)));
  if (tail) a = wasm_f32x4_add(a, wasm_f32x4_mul(tz_load4(w + body, tail), tz_load4(x + body, tail)));
  return a;
}

/* y[r][o] = b[o] + dot(W[o], x[r]) for rows r < R (x rows of l->in, y rows of
 * l->out). Blocks of four rows × two outputs share their loads; the
 * arithmetic of every output is dot1's whatever the blocking. */
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

static void gelu_all(float *u, size_t n) {
  for (size_t i = 0; i < n; i++) u[i] = tz_gelu(u[i]);
}

/* TinyTimeMixerGatedAttention, softmax mode, in place over rows of n:
 * u ← u ⊙ softmax(z) with z the gate's logits (f64 max, e^(z − max) and sum
 * in index order; the gate rounded to f32, the product in f32 as torch's). */
static void gate_mul(float *u, const float *z, uint32_t R, uint32_t n, double *e) {
  for (uint32_t r = 0; r < R; r++) {
    float *ur = u + (size_t)r * n;
    const float *zr = z + (size_t)r * n;
    double mx = (double)zr[0];
    for (uint32_t i = 1; i < n; i++)
      if ((double)zr[i] > mx) mx = (double)zr[i];
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
      e[i] = tz_exp((double)zr[i] - mx);
      sum += e[i];
    }
    for (uint32_t i = 0; i < n; i++) ur[i] = ur[i] * (float)(e[i] / sum);
  }
}

/* Work buffers: R = windows·T rows; `wd` = max(D, Dd). */
typedef struct {
  float *x, *h, *g, *a, *u, *v, *z, *y;
  double *e; /* a gate row's exponentials: max(T, wd) */
} bufs_t;

/* One TinyTimeMixerLayer over h [nw·T, d], in place. */
static void mixer_layer(const mixer_t *y, float *h, uint32_t nw, uint32_t T, uint32_t d, const bufs_t *b) {
  const uint32_t R = nw * T;
  if (T > 1) { /* PatchMixerBlock: the MLP and gate run along the T axis of each feature */
    layernorm(h, R, d, &y->pn, b->a);
    for (uint32_t w = 0; w < nw; w++) /* transpose each window [T, d] → [d, T] */
      for (uint32_t t = 0; t < T; t++)
        for (uint32_t c = 0; c < d; c++) b->g[((size_t)w * d + c) * T + t] = b->a[((size_t)w * T + t) * d + c];
    const uint32_t Rt = nw * d;
    linear(b->g, Rt, &y->pfc1, b->u);
    gelu_all(b->u, (size_t)Rt * 2 * T);
    linear(b->u, Rt, &y->pfc2, b->v);
    linear(b->v, Rt, &y->pgate, b->z);
    gate_mul(b->v, b->z, Rt, T, b->e);
    for (uint32_t w = 0; w < nw; w++) /* transpose back, then the residual */
      for (uint32_t t = 0; t < T; t++)
        for (uint32_t c = 0; c < d; c++) {
          float *hp = &h[((size_t)w * T + t) * d + c];
          *hp = b->v[((size_t)w * d + c) * T + t] + *hp;
        }
  }
  /* FeatureMixerBlock */
  layernorm(h, R, d, &y->fn, b->a);
  linear(b->a, R, &y->ffc1, b->u);
  gelu_all(b->u, (size_t)R * 2 * d);
  linear(b->u, R, &y->ffc2, b->v);
  linear(b->v, R, &y->fgate, b->z);
  gate_mul(b->v, b->z, R, d, b->e);
  for (size_t i = 0; i < (size_t)R * d; i++) h[i] = b->v[i] + h[i];
}

/* Mean squared error of one batch of `nw` normalized windows (full rows of
 * C + H values). */
static double batch_loss(const model_t *m, const float *full, uint32_t nw, const bufs_t *b, double *loc,
                         double *scale) {
  const uint32_t T = m->T, P = m->P, W = m->C + m->H;
  const uint32_t R = nw * T;
  /* TinyTimeMixerStdScaler over the context, then the patches of its last T·P values */
  for (uint32_t w = 0; w < nw; w++) {
    const float *x = full + (size_t)w * W;
    double s = 0;
    for (uint32_t i = 0; i < m->C; i++) s += (double)x[i];
    double mu = s / (double)m->C, v = 0;
    for (uint32_t i = 0; i < m->C; i++) {
      double t = (double)x[i] - mu;
      v += t * t;
    }
    double sc = __builtin_sqrt(v / (double)m->C + 1e-5);
    loc[w] = mu, scale[w] = sc;
    for (uint32_t i = 0; i < T * P; i++) b->x[(size_t)w * T * P + i] = (float)(((double)x[m->start + i] - mu) / sc);
  }
  linear(b->x, R, &m->patcher, b->h);
  for (uint32_t l = 0; l < m->L; l++) mixer_layer(&m->enc[l], b->h, nw, T, m->D, b);
  float *hd = b->h;
  if (m->adapter) {
    linear(b->h, R, &m->adapt, b->y);
    hd = b->y;
  }
  for (uint32_t l = 0; l < m->LD; l++) mixer_layer(&m->dec[l], hd, nw, T, m->Dd, b);
  /* the head on each window's flattened [T·Dd] (patch-major), into b->a */
  linear(hd, nw, &m->head, b->a);
  double sum = 0;
  for (uint32_t w = 0; w < nw; w++) {
    const float *pred = b->a + (size_t)w * m->H;
    const float *tgt = full + (size_t)w * W + m->C;
    for (uint32_t k = 0; k < m->H; k++) {
      float yk = (float)((double)pred[k] * scale[w] + loc[w]);
      double d = (double)yk - (double)tgt[k];
      sum += d * d;
    }
  }
  return sum / ((double)nw * (double)m->H);
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

TZ_EXPORT(tenzro_score)
int32_t tenzro_score(uint32_t dtype, uint32_t ntensors, const uint32_t *table, void *weights, uint32_t frag_first,
                     uint32_t frag_count, const void *grad, float lr, float beta, uint32_t nesterov, uint32_t nbatch,
                     uint32_t bsize, uint32_t wlen, const float *windows, const double *params, uint32_t nparams,
                     double *out) {
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  if (nparams != P_COUNT) return tz_fail(TZ_ERR_PARAMS, "want 6 parameters");
  model_t m;
  m.C = (uint32_t)params[P_CONTEXT], m.H = (uint32_t)params[P_HORIZON], m.P = (uint32_t)params[P_PATCH];
  m.D = (uint32_t)params[P_DMODEL], m.L = (uint32_t)params[P_LAYERS], m.LD = (uint32_t)params[P_DEC_LAYERS];
  if (m.C <= m.P) {
    m_reset();
    m_str("context_len ");
    m_u64(m.C);
    m_str(" must be greater than patch_len ");
    m_u64(m.P);
    m_str(" (TinyTimeMixerPatchify refuses it)");
    return m_fail(TZ_ERR_CONFIG);
  }
  m.Dd = m.D / 2 > 8 ? m.D / 2 : 8; /* granite_ttm.py: decoder_d_model = max(8, d_model // 2) */
  m.adapter = m.D != m.Dd;
  m.T = m.C / m.P; /* (C − P) / stride + 1 with stride = P */
  m.start = m.C - m.T * m.P;
  if ((uint64_t)m.T * m.Dd > 0x3FFFFFFFull) return tz_fail(TZ_ERR_CONFIG, "the head's input T·decoder_d_model exceeds 2^30");
  if (nbatch == 0 || bsize == 0) return tz_fail(TZ_ERR_WINDOW, "no windows to score on");
  if (wlen != m.C + m.H) {
    m_reset();
    m_str("windows have ");
    m_u64(wlen);
    m_str(" values, want context_len + horizon = ");
    m_u64(m.C + m.H);
    return m_fail(TZ_ERR_WINDOW);
  }
  if (!(lr == lr) || !(beta == beta)) return tz_fail(TZ_ERR_PARAMS, "lr or beta is NaN");
  /* The table: contiguous tensors in canonical order. */
  const tz_tentry *tab = (const tz_tentry *)table;
  uint64_t total = 0;
  for (uint32_t i = 0; i < ntensors; i++) {
    uint64_t sz = 1;
    if (tab[i].ndim == 0 || tab[i].ndim > 4) return tz_fail(TZ_ERR_LAYOUT, "a tensor has 0 or more than 4 dimensions");
    for (uint32_t d = 0; d < tab[i].ndim; d++) sz *= tab[i].dim[d];
    if (tab[i].off != total) return tz_fail(TZ_ERR_LAYOUT, "tensor offsets are not contiguous");
    total += sz;
    if (total > 0x3FFFFFFFull) return tz_fail(TZ_ERR_LAYOUT, "the model has more than 2^30 values");
  }
  if (frag_count == 0 || frag_first >= ntensors || frag_count > ntensors - frag_first)
    return tz_fail(TZ_ERR_LAYOUT, "the fragment's tensor range is outside the table");
  uint32_t g0 = tab[frag_first].off;
  uint32_t g1 = frag_first + frag_count < ntensors ? tab[frag_first + frag_count].off : (uint32_t)total;
  /* f32 weights (BF16 widened exactly into a copy). */
  g_tab = tab, g_ntab = ntensors;
  g_used = (uint8_t *)alloc_n(ntensors, 1);
  if (!g_used) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  __builtin_memset(g_used, 0, ntensors);
  if (dtype == TZ_F32) {
    g_wf = (float *)weights;
  } else {
    g_wf = (float *)alloc_n(total, 4);
    if (!g_wf) return tz_fail(TZ_ERR_NOMEM, "out of memory for the f32 weights");
    const uint16_t *h = (const uint16_t *)weights;
    for (uint64_t i = 0; i < total; i++) g_wf[i] = tz_bf16_to_f32(h[i]);
  }
  m.enc = (mixer_t *)alloc_n(m.L ? m.L : 1, sizeof(mixer_t));
  m.dec = (mixer_t *)alloc_n(m.LD ? m.LD : 1, sizeof(mixer_t));
  if (!m.enc || !m.dec) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  int32_t rc = bind_model(&m);
  if (rc) return rc;
  /* Normalized windows and work buffers (every shape fits: the model's
   * tensors exist with these sizes, so D, Dd, T, P < 2^30). */
  uint64_t nwin = (uint64_t)nbatch * bsize;
  float *full = (float *)alloc_n(nwin * wlen, 4);
  uint64_t R = (uint64_t)bsize * m.T;
  uint64_t wd = m.D > m.Dd ? m.D : m.Dd;
  bufs_t b;
  b.x = (float *)alloc_n(R * m.P, 4);
  b.h = (float *)alloc_n(R * m.D, 4);
  b.y = (float *)alloc_n(R * m.Dd, 4);
  b.g = (float *)alloc_n(R * wd, 4);
  b.a = (float *)alloc_n(R * wd > (uint64_t)bsize * m.H ? R * wd : (uint64_t)bsize * m.H, 4);
  b.u = (float *)alloc_n(2 * R * wd, 4);
  b.v = (float *)alloc_n(R * wd, 4);
  b.z = (float *)alloc_n(R * wd, 4);
  b.e = (double *)alloc_n(wd > m.T ? wd : m.T, 8);
  double *loc = (double *)alloc_n(bsize, 8), *scale = (double *)alloc_n(bsize, 8);
  if (!full || !b.x || !b.h || !b.y || !b.g || !b.a || !b.u || !b.v || !b.z || !b.e || !loc || !scale)
    return tz_fail(TZ_ERR_NOMEM, "out of memory for the windows and activations");
  for (uint64_t w = 0; w < nwin; w++)
    if ((rc = normalize(windows + w * wlen, m.C, wlen, full + w * wlen, (uint32_t)w))) return rc;
  /* Loss before, on every batch. */
  for (uint32_t i = 0; i < nbatch; i++)
    out[2 * i] = batch_loss(&m, full + (uint64_t)i * bsize * wlen, bsize, &b, loc, scale);
  /* The outer step of the gradient alone (empty momentum buffer). */
  float nlr = -lr;
  for (uint32_t c = g0; c < g1; c++) {
    float g = dtype == TZ_F32 ? ((const float *)grad)[c - g0] : tz_bf16_to_f32(((const uint16_t *)grad)[c - g0]);
    float d = nesterov ? tz_fmaf(g, beta, g) : g;
    float w = tz_fmaf(d, nlr, g_wf[c]);
    g_wf[c] = dtype == TZ_F32 ? w : tz_bf16_to_f32(tz_f32_to_bf16(w));
  }
  /* Loss after. */
  for (uint32_t i = 0; i < nbatch; i++)
    out[2 * i + 1] = batch_loss(&m, full + (uint64_t)i * bsize * wlen, bsize, &b, loc, scale);
  return TZ_OK;
}
