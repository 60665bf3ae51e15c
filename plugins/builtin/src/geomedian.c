/* GeometricMedian{iterations,nu}: smoothed Weiszfeld iterations for the
 * geometric median (Pillutla, Kakade, Harchaoui 2022, "Robust Aggregation for
 * Federated Learning", IEEE TSP, Algorithm 3; Weiszfeld 1937). Starts at the
 * mean; each iteration sets w_i = 1/max(nu, ||z - x_i||) and
 * z = sum_i w_i x_i / sum_i w_i. A fixed number of iterations (no early stop)
 * keeps the cost and result deterministic. Scores are the final normalised
 * weights. Sums run in f64 in input order.
 *
 * Passes (ABI.md §6): iterations+1. Pass p computes z_p = avg(x, w_p) on the
 * chunk (w_0 = 1) and, while p < iterations, adds ||x_i - z_p||^2 to the
 * carried lanes of input i; the first chunk of pass p+1 folds the lanes into
 * w_{p+1}. The last pass writes z. The whole-fragment entry point runs the
 * same passes over one chunk. */
#include "common.h"

typedef struct {
  double w[TZ_MAX_K];
  tz_lanes acc[TZ_MAX_K];
} carry_t;

static void weighted_avg(const float *x, uint32_t k, uint32_t n, const double *w, float *z) {
  double ws = 0;
  for (uint32_t i = 0; i < k; i++) ws += w[i];
  v128_t den = wasm_f64x2_splat(ws);
  for (uint32_t c = 0; c < n; c += 4) {
    uint32_t valid = n - c;
    v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
    for (uint32_t i = 0; i < k; i++) {
      v128_t v = tz_load4(x + (uint64_t)i * n + c, valid), wi = wasm_f64x2_splat(w[i]);
      s0 = wasm_f64x2_add(s0, wasm_f64x2_mul(wi, tz_lo64(v)));
      s1 = wasm_f64x2_add(s1, wasm_f64x2_mul(wi, tz_hi64(v)));
    }
    tz_store4(z + c, tz_join32(wasm_f64x2_div(s0, den), wasm_f64x2_div(s1, den)), valid);
  }
}

static int32_t check(uint32_t dtype, uint32_t k, uint32_t n, const double *params, uint32_t nparams) {
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  int64_t iters = tz_param_int(params, nparams, 0, 4);
  double nu = tz_param(params, nparams, 1, 1e-6);
  if (iters < 0 || iters > 1000) return tz_fail(TZ_ERR_PARAMS, "iterations must be in [0, 1000]");
  if (!(nu > 0)) return tz_fail(TZ_ERR_PARAMS, "nu must be positive");
  return TZ_OK;
}

/* One pass over one chunk; x holds the chunk's inputs as f32. */
static int32_t pass_chunk(const float *x, uint32_t k, uint32_t n, uint32_t c0, const double *params, uint32_t nparams,
                          uint32_t pass, carry_t *cs, float *out, uint8_t *selected, double *scores) {
  uint32_t iters = (uint32_t)tz_param_int(params, nparams, 0, 4);
  double nu = tz_param(params, nparams, 1, 1e-6);
  if (pass > iters) return tz_fail(TZ_ERR_PARAMS, "pass out of range");
  if (c0 == 0) {
    for (uint32_t i = 0; i < k; i++) {
      if (pass == 0) {
        cs->w[i] = 1.0;
      } else {
        double di = __builtin_sqrt(tz_fold(cs->acc[i]));
        cs->w[i] = 1.0 / (di > nu ? di : nu);
      }
    }
    tz_lanes_zero(cs->acc, k);
  }
  weighted_avg(x, k, n, cs->w, out);
  if (pass < iters) {
    for (uint32_t i = 0; i < k; i++) tz_sqdist_accum(x + (uint64_t)i * n, out, n, &cs->acc[i]);
    return TZ_OK;
  }
  double ws = 0;
  for (uint32_t i = 0; i < k; i++) ws += cs->w[i];
  for (uint32_t i = 0; i < k; i++) scores[i] = cs->w[i] / ws, selected[i] = 1;
  return TZ_OK;
}

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  int32_t rc = check(dtype, k, n, params, nparams);
  if (rc) return rc;
  carry_t *cs = (carry_t *)tz_alloc(sizeof(carry_t));
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!cs || !x) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  uint32_t iters = (uint32_t)tz_param_int(params, nparams, 0, 4);
  for (uint32_t p = 0; p <= iters; p++)
    if ((rc = pass_chunk(x, k, n, 0, params, nparams, p, cs, out, selected, scores))) return rc;
  return TZ_OK;
}

TZ_EXPORT(tenzro_chunk_plan)
int32_t tenzro_chunk_plan(uint32_t k, uint32_t ntotal, const double *params, uint32_t nparams, uint32_t *plan) {
  int32_t rc = check(TZ_F32, k, ntotal, params, nparams);
  if (rc) return rc;
  tz_plan(plan, (uint32_t)tz_param_int(params, nparams, 0, 4) + 1, sizeof(carry_t));
  return TZ_OK;
}

TZ_EXPORT(tenzro_chunk_pass)
int32_t tenzro_chunk_pass(uint32_t dtype, uint32_t k, uint32_t n, uint32_t c0, uint32_t ntotal, const void *inputs,
                          const double *params, uint32_t nparams, uint32_t pass, void *carry, float *out,
                          uint8_t *selected, double *scores) {
  int32_t rc = tz_check_chunk(n, c0, ntotal);
  if (rc || (rc = check(dtype, k, n, params, nparams))) return rc;
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory converting bf16");
  return pass_chunk(x, k, n, c0, params, nparams, pass, (carry_t *)carry, out, selected, scores);
}
