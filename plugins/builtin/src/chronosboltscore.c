/* ChronosBoltScore: the evaluator of the Chronos-Bolt reference family
 * (trainer/src/tenzro_trainer/models/chronos_bolt.py: chronos-forecasting
 * 2.3.2's ChronosBoltModelForForecasting, a T5 encoder-decoder, as that
 * adapter configures it; Ansari et al. 2024, "Chronos"), an ABI v3 "score"
 * plugin (ABI.md §4.2, docs/protocol/scoring.md §2c).
 *
 * For one submitted outer gradient of one fragment it computes the model's
 * training loss on each batch of windows before and after applying the
 * gradient to the round's start weights exactly as the outer step would with
 * an empty momentum buffer (the Nesterov built-in's first step), like
 * TimesFMScore and GraniteTTMScore.
 *
 * The configuration is chronos_bolt.py's: T5 with relu feed-forward (no
 * gate), no biases in the T5 stacks, T5 RMS LayerNorm (eps 1e-6), relative
 * position bias of 32 buckets up to distance 128 in the first block of each
 * stack, attention scores unscaled; patch stride = patch_len, the REG token,
 * nine quantiles 0.1 … 0.9, instance norm eps 1e-5, no arcsinh. In eval mode
 * (every dropout is 0) the forward pass of one window is, operation for
 * operation (D = d_model, F = d_ff, I = num_heads·d_kv, Q = 9):
 *   x   = the normalized context (data._normalize, as TimesFMScore)
 *   loc = mean(x), scale = sqrt(mean((x − loc)²)) (1e-5 where 0)  (InstanceNorm)
 *   s   = (x − loc) / scale, left-padded by (P − C mod P) mod P missing values;
 *         T = ceil(C / P) patches; patch t = [s of the patch (0 where missing),
 *         its mask (1 observed, 0 missing)]                        [T, 2P]
 *   e   = output(relu(hidden(p))) + residual(p)       (ResidualBlock)  [T, D]
 *   h   = [e; shared[1]] (the REG token)                               [N = T + 1, D]
 *   per encoder block: h += o(attn(q, k, v of RMS(h)) + bias(j − i)); h += wo(relu(wi(RMS(h))))
 *   enc = RMS(h) (final_layer_norm)
 *   y   = shared[0] (decoder_start_token_id), one query step
 *   per decoder block: y += o(self-attention of RMS(y) on itself, bias(0));
 *         y += o(attn(q of RMS(y), k, v of enc)); y += wo(relu(wi(RMS(y))))
 *   y   = RMS(y) (final_layer_norm)
 *   qp  = output(relu(hidden(y))) + residual(y)    [Q·H], quantile-major
 *   loss = Σ over windows, quantiles q, k < H of 2·|(t_k − qp) · (1[t_k ≤ qp] − τ_q)|
 *          / (windows · Q), t = (target − loc) / scale (ChronosBolt.loss: the
 *          package's loss, in the scaled space, so the unscaling of the
 *          forecast is not part of it)
 * Every patch has at least one observed value (non-finite windows are
 * refused), so the attention mask is all ones and masks nothing.
 *
 * Determinism: every sum has one fixed order. A linear layer's output is
 * (bias +) dot, the dot accumulated in four f32 lanes (lane l sums the
 * products of the inputs i ≡ l mod 4, ascending; a ragged tail adds +0)
 * folded as (l0 + l2) + (l1 + l3) — TimesFMScore's arithmetic; an attention
 * score is the same dot over one head's d_kv values plus the bias (f32);
 * RMS statistics, the instance norm, the softmax (max, e^(s − max), their
 * sum, the weighted sum of values), the normalization and the loss are f64
 * sums in index order; exp is detmath.h's. No FMA contraction
 * (-ffp-contract=off); tz_fmaf is an exactly rounded FMA where the outer
 * step has one. */
#define TZ_ABI_VERSION 3
#include "common.h"
#include "detmath.h"
#include "fmaf.h"

/* Score error codes (rule-specific range, ABI.md §5). */
#define TZ_ERR_LAYOUT 104 /* a tensor is missing, extra or of the wrong shape */
#define TZ_ERR_WINDOW 105 /* window length or count does not match */
#define TZ_ERR_CONFIG 106 /* a parameter combination this evaluator does not implement */

