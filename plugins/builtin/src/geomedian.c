/* GeometricMedian{iterations,nu}: smoothed Weiszfeld iterations for the
 * geometric median (Pillutla, Kakade, Harchaoui 2022, "Robust Aggregation for
 * Federated Learning", IEEE TSP, Algorithm 3; Weiszfeld 1937). Starts at the
 * mean; each iteration sets w_i = 1/max(nu, ||z - x_i||) and
 * z = sum_i w_i x_i / sum_i w_i. A fixed number of iterations (no early stop)
 * keeps the cost and result deterministic. Scores are the final normalised
 * weights. Sums run in f64 in input order. */
#include "common.h"

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

static double dist(const float *a, const float *z, uint32_t n) {
  v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
  for (uint32_t c = 0; c < n; c += 4) {
    uint32_t valid = n - c;
    v128_t va = tz_load4(a + c, valid), vz = tz_load4(z + c, valid);
    v128_t d0 = wasm_f64x2_sub(tz_lo64(va), tz_lo64(vz)), d1 = wasm_f64x2_sub(tz_hi64(va), tz_hi64(vz));
    s0 = wasm_f64x2_add(s0, wasm_f64x2_mul(d0, d0));
    s1 = wasm_f64x2_add(s1, wasm_f64x2_mul(d1, d1));
  }
  v128_t s = wasm_f64x2_add(s0, s1);
  return __builtin_sqrt(wasm_f64x2_extract_lane(s, 0) + wasm_f64x2_extract_lane(s, 1));
}

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  int64_t iters = tz_param_int(params, nparams, 0, 4);
  double nu = tz_param(params, nparams, 1, 1e-6);
  if (iters < 0 || iters > 1000) return tz_fail(TZ_ERR_PARAMS, "iterations must be in [0, 1000]");
  if (!(nu > 0)) return tz_fail(TZ_ERR_PARAMS, "nu must be positive");
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory converting bf16");
  double w[TZ_MAX_K];
  for (uint32_t i = 0; i < k; i++) w[i] = 1.0;
  weighted_avg(x, k, n, w, out);
  for (int64_t it = 0; it < iters; it++) {
    for (uint32_t i = 0; i < k; i++) {
      double di = dist(x + (uint64_t)i * n, out, n);
      w[i] = 1.0 / (di > nu ? di : nu);
    }
    weighted_avg(x, k, n, w, out);
  }
  double ws = 0;
  for (uint32_t i = 0; i < k; i++) ws += w[i];
  for (uint32_t i = 0; i < k; i++) scores[i] = w[i] / ws, selected[i] = 1;
  return TZ_OK;
}
