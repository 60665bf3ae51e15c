/* TrimmedMean{alpha_bps}: coordinate-wise trimmed mean. With t =
 * floor(alpha_bps*K/10000), the t smallest and t largest values of each
 * coordinate are dropped and the rest averaged (Yin, Chen, Ramchandran,
 * Bartlett 2018, "Byzantine-Robust Distributed Learning: Towards Optimal
 * Statistical Rates", ICML). Sorted values are summed in ascending order in
 * f64, so the result does not depend on the order of the inputs. */
#include "sortbased.h"

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  (void)scores;
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  int64_t alpha = tz_param_int(params, nparams, 0, 1000);
  if (alpha < 0 || alpha >= 5000) return tz_fail(TZ_ERR_PARAMS, "alpha_bps must be in [0, 5000)");
  uint32_t t = (uint32_t)((alpha * (int64_t)k) / 10000);
  if (2 * t >= k) return tz_fail(TZ_ERR_TOO_FEW, "trimming leaves no values (2*floor(alpha*K) >= K)");
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory converting bf16");
  v128_t cnt = wasm_f64x2_splat((double)(k - 2 * t));
  /* Values outside [t, K-t) add +0.0, which leaves the sum's bits unchanged
   * (it starts at +0.0 and so is never -0.0): the same sum as adding only the
   * kept values, in the same order, with v indexed by constants. */
  v128_t zero = wasm_f64x2_splat(0.0);
  TZ_SORTED_LOOP(x, k, n, out, {
    v128_t s0 = zero, s1 = zero;
    for (uint32_t i = 0; i < k; i++) {
      int keep = i >= t && i < k - t;
      s0 = wasm_f64x2_add(s0, keep ? tz_lo64(v[i]) : zero);
      s1 = wasm_f64x2_add(s1, keep ? tz_hi64(v[i]) : zero);
    }
    r = tz_join32(wasm_f64x2_div(s0, cnt), wasm_f64x2_div(s1, cnt));
  });
  for (uint32_t i = 0; i < k; i++) selected[i] = 1;
  return TZ_OK;
}