/* Parameters (manifest schema order; chronos_bolt.py's TINY keys). */
enum { P_CONTEXT, P_HORIZON, P_PATCH, P_DMODEL, P_DFF, P_LAYERS, P_DEC_LAYERS, P_HEADS, P_DKV, P_COUNT };

#define NQ 9        /* chronos_bolt.QUANTILES */
#define NBUCKETS 32 /* T5Config.relative_attention_num_buckets */
/* chronos_bolt.QUANTILES as the model's float32 buffer holds them. */
static const float k_tau[NQ] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f};

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

/* A linear layer; b = 0: no bias (the T5 stacks). */
typedef struct {
  const float *w, *b;
  uint32_t out, in;
} lin_t;
/* T5Attention: q, k, v [I, D], o [D, I]. */
typedef struct {
  lin_t q, k, v, o;
} attn_t;
/* One T5Block: self-attention, cross-attention (decoder only), feed-forward,
 * each with its RMS LayerNorm weight. */
typedef struct {
  const float *ln_sa, *ln_ca, *ln_ff;
  attn_t sa, ca;
  lin_t wi, wo;
} block_t;
/* ResidualBlock: hidden (relu), output, residual. */
typedef struct {
  lin_t hid, out, res;
} resblk_t;
typedef struct {
  uint32_t C, H, P, D, F, L, LD, NH, DK, I, T, N, pad;
  const float *shared, *enc_bias, *dec_bias, *enc_ln, *dec_ln;
  resblk_t in, out;
  block_t *enc, *dec;
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

/* `<prefix><what>.weight` [out, in], and `.bias` [out] when bias. */
static int32_t find_lin(const char *prefix, const char *what, uint32_t out, uint32_t in, int bias, lin_t *l) {
  char nb[160];
  int32_t rc = find(cat3(nb, prefix, what, ".weight"), out, in, &l->w);
  l->b = 0;
  if (!rc && bias) rc = find(cat3(nb, prefix, what, ".bias"), out, 0, &l->b);
  l->out = out, l->in = in;
  return rc;
}

static int32_t find_res(const char *prefix, uint32_t in, uint32_t h, uint32_t out, resblk_t *r) {
  int32_t rc = find_lin(prefix, ".hidden_layer", h, in, 1, &r->hid);
  if (!rc) rc = find_lin(prefix, ".output_layer", out, h, 1, &r->out);
  if (!rc) rc = find_lin(prefix, ".residual_layer", out, in, 1, &r->res);
  return rc;
}

static int32_t find_attn(const char *prefix, const model_t *m, attn_t *a) {
  int32_t rc = find_lin(prefix, ".q", m->I, m->D, 0, &a->q);
  if (!rc) rc = find_lin(prefix, ".k", m->I, m->D, 0, &a->k);
  if (!rc) rc = find_lin(prefix, ".v", m->I, m->D, 0, &a->v);
  if (!rc) rc = find_lin(prefix, ".o", m->D, m->I, 0, &a->o);
  return rc;
}

/* The blocks of one T5Stack: `<base>.block.<i>.layer.<j>.*`. */
static int32_t bind_stack(const char *base, uint32_t n, int decoder, const model_t *m, block_t *bl, const float **bias,
                          const float **final_ln) {
  char nb[160];
  int32_t rc = TZ_OK;
  for (uint32_t l = 0; !rc && l < n; l++) {
    char pre[128];
    uint32_t i = 0;
    for (const char *s = base; *s && i < 100; s++) pre[i++] = *s;
    for (const char *s = ".block."; *s; s++) pre[i++] = *s;
    char dg[12];
    int nd = 0;
    uint32_t v = l;
    do dg[nd++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (nd) pre[i++] = dg[--nd];
    pre[i] = 0;
    block_t *b = &bl[l];
    rc = find(cat3(nb, pre, ".layer.0.layer_norm", ".weight"), m->D, 0, &b->ln_sa);
    if (!rc) rc = find_attn(cat3(nb, pre, ".layer.0.SelfAttention", ""), m, &b->sa);
    if (!rc && l == 0) rc = find(cat3(nb, pre, ".layer.0.SelfAttention.relative_attention_bias", ".weight"), NBUCKETS, m->NH, bias);
    const char *ff = ".layer.1";
    if (!rc && decoder) {
      rc = find(cat3(nb, pre, ".layer.1.layer_norm", ".weight"), m->D, 0, &b->ln_ca);
      if (!rc) rc = find_attn(cat3(nb, pre, ".layer.1.EncDecAttention", ""), m, &b->ca);
      ff = ".layer.2";
    }
    char fp[160];
    if (!rc) rc = find(cat3(nb, pre, ff, ".layer_norm.weight"), m->D, 0, &b->ln_ff);
    if (!rc) rc = find_lin(cat3(fp, pre, ff, ".DenseReluDense"), ".wi", m->F, m->D, 0, &b->wi);
    if (!rc) rc = find_lin(fp, ".wo", m->D, m->F, 0, &b->wo);
  }
  if (!rc) rc = find(cat3(nb, base, ".final_layer_norm", ".weight"), m->D, 0, final_ln);
  return rc;
}

static int32_t bind_model(model_t *m) {
  int32_t rc = find("net.shared.weight", 2, m->D, &m->shared);
  if (!rc) rc = find_res("net.input_patch_embedding", 2 * m->P, m->F, m->D, &m->in);
  if (!rc) rc = bind_stack("net.encoder", m->L, 0, m, m->enc, &m->enc_bias, &m->enc_ln);
  if (!rc) rc = bind_stack("net.decoder", m->LD, 1, m, m->dec, &m->dec_bias, &m->dec_ln);
  if (!rc) rc = find_res("net.output_patch_embedding", m->D, m->F, NQ * m->H, &m->out);
  if (rc) return rc;
  for (uint32_t i = 0; i < g_ntab; i++) {
    if (g_used[i]) continue;
    m_reset();
    m_str("tensor ");
    const char *n = (const char *)(uintptr_t)g_tab[i].name_ptr;
    for (uint32_t j = 0; j < g_tab[i].name_len && j < 120 && tz_msg_len < 200; j++) tz_msg[tz_msg_len++] = n[j];
    tz_msg[tz_msg_len] = 0;
    m_str(" is not part of the Chronos-Bolt model of chronos_bolt.py with these parameters");
    return m_fail(TZ_ERR_LAYOUT);
  }
  return TZ_OK;
}

/* (l0 + l2) + (l1 + l3) */
static inline float fold4(v128_t a) {
  v128_t s = wasm_f32x4_add(a, wasm_i32x4_shuffle(a, a, 2, 3, 0, 1));
  return wasm_f32x4_extract_lane(s, 0) + wasm_f32x4_extract_lane(s, 1);
}

/* The dot of n values in four lanes, folded: the reference order. */
static inline float dot(const float *w, const float *x, uint32_t n) {
  const uint32_t body = n & ~3u, tail = n - body;
  v128_t a = wasm_f32x4_splat(0);
  for (uint32_t c = 0; c < body; c += 4) a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(w + c), wasm_v128_load(x + c)));
  if (tail) a = wasm_f32x4_add(a, wasm_f32x4_mul(tz_load4(w + body, tail), tz_load4(x + body, tail)));
  return fold4(a);
}

