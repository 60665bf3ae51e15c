/* TimesFMScore: the evaluator of the TimesFM-class reference family
 * (trainer/src/tenzro_trainer/models/timesfm.py; Das et al. 2024, "A
 * decoder-only foundation model for time-series forecasting"), an ABI v3
 * "score" plugin (ABI.md §4.2, docs/protocol/scoring.md).
 *
 * For one submitted outer gradient of one fragment it computes the model's
 * loss on each batch of windows before and after applying the gradient to the
 * round's start weights exactly as the outer step would with an empty
 * momentum buffer (the Nesterov built-in's first step: buf = g,
 * d = fma(buf, beta, g) if nesterov else buf, w = fma(d, -lr, w), BF16
 * weights rounded back to BF16).
 *
 * The forward pass is the PyTorch model's, operation for operation:
 *   patches [T, P] (T = context_len / patch_len) of the normalized context
 *   h = (out(silu(hidden(x))) + skip(x)) + pos                 (embed)
 *   per layer: h = h + proj(causal_attention(qkv(ln1(h))))
 *              h = h + ff2(gelu(ff1(ln2(h))))                  (exact GELU, erf)
 *   y = out(silu(hidden(ln_f(h)))) + skip(ln_f(h))             (head) [T, horizon]
 *   loss = mean over windows, positions j and k < horizon of
 *          (y[j][k] - full[(j+1)·P + k])², full = context ‖ target (normalized)
 * Windows arrive raw (f32 series values, context_len + horizon each) and are
 * normalized here as the trainer's data loader does (data._normalize): by the
 * context's mean and population standard deviation, floored at
 * 1e-3·max(|mean|, 1), in f64.
 *
 * Determinism: every sum has one fixed order. A linear layer's output is
 * bias + dot, the dot accumulated in four f32 lanes (lane l sums the products
 * of the inputs i ≡ l mod 4, ascending; a ragged tail adds +0) folded as
 * (l0 + l2) + (l1 + l3); LayerNorm statistics, attention (scores, softmax,
 * weighted values), the normalization and the loss are f64 sums in index
 * order; exp and erf are detmath.h's. No FMA contraction (-ffp-contract=off);
 * tz_fmaf is an exactly rounded FMA where the outer step has one. */
#define TZ_ABI_VERSION 3
#include "common.h"
#include "detmath.h"
#include "fmaf.h"
#include "scorecommon.h"


/* Parameters (manifest schema order). */
enum { P_CONTEXT, P_HORIZON, P_PATCH, P_DMODEL, P_LAYERS, P_HEADS, P_DFF, P_COUNT };

typedef struct {
  ln_t ln1, ln2;
  lin_t qkv, proj, ff1, ff2;
} layer_t;
typedef struct {
  uint32_t C, H, P, D, L, NH, F, T;
  lin_t e_hidden, e_out, e_skip, h_hidden, h_out, h_skip;
  const float *pos;
  ln_t lnf;
  layer_t *layers;
} model_t;

/* name = prefix ‖ suffix into buf. */
static const char *cat(char *buf, const char *a, const char *b) {
  uint32_t i = 0;
  while (*a && i < 95) buf[i++] = *a++;
  while (*b && i < 95) buf[i++] = *b++;
  buf[i] = 0;
  return buf;
}

static int32_t find_lin(const char *prefix, uint32_t out, uint32_t in, lin_t *l) {
  char nb[96];
  int32_t rc = find(cat(nb, prefix, ".weight"), out, in, &l->w);
  if (!rc) rc = find(cat(nb, prefix, ".bias"), out, 0, &l->b);
  l->out = out, l->in = in;
  return rc;
}

static int32_t find_ln(const char *prefix, uint32_t d, ln_t *l) {
  char nb[96];
  int32_t rc = find(cat(nb, prefix, ".weight"), d, 0, &l->g);
  if (!rc) rc = find(cat(nb, prefix, ".bias"), d, 0, &l->b);
  return rc;
}

static int32_t find_res(const char *prefix, uint32_t in, uint32_t hid, uint32_t out, lin_t *h, lin_t *o, lin_t *s) {
  char nb[96];
  int32_t rc = find_lin(cat(nb, prefix, ".hidden"), hid, in, h);
  if (!rc) rc = find_lin(cat(nb, prefix, ".out"), out, hid, o);
  if (!rc) rc = find_lin(cat(nb, prefix, ".skip"), out, in, s);
  return rc;
}

