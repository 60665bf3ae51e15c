/* CoordinateMedian: coordinate-wise median (Yin, Chen, Ramchandran, Bartlett
 * 2018, "Byzantine-Robust Distributed Learning: Towards Optimal Statistical
 * Rates", ICML). For even K the two middle values are averaged in f64. */
#include "sortbased.h"

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  (void)params; (void)nparams; (void)scores;
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory converting bf16");
  v128_t half = wasm_f64x2_splat(0.5);
  if (k & 1u) {
    TZ_SORTED_LOOP(x, k, n, out, { r = v[k / 2]; });
  } else {
    TZ_SORTED_LOOP(x, k, n, out, {
      v128_t a = v[k / 2 - 1], b = v[k / 2];
      r = tz_join32(wasm_f64x2_mul(wasm_f64x2_add(tz_lo64(a), tz_lo64(b)), half),
                    wasm_f64x2_mul(wasm_f64x2_add(tz_hi64(a), tz_hi64(b)), half));
    });
  }
  for (uint32_t i = 0; i < k; i++) selected[i] = 1;
  return TZ_OK;
}