/* y[r][o] = (b[o] +) dot(W[o], x[r]) for rows r < R. Blocks of four rows share
 * each weight row's loads; the arithmetic of every output is dot's. */
static void linear(const float *x, uint32_t R, const lin_t *l, float *y) {
  const uint32_t in = l->in, out = l->out, body = in & ~3u, tail = in - body;
  const v128_t z = wasm_f32x4_splat(0);
  uint32_t r = 0;
  for (; r + 4 <= R; r += 4) {
    const float *x0 = x + (size_t)r * in, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
    float *y0 = y + (size_t)r * out;
    for (uint32_t o = 0; o < out; o++) {
      const float *w = l->w + (size_t)o * in;
      v128_t a0 = z, a1 = z, a2 = z, a3 = z;
      for (uint32_t c = 0; c < body; c += 4) {
        v128_t wv = wasm_v128_load(w + c);
        a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(wv, wasm_v128_load(x0 + c)));
        a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(wv, wasm_v128_load(x1 + c)));
        a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(wv, wasm_v128_load(x2 + c)));
        a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(wv, wasm_v128_load(x3 + c)));
      }
      if (tail) {
        v128_t wv = tz_load4(w + body, tail);
        a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(wv, tz_load4(x0 + body, tail)));
        a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(wv, tz_load4(x1 + body, tail)));
        a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(wv, tz_load4(x2 + body, tail)));
        a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(wv, tz_load4(x3 + body, tail)));
      }
      if (l->b) {
        float bo = l->b[o];
        y0[o] = bo + fold4(a0), y0[out + o] = bo + fold4(a1);
        y0[2 * out + o] = bo + fold4(a2), y0[3 * out + o] = bo + fold4(a3);
      } else {
        y0[o] = fold4(a0), y0[out + o] = fold4(a1), y0[2 * out + o] = fold4(a2), y0[3 * out + o] = fold4(a3);
      }
    }
  }
  for (; r < R; r++) {
    const float *x0 = x + (size_t)r * in;
    float *y0 = y + (size_t)r * out;
    for (uint32_t o = 0; o < out; o++) {
      float d = dot(l->w + (size_t)o * in, x0, in);
      y0[o] = l->b ? l->b[o] + d : d;
    }
  }
}

