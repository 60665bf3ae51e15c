/* CenteredClipping{tau,iterations} (Karimireddy, He, Jaggi 2021, "Learning
 * from History for Byzantine Robust Optimization", ICML, eq. (CC)):
 *   v <- v + (1/K) sum_i (x_i - v) * min(1, tau/||x_i - v||)
 * repeated `iterations` times. The plugin is stateless, so v starts at 0 (the
 * paper starts from the previous aggregate; a pseudo-gradient's natural centre
 * is 0). Sums run in f64 in input order. Scores are the last clipping factors. */
#include "common.h"

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  double tau = tz_param(params, nparams, 0, 1.0);
  int64_t iters = tz_param_int(params, nparams, 1, 1);
  if (!(tau > 0)) return tz_fail(TZ_ERR_PARAMS, "tau must be positive");
  if (iters < 1 || iters > 100) return tz_fail(TZ_ERR_PARAMS, "iterations must be in [1, 100]");
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory converting bf16");
  for (uint32_t c = 0; c < n; c++) out[c] = 0;
  double cf[TZ_MAX_K];
  for (int64_t it = 0; it < iters; it++) {
    for (uint32_t i = 0; i < k; i++) {
      const float *a = x + (uint64_t)i * n;
      v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
      for (uint32_t c = 0; c < n; c += 4) {
        uint32_t valid = n - c;
        v128_t va = tz_load4(a + c, valid), vz = tz_load4(out + c, valid);
        v128_t d0 = wasm_f64x2_sub(tz_lo64(va), tz_lo64(vz)), d1 = wasm_f64x2_sub(tz_hi64(va), tz_hi64(vz));
        s0 = wasm_f64x2_add(s0, wasm_f64x2_mul(d0, d0));
        s1 = wasm_f64x2_add(s1, wasm_f64x2_mul(d1, d1));
      }
      v128_t s = wasm_f64x2_add(s0, s1);
      double r = __builtin_sqrt(wasm_f64x2_extract_lane(s, 0) + wasm_f64x2_extract_lane(s, 1));
      cf[i] = (r <= tau) ? 1.0 : tau / r;
    }
    v128_t kk = wasm_f64x2_splat((double)k);
    for (uint32_t c = 0; c < n; c += 4) {
      uint32_t valid = n - c;
      v128_t vz = tz_load4(out + c, valid);
      v128_t z0 = tz_lo64(vz), z1 = tz_hi64(vz);
      v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
      for (uint32_t i = 0; i < k; i++) {
        v128_t va = tz_load4(x + (uint64_t)i * n + c, valid), ci = wasm_f64x2_splat(cf[i]);
        s0 = wasm_f64x2_add(s0, wasm_f64x2_mul(ci, wasm_f64x2_sub(tz_lo64(va), z0)));
        s1 = wasm_f64x2_add(s1, wasm_f64x2_mul(ci, wasm_f64x2_sub(tz_hi64(va), z1)));
      }
      tz_store4(out + c, tz_join32(wasm_f64x2_add(z0, wasm_f64x2_div(s0, kk)), wasm_f64x2_add(z1, wasm_f64x2_div(s1, kk))),
                valid);
    }
  }
  for (uint32_t i = 0; i < k; i++) scores[i] = cf[i], selected[i] = 1;
  return TZ_OK;
}
