/* Mean: coordinate-wise arithmetic mean of the K inputs (FedAvg with equal
 * weights; McMahan et al. 2017, "Communication-Efficient Learning of Deep
 * Networks from Decentralized Data", AISTATS).
 * Each coordinate is summed in f64 in input order and divided by K in f64,
 * then rounded once to f32. */
#include "common.h"

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  (void)params; (void)nparams; (void)scores;
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory converting bf16");
  v128_t kk = wasm_f64x2_splat((double)k);
  uint32_t c = 0;
  /* 16 coordinates per step: fewer loop iterations, so fewer fuel checks. */
  for (; c + 16 <= n; c += 16) {
    v128_t s[8];
    for (int q = 0; q < 8; q++) s[q] = wasm_f64x2_splat(0.0);
    for (uint32_t i = 0; i < k; i++) {
      const float *p = x + (uint64_t)i * n + c;
      for (int q = 0; q < 4; q++) {
        v128_t v = wasm_v128_load(p + 4 * q);
        s[2 * q] = wasm_f64x2_add(s[2 * q], tz_lo64(v));
        s[2 * q + 1] = wasm_f64x2_add(s[2 * q + 1], tz_hi64(v));
      }
    }
    for (int q = 0; q < 4; q++)
      wasm_v128_store(out + c + 4 * q, tz_join32(wasm_f64x2_div(s[2 * q], kk), wasm_f64x2_div(s[2 * q + 1], kk)));
  }
  for (; c < n; c += 4) {
    uint32_t valid = n - c;
    v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
    for (uint32_t i = 0; i < k; i++) {
      v128_t v = tz_load4(x + (uint64_t)i * n + c, valid);
      s0 = wasm_f64x2_add(s0, tz_lo64(v));
      s1 = wasm_f64x2_add(s1, tz_hi64(v));
    }
    tz_store4(out + c, tz_join32(wasm_f64x2_div(s0, kk), wasm_f64x2_div(s1, kk)), valid);
  }
  for (uint32_t i = 0; i < k; i++) selected[i] = 1;
  return TZ_OK;
}