/* torch.relu: negatives to 0, NaN kept. */
static void relu_all(float *u, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (u[i] < 0) u[i] = 0;
}

/* T5LayerNorm (RMS, eps 1e-6, no mean, no bias): f64 statistics. */
static void rmsnorm(const float *x, uint32_t R, uint32_t d, const float *g, float *y) {
  for (uint32_t r = 0; r < R; r++) {
    const float *xr = x + (size_t)r * d;
    float *yr = y + (size_t)r * d;
    double s = 0;
    for (uint32_t i = 0; i < d; i++) s += (double)xr[i] * (double)xr[i];
    double rstd = 1.0 / __builtin_sqrt(s / (double)d + 1e-6);
    for (uint32_t i = 0; i < d; i++) yr[i] = (float)((double)g[i] * ((double)xr[i] * rstd));
  }
}

static void add_into(float *h, const float *u, size_t n) {
  for (size_t i = 0; i < n; i++) h[i] = h[i] + u[i];
}

/* ResidualBlock: y = output(relu(hidden(x))) + residual(x), rows of x. */
static void resblock(const resblk_t *rb, const float *x, uint32_t R, float *hid, float *tmp, float *y) {
  linear(x, R, &rb->hid, hid);
  relu_all(hid, (size_t)R * rb->hid.out);
  linear(hid, R, &rb->out, y);
  linear(x, R, &rb->res, tmp);
  add_into(y, tmp, (size_t)R * rb->out.out);
}

/* Work buffers (R = windows·N rows). */
typedef struct {
  float *pin, *h, *hn, *t, *q, *k, *v, *att, *hid, *y, *yn, *yt, *yq, *yatt, *qp;
  float *bias;   /* the encoder's bias by offset j − i + N − 1, per head: [(2N − 1), NH] */
  double *e;     /* one query's softmax weights: N */
  double *acc;   /* one query's weighted value sums: d_kv */
} bufs_t;

/* T5 relative-position bucket (T5Attention._relative_position_bucket,
 * 32 buckets, max_distance 128) of rel = key − query. For |rel| ≥ 8 the
 * package's ⌊log(|rel|/8)/log(16)·8⌋ = ⌊log2(|rel|²/64)⌋, computed exactly
 * on integers (equal to torch's float32 result for every |rel| ≤ 70000:
 * trainer/tests/test_chronos_score_reference.py). */
static uint32_t bucket(int64_t rel, int bidirectional) {
  uint32_t nb = NBUCKETS, base = 0;
  uint64_t n;
  if (bidirectional) {
    nb /= 2;
    if (rel > 0) base = nb;
    n = (uint64_t)(rel < 0 ? -rel : rel);
  } else {
    n = rel < 0 ? (uint64_t)(-rel) : 0;
  }
  uint32_t exact = nb / 2;
  if (n < exact) return base + (uint32_t)n;
  uint64_t sq = n * n;
  uint32_t lg = 63 - (uint32_t)__builtin_clzll(sq); /* ⌊log2(n²)⌋ */
  uint32_t v = exact + (lg - 6);                     /* − log2(64) */
  return base + (v < nb - 1 ? v : nb - 1);
}

/* One query's attention over nk keys of one head: softmax of
 * s_j = q·k_j + bias_j (f32), f64 max / e^(s − max) / sums in order, into
 * out[d_kv]. `bias` = 0: none (cross-attention), else bias[j·bstride]. */
