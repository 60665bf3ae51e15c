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
#include "scorecommon.h"

/* Score error codes (rule-specific range, ABI.md §5; 104 and 105: scorecommon.h). */
#define TZ_ERR_CONFIG 106 /* a parameter combination this evaluator does not implement */

/* Parameters (manifest schema order; granite_ttm.py's metadata keys). */
enum { P_CONTEXT, P_HORIZON, P_PATCH, P_DMODEL, P_LAYERS, P_DEC_LAYERS, P_COUNT };

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
  TZ_SCORE_BIND_TABLE(); /* tab, total, g0, g1; the lookup state and the f32 weights */
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
