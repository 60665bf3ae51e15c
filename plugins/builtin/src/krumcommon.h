/* Distance matrix, Krum scores and the two-pass chunked driver shared by
 * Krum, MultiKrum and Bulyan.
 *
 * Pass 0 adds each chunk's pairwise squared differences to the carried pair
 * lanes; pass 1 (first chunk) folds them into the distance matrix, runs the
 * rule's selection once and keeps it in the carry, then (every chunk)
 * applies the selection coordinate-wise. The whole-fragment entry point runs
 * the same two passes over one chunk, so both paths compute the same bytes. */
#include "common.h"

/* The carried state. The selection part is filled once, on the first chunk
 * of pass 1; the pair lanes follow the header. */
typedef struct {
  uint32_t ready; /* selection computed */
  uint32_t nsel;  /* entries of order[] the apply step uses */
  uint32_t order[TZ_MAX_K];
  uint8_t selected[TZ_MAX_K];
  double scores[TZ_MAX_K];
} tz_krum_carry;

#define TZ_KRUM_HDR ((sizeof(tz_krum_carry) + 15u) & ~15u)

static inline uint32_t tz_krum_carry_bytes(uint32_t k) { return TZ_KRUM_HDR + tz_npairs(k) * (uint32_t)sizeof(tz_lanes); }
static inline tz_lanes *tz_krum_lanes(tz_krum_carry *c) { return (tz_lanes *)((uint8_t *)c + TZ_KRUM_HDR); }

/* Sorts indices by (score, index) ascending. */
static void tz_order_by_score(const double *s, uint32_t k, uint32_t *idx) {
  for (uint32_t i = 0; i < k; i++) {
    uint32_t q = i;
    while (q > 0 && tz_dless(s[i], s[idx[q - 1]])) { idx[q] = idx[q - 1]; q--; }
    idx[q] = i;
  }
}

/* A rule: check its parameters for K, select from the distance matrix into
 * the carry, apply the selection to a chunk. */
typedef int32_t (*tz_krum_check_fn)(uint32_t k, const double *params, uint32_t nparams);
typedef void (*tz_krum_select_fn)(const double *d, uint32_t k, const double *params, uint32_t nparams, tz_krum_carry *c);
typedef void (*tz_krum_apply_fn)(const float *x, uint32_t k, uint32_t n, const tz_krum_carry *c, float *out);

/* One pass over one chunk; x holds the chunk's inputs as f32. */
static int32_t tz_krum_pass(const float *x, uint32_t k, uint32_t n, const double *params, uint32_t nparams,
                            uint32_t pass, void *carry, float *out, uint8_t *selected, double *scores,
                            tz_krum_select_fn sel, tz_krum_apply_fn apply) {
  if (pass > 1) return tz_fail(TZ_ERR_PARAMS, "pass out of range");
  tz_krum_carry *c = (tz_krum_carry *)carry;
  if (pass == 0) {
    tz_pair_accum(x, k, n, tz_krum_lanes(c));
    return TZ_OK;
  }
  if (!c->ready) {
    double *d = (double *)tz_alloc(k * k * 8);
    if (!d) return tz_fail(TZ_ERR_NOMEM, "out of memory");
    tz_pair_finish(tz_krum_lanes(c), k, d);
    sel(d, k, params, nparams, c);
    c->ready = 1;
  }
  apply(x, k, n, c, out);
  for (uint32_t i = 0; i < k; i++) selected[i] = c->selected[i], scores[i] = c->scores[i];
  return TZ_OK;
}

/* The whole-fragment entry point: both passes over one chunk. */
static int32_t tz_krum_whole(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                             uint32_t nparams, float *out, uint8_t *selected, double *scores, tz_krum_check_fn check,
                             tz_krum_select_fn sel, tz_krum_apply_fn apply) {
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  if ((rc = check(k, params, nparams))) return rc;
  uint32_t bytes = tz_krum_carry_bytes(k);
  void *carry = tz_alloc(bytes);
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!carry || !x) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  __builtin_memset(carry, 0, bytes);
  tz_lanes_zero(tz_krum_lanes((tz_krum_carry *)carry), tz_npairs(k));
  for (uint32_t pass = 0; pass < 2; pass++)
    if ((rc = tz_krum_pass(x, k, n, params, nparams, pass, carry, out, selected, scores, sel, apply)))
      return rc;
  return TZ_OK;
}

/* Defines the three entry points of a Krum-family rule. */
#define TZ_KRUM_RULE(check, sel, apply)                                                                              \
  TZ_EXPORT(tenzro_aggregate)                                                                                        \
  int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,         \
                           uint32_t nparams, float *out, uint8_t *selected, double *scores) {                        \
    return tz_krum_whole(dtype, k, n, inputs, params, nparams, out, selected, scores, check, sel, apply);            \
  }                                                                                                                  \
  TZ_EXPORT(tenzro_chunk_plan)                                                                                       \
  int32_t tenzro_chunk_plan(uint32_t k, uint32_t ntotal, const double *params, uint32_t nparams, uint32_t *plan) {    \
    int32_t rc = tz_check_common(TZ_F32, k, ntotal);                                                                 \
    if (rc || (rc = check(k, params, nparams))) return rc;                                                           \
    tz_plan(plan, 2, tz_krum_carry_bytes(k));                                                                        \
    return TZ_OK;                                                                                                    \
  }                                                                                                                  \
  TZ_EXPORT(tenzro_chunk_pass)                                                                                       \
  int32_t tenzro_chunk_pass(uint32_t dtype, uint32_t k, uint32_t n, uint32_t c0, uint32_t ntotal, const void *inputs, \
                            const double *params, uint32_t nparams, uint32_t pass, void *carry, float *out,          \
                            uint8_t *selected, double *scores) {                                                     \
    int32_t rc = tz_check_chunk(n, c0, ntotal);                                                                      \
    if (rc || (rc = tz_check_common(dtype, k, n)) || (rc = check(k, params, nparams))) return rc;                     \
    const float *x = tz_inputs_f32(dtype, k, n, inputs);                                                             \
    if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory");                                                           \
    return tz_krum_pass(x, k, n, params, nparams, pass, carry, out, selected, scores, sel, apply);                   \
  }