static void attend(const float *q, const float *k, const float *v, uint32_t nk, uint32_t stride, uint32_t dk,
                   const float *bias, uint32_t bstride, const bufs_t *b, float *out) {
  double mx = 0;
  for (uint32_t j = 0; j < nk; j++) {
    float s = dot(q, k + (size_t)j * stride, dk);
    if (bias) s = s + bias[(size_t)j * bstride];
    b->e[j] = (double)s;
    if (j == 0 || b->e[j] > mx) mx = b->e[j];
  }
  double sum = 0;
  for (uint32_t j = 0; j < nk; j++) {
    b->e[j] = tz_exp(b->e[j] - mx);
    sum += b->e[j];
  }
  for (uint32_t d = 0; d < dk; d++) b->acc[d] = 0;
  for (uint32_t j = 0; j < nk; j++) {
    const float *vj = v + (size_t)j * stride;
    for (uint32_t d = 0; d < dk; d++) b->acc[d] += b->e[j] * (double)vj[d];
  }
  for (uint32_t d = 0; d < dk; d++) out[d] = (float)(b->acc[d] / sum);
}

/* Quantile loss summed over one batch of `nw` normalized windows (full
 * rows of C + H values), divided by nw·Q. */
static double batch_loss(const model_t *m, const float *full, uint32_t nw, const bufs_t *b, double *loc,
                         double *scale) {
  const uint32_t T = m->T, P = m->P, N = m->N, D = m->D, I = m->I, W = m->C + m->H;
  const uint32_t R = nw * N;
  /* InstanceNorm over the context; the patches with their masks */
  for (uint32_t w = 0; w < nw; w++) {
    const float *x = full + (size_t)w * W;
    double s = 0;
    for (uint32_t i = 0; i < m->C; i++) s += (double)x[i];
    double mu = s / (double)m->C, v = 0;
    for (uint32_t i = 0; i < m->C; i++) {
      double t = (double)x[i] - mu;
      v += t * t;
    }
    double sc = __builtin_sqrt(v / (double)m->C);
    if (sc == 0) sc = (double)1e-5f;
    loc[w] = mu, scale[w] = sc;
    for (uint32_t t = 0; t < T; t++) {
      float *p = b->pin + ((size_t)w * T + t) * 2 * P;
      for (uint32_t i = 0; i < P; i++) {
        uint32_t pos = t * P + i; /* in the padded series */
        int obs = pos >= m->pad;
        p[i] = obs ? (float)(((double)x[pos - m->pad] - mu) / sc) : 0.0f;
        p[P + i] = obs ? 1.0f : 0.0f;
      }
    }
  }
  /* The patch embedding, then the REG token: window w's tokens are rows
   * w·N … w·N + T (the REG last). */
  resblock(&m->in, b->pin, nw * T, b->hid, b->t, b->hn);
  for (uint32_t w = 0; w < nw; w++) {
    __builtin_memcpy(b->h + (size_t)w * N * D, b->hn + (size_t)w * T * D, (size_t)T * D * 4);
    __builtin_memcpy(b->h + ((size_t)w * N + T) * D, m->shared + D, (size_t)D * 4);
  }
  /* Encoder */
  for (uint32_t l = 0; l < m->L; l++) {
    const block_t *bl = &m->enc[l];
    rmsnorm(b->h, R, D, bl->ln_sa, b->hn);
    linear(b->hn, R, &bl->sa.q, b->q);
    linear(b->hn, R, &bl->sa.k, b->k);
    linear(b->hn, R, &bl->sa.v, b->v);
    for (uint32_t w = 0; w < nw; w++)
      for (uint32_t i = 0; i < N; i++)
        for (uint32_t hh = 0; hh < m->NH; hh++) {
          size_t base = (size_t)w * N * I + hh * m->DK;
          /* key j's bias: offset j − i + N − 1 */
          attend(b->q + base + (size_t)i * I, b->k + base, b->v + base, N, I, m->DK,
                 b->bias + (size_t)(N - 1 - i) * m->NH + hh, m->NH, b, b->att + base + (size_t)i * I);
        }
    linear(b->att, R, &bl->sa.o, b->t);
    add_into(b->h, b->t, (size_t)R * D);
    rmsnorm(b->h, R, D, bl->ln_ff, b->hn);
    linear(b->hn, R, &bl->wi, b->hid);
    relu_all(b->hid, (size_t)R * m->F);
    linear(b->hid, R, &bl->wo, b->t);
    add_into(b->h, b->t, (size_t)R * D);
  }
  rmsnorm(b->h, R, D, m->enc_ln, b->hn); /* the encoder's output, in b->hn */
  /* Decoder: one query step from shared[0] */
  for (uint32_t w = 0; w < nw; w++) __builtin_memcpy(b->y + (size_t)w * D, m->shared, (size_t)D * 4);
  for (uint32_t l = 0; l < m->LD; l++) {
    const block_t *bl = &m->dec[l];
    /* self-attention: the one query attends to itself; bucket(0) */
    rmsnorm(b->y, nw, D, bl->ln_sa, b->yn);
    linear(b->yn, nw, &bl->sa.q, b->yq);
    linear(b->yn, nw, &bl->sa.k, b->q); /* b->q, b->k: scratch rows [nw, I] */
    linear(b->yn, nw, &bl->sa.v, b->k);
    for (uint32_t w = 0; w < nw; w++)
      for (uint32_t hh = 0; hh < m->NH; hh++) {
        size_t o = (size_t)w * I + hh * m->DK;
        attend(b->yq + o, b->q + o, b->k + o, 1, I, m->DK, m->dec_bias + (size_t)bucket(0, 0) * m->NH + hh, m->NH, b,
               b->yatt + o);
      }
    linear(b->yatt, nw, &bl->sa.o, b->yt);
    add_into(b->y, b->yt, (size_t)nw * D);
    /* cross-attention over the encoder's N outputs (no position bias) */
    rmsnorm(b->y, nw, D, bl->ln_ca, b->yn);
    linear(b->yn, nw, &bl->ca.q, b->yq);
    linear(b->hn, R, &bl->ca.k, b->k);
    linear(b->hn, R, &bl->ca.v, b->v);
    for (uint32_t w = 0; w < nw; w++)
      for (uint32_t hh = 0; hh < m->NH; hh++) {
        size_t o = (size_t)w * I + hh * m->DK;
        attend(b->yq + o, b->k + (size_t)w * N * I + hh * m->DK, b->v + (size_t)w * N * I + hh * m->DK, N, I, m->DK, 0,
               0, b, b->yatt + o);
      }
    linear(b->yatt, nw, &bl->ca.o, b->yt);
    add_into(b->y, b->yt, (size_t)nw * D);
    /* feed-forward */
    rmsnorm(b->y, nw, D, bl->ln_ff, b->yn);
    linear(b->yn, nw, &bl->wi, b->hid);
    relu_all(b->hid, (size_t)nw * m->F);
    linear(b->hid, nw, &bl->wo, b->yt);
    add_into(b->y, b->yt, (size_t)nw * D);
  }
  rmsnorm(b->y, nw, D, m->dec_ln, b->yn);
  /* The quantile head, [nw, Q·H] (quantile-major), into b->qp */
  resblock(&m->out, b->yn, nw, b->hid, b->t, b->qp);
  double sum = 0;
  for (uint32_t w = 0; w < nw; w++) {
    const float *tgt = full + (size_t)w * W + m->C;
    const float *qp = b->qp + (size_t)w * NQ * m->H;
    for (uint32_t q = 0; q < NQ; q++)
      for (uint32_t k = 0; k < m->H; k++) {
        double t = (double)(float)(((double)tgt[k] - loc[w]) / scale[w]);
        double p = (double)qp[(size_t)q * m->H + k];
        double ind = t <= p ? 1.0 : 0.0;
        double d = (t - p) * (ind - (double)k_tau[q]);
        sum += 2.0 * (d < 0 ? -d : d);
      }
  }
  return sum / ((double)nw * (double)NQ);
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
  if (nparams != P_COUNT) return tz_fail(TZ_ERR_PARAMS, "want 9 parameters");
  model_t m;
  m.C = (uint32_t)params[P_CONTEXT], m.H = (uint32_t)params[P_HORIZON], m.P = (uint32_t)params[P_PATCH];
  m.D = (uint32_t)params[P_DMODEL], m.F = (uint32_t)params[P_DFF], m.L = (uint32_t)params[P_LAYERS];
  m.LD = (uint32_t)params[P_DEC_LAYERS], m.NH = (uint32_t)params[P_HEADS], m.DK = (uint32_t)params[P_DKV];
  if (m.C == 0 || m.H == 0 || m.P == 0 || m.D == 0 || m.F == 0 || m.L == 0 || m.LD == 0 || m.NH == 0 || m.DK == 0)
    return tz_fail(TZ_ERR_CONFIG, "every parameter must be at least 1");
  if ((uint64_t)m.NH * m.DK > 0x100000ull) return tz_fail(TZ_ERR_CONFIG, "num_heads·d_kv exceeds 2^20");
  m.I = m.NH * m.DK;
  m.T = (m.C + m.P - 1) / m.P; /* Patch: left-padded to a multiple of P */
  m.pad = m.T * m.P - m.C;
  m.N = m.T + 1; /* the REG token */
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
  m.enc = (block_t *)alloc_n(m.L, sizeof(block_t));
  m.dec = (block_t *)alloc_n(m.LD, sizeof(block_t));
  if (!m.enc || !m.dec) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  int32_t rc = bind_model(&m);
  if (rc) return rc;
  /* Every shape now fits (the model's tensors exist with these sizes, so
   * P, D, F, I, Q·H < 2^30); T < C + 1. */
  uint64_t nwin = (uint64_t)nbatch * bsize;
  float *full = (float *)alloc_n(nwin * wlen, 4);
  const uint64_t R = (uint64_t)bsize * m.N, nw = bsize;
  const uint64_t QH = (uint64_t)NQ * m.H;
  bufs_t b;
  b.pin = (float *)alloc_n(nw * m.T * 2 * m.P, 4);
  b.h = (float *)alloc_n(R * m.D, 4);
  b.hn = (float *)alloc_n(R * m.D, 4);
  b.t = (float *)alloc_n(R * m.D > nw * QH ? R * m.D : nw * QH, 4);
  b.q = (float *)alloc_n(R * m.I, 4);
  b.k = (float *)alloc_n(R * m.I, 4);
  b.v = (float *)alloc_n(R * m.I, 4);
  b.att = (float *)alloc_n(R * m.I, 4);
  b.hid = (float *)alloc_n(R * m.F, 4);
  b.y = (float *)alloc_n(nw * m.D, 4);
  b.yn = (float *)alloc_n(nw * m.D, 4);
  b.yt = (float *)alloc_n(nw * m.D, 4);
  b.yq = (float *)alloc_n(nw * m.I, 4);
  b.yatt = (float *)alloc_n(nw * m.I, 4);
  b.qp = (float *)alloc_n(nw * QH, 4);
  b.bias = (float *)alloc_n((2ull * m.N - 1) * m.NH, 4);
  b.e = (double *)alloc_n(m.N, 8);
  b.acc = (double *)alloc_n(m.DK, 8);
  double *loc = (double *)alloc_n(bsize, 8), *scale = (double *)alloc_n(bsize, 8);
  if (!full || !b.pin || !b.h || !b.hn || !b.t || !b.q || !b.k || !b.v || !b.att || !b.hid || !b.y || !b.yn || !b.yt ||
      !b.yq || !b.yatt || !b.qp || !b.bias || !b.e || !b.acc || !loc || !scale)
    return tz_fail(TZ_ERR_NOMEM, "out of memory for the windows and activations");
  for (uint64_t w = 0; w < nwin; w++)
    if ((rc = normalize(windows + w * wlen, m.C, wlen, full + w * wlen, (uint32_t)w))) return rc;
  /* Loss before, on every batch (the bias table read from the weights each
   * time: the step may change it). */
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t o = 0; o < 2 * m.N - 1; o++) {
      uint32_t bk = bucket((int64_t)o - (int64_t)(m.N - 1), 1);
      for (uint32_t hh = 0; hh < m.NH; hh++) b.bias[(size_t)o * m.NH + hh] = m.enc_bias[(size_t)bk * m.NH + hh];
    }
    for (uint32_t i = 0; i < nbatch; i++)
      out[2 * i + pass] = batch_loss(&m, full + (uint64_t)i * bsize * wlen, bsize, &b, loc, scale);
    if (pass) break;
    /* The outer step of the gradient alone (empty momentum buffer). */
    float nlr = -lr;
    for (uint32_t c = g0; c < g1; c++) {
      float g = dtype == TZ_F32 ? ((const float *)grad)[c - g0] : tz_bf16_to_f32(((const uint16_t *)grad)[c - g0]);
      float d = nesterov ? tz_fmaf(g, beta, g) : g;
      float w = tz_fmaf(d, nlr, g_wf[c]);
      g_wf[c] = dtype == TZ_F32 ? w : tz_bf16_to_f32(tz_f32_to_bf16(w));
    }
  }
  return TZ_OK;
}