static int32_t bind_model(model_t *m) {
  int32_t rc = find_res("embed", m->P, m->F, m->D, &m->e_hidden, &m->e_out, &m->e_skip);
  if (!rc) rc = find("pos", m->T, m->D, &m->pos);
  if (!rc) rc = find_ln("ln_f", m->D, &m->lnf);
  if (!rc) rc = find_res("head", m->D, m->F, m->H, &m->h_hidden, &m->h_out, &m->h_skip);
  for (uint32_t l = 0; !rc && l < m->L; l++) {
    char pre[32] = "layers.", nb[96];
    uint32_t i = 7;
    char d[12];
    int nd = 0;
    uint32_t v = l;
    do d[nd++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (nd) pre[i++] = d[--nd];
    pre[i] = 0;
    layer_t *y = &m->layers[l];
    rc = find_ln(cat(nb, pre, ".ln1"), m->D, &y->ln1);
    if (!rc) rc = find_ln(cat(nb, pre, ".ln2"), m->D, &y->ln2);
    if (!rc) rc = find_lin(cat(nb, pre, ".qkv"), 3 * m->D, m->D, &y->qkv);
    if (!rc) rc = find_lin(cat(nb, pre, ".proj"), m->D, m->D, &y->proj);
    if (!rc) rc = find_lin(cat(nb, pre, ".ff1"), m->F, m->D, &y->ff1);
    if (!rc) rc = find_lin(cat(nb, pre, ".ff2"), m->D, m->F, &y->ff2);
  }
  if (rc) return rc;
  for (uint32_t i = 0; i < g_ntab; i++) {
    if (g_used[i]) continue;
    m_reset();
    m_str("tensor ");
    const char *n = (const char *)(uintptr_t)g_tab[i].name_ptr;
    for (uint32_t j = 0; j < g_tab[i].name_len && j < 96 && tz_msg_len < 200; j++) tz_msg[tz_msg_len++] = n[j];
    tz_msg[tz_msg_len] = 0;
    m_str(" is not part of a TimesFM-class model with these parameters");
    return m_fail(TZ_ERR_LAYOUT);
  }
  return TZ_OK;
}

static void add_into(float *h, const float *z, size_t n) {
  for (size_t i = 0; i < n; i++) h[i] = h[i] + z[i];
}

/* Causal multi-head attention of one window's T tokens: qkv rows of 3D
 * (q | k | v, head-major inside each), output rows of D. */
static void attention(const float *qkv, uint32_t T, uint32_t D, uint32_t NH, float *out, double *sc) {
  uint32_t hd = D / NH;
  double scale = 1.0 / __builtin_sqrt((double)hd);
  for (uint32_t h = 0; h < NH; h++) {
    for (uint32_t i = 0; i < T; i++) {
      const float *q = qkv + (size_t)i * 3 * D + h * hd;
      double mx = 0;
      for (uint32_t j = 0; j <= i; j++) {
        const float *k = qkv + (size_t)j * 3 * D + D + h * hd;
        double s = 0;
        for (uint32_t c = 0; c < hd; c++) s += (double)q[c] * (double)k[c];
        s *= scale;
        sc[j] = s;
        if (j == 0 || s > mx) mx = s;
      }
      double sum = 0;
      for (uint32_t j = 0; j <= i; j++) {
        sc[j] = tz_exp(sc[j] - mx);
        sum += sc[j];
      }
      float *o = out + (size_t)i * D + h * hd;
      for (uint32_t c = 0; c < hd; c++) {
        double a = 0;
        for (uint32_t j = 0; j <= i; j++) a += sc[j] * (double)qkv[(size_t)j * 3 * D + 2 * D + h * hd + c];
        o[c] = (float)(a / sum);
      }
    }
  }
}

/* Work buffers for R = windows·T rows. */
typedef struct {
  float *x, *h, *a, *q, *u, *z, *o, *s;
  double *sc;
} bufs_t;

/* Mean squared error of one batch of `nw` normalized windows (full rows of
 * C + H values). */
static double batch_loss(const model_t *m, const float *full, uint32_t nw, const bufs_t *b) {
  const uint32_t T = m->T, P = m->P, D = m->D, W = m->C + m->H;
  const uint32_t R = nw * T;
  for (uint32_t w = 0; w < nw; w++) /* patches: the context, row-major */
    for (uint32_t i = 0; i < m->C; i++) b->x[(size_t)w * m->C + i] = full[(size_t)w * W + i];
  /* embed */
  linear(b->x, R, &m->e_hidden, b->u);
  for (size_t i = 0; i < (size_t)R * m->F; i++) b->u[i] = tz_silu(b->u[i]);
  linear(b->u, R, &m->e_out, b->h);
  linear(b->x, R, &m->e_skip, b->z);
  add_into(b->h, b->z, (size_t)R * D);
  for (uint32_t r = 0; r < R; r++) add_into(b->h + (size_t)r * D, m->pos + (size_t)(r % T) * D, D);
  for (uint32_t l = 0; l < m->L; l++) {
    const layer_t *y = &m->layers[l];
    layernorm(b->h, R, D, &y->ln1, b->a);
    linear(b->a, R, &y->qkv, b->q);
    for (uint32_t w = 0; w < nw; w++) attention(b->q + (size_t)w * T * 3 * D, T, D, m->NH, b->a + (size_t)w * T * D, b->sc);
    linear(b->a, R, &y->proj, b->z);
    add_into(b->h, b->z, (size_t)R * D);
    layernorm(b->h, R, D, &y->ln2, b->a);
    linear(b->a, R, &y->ff1, b->u);
    for (size_t i = 0; i < (size_t)R * m->F; i++) b->u[i] = tz_gelu(b->u[i]);
    linear(b->u, R, &y->ff2, b->z);
    add_into(b->h, b->z, (size_t)R * D);
  }
  layernorm(b->h, R, D, &m->lnf, b->a);
  linear(b->a, R, &m->h_hidden, b->u);
  for (size_t i = 0; i < (size_t)R * m->F; i++) b->u[i] = tz_silu(b->u[i]);
  linear(b->u, R, &m->h_out, b->o);
  linear(b->a, R, &m->h_skip, b->s);
  add_into(b->o, b->s, (size_t)R * m->H);
  double sum = 0;
  for (uint32_t w = 0; w < nw; w++)
    for (uint32_t j = 0; j < T; j++) {
      const float *pred = b->o + ((size_t)w * T + j) * m->H;
      const float *tgt = full + (size_t)w * W + (size_t)(j + 1) * P;
      for (uint32_t k = 0; k < m->H; k++) {
        double d = (double)pred[k] - (double)tgt[k];
        sum += d * d;
      }
    }
  return sum / ((double)nw * (double)T * (double)m->H);
}

TZ_EXPORT(tenzro_score)
int32_t tenzro_score(uint32_t dtype, uint32_t ntensors, const uint32_t *table, void *weights, uint32_t frag_first,
                     uint32_t frag_count, const void *grad, float lr, float beta, uint32_t nesterov, uint32_t nbatch,
                     uint32_t bsize, uint32_t wlen, const float *windows, const double *params, uint32_t nparams,
                     double *out) {
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  if (nparams != P_COUNT) return tz_fail(TZ_ERR_PARAMS, "want 7 parameters");
  model_t m;
  m.C = (uint32_t)params[P_CONTEXT], m.H = (uint32_t)params[P_HORIZON], m.P = (uint32_t)params[P_PATCH];
  m.D = (uint32_t)params[P_DMODEL], m.L = (uint32_t)params[P_LAYERS], m.NH = (uint32_t)params[P_HEADS];
  m.F = (uint32_t)params[P_DFF];
  if (m.C % m.P) return tz_fail(TZ_ERR_PARAMS, "context_len is not a multiple of patch_len");
  if (m.D % m.NH) return tz_fail(TZ_ERR_PARAMS, "d_model is not a multiple of n_heads");
  m.T = m.C / m.P;
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
  m.layers = (layer_t *)alloc_n(m.L ? m.L : 1, sizeof(layer_t));
  if (!m.layers) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  int32_t rc = bind_model(&m);
  if (rc) return rc;
  /* Normalized windows and work buffers. */
  uint64_t nwin = (uint64_t)nbatch * bsize;
  float *full = (float *)alloc_n(nwin * wlen, 4);
  uint64_t R = (uint64_t)bsize * m.T;
  uint32_t wide = 3 * m.D > m.F ? 3 * m.D : m.F;
  bufs_t b;
  b.x = (float *)alloc_n(R * m.P, 4);
  b.h = (float *)alloc_n(R * m.D, 4);
  b.a = (float *)alloc_n(R * m.D, 4);
  b.z = (float *)alloc_n(R * m.D, 4);
  b.q = (float *)alloc_n(R * 3 * m.D, 4);
  b.u = (float *)alloc_n(R * wide, 4);
  b.o = (float *)alloc_n(R * m.H, 4);
  b.s = (float *)alloc_n(R * m.H, 4);
  b.sc = (double *)alloc_n(m.T, 8);
  if (!full || !b.x || !b.h || !b.a || !b.z || !b.q || !b.u || !b.o || !b.s || !b.sc)
    return tz_fail(TZ_ERR_NOMEM, "out of memory for the windows and activations");
  for (uint64_t w = 0; w < nwin; w++)
    if ((rc = normalize(windows + w * wlen, m.C, wlen, full + w * wlen, (uint32_t)w))) return rc;
  /* Loss before, on every batch. */
  for (uint32_t i = 0; i < nbatch; i++) out[2 * i] = batch_loss(&m, full + (uint64_t)i * bsize * wlen, bsize, &b);
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
    out[2 * i + 1] = batch_loss(&m, full + (uint64_t)i * bsize * wlen, bsize, &b);
  return TZ_OK;
}
