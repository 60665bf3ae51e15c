/* MultiKrum{f,m}: averages the m inputs with the lowest Krum scores
 * (Blanchard et al. 2017, NeurIPS, §4 "Multi-Krum"; El Mhamdi, Guerraoui,
 * Rouault 2018 use m = K-f). m = 0 means K-f. Needs K >= 2f+3 unless
 * relaxed=1. The selected inputs are summed in f64 in ascending (score,
 * index) order, so the output does not depend on input order. */
#include "krumcommon.h"

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  int64_t f = tz_param_int(params, nparams, 0, 1);
  int64_t m = tz_param_int(params, nparams, 1, 0);
  int64_t relaxed = tz_param_int(params, nparams, 2, 0);
  if (f < 0 || f >= k) return tz_fail(TZ_ERR_PARAMS, "f must be in [0, K)");
  if (m == 0) m = (int64_t)k - f;
  if (m < 1 || m > (int64_t)k) return tz_fail(TZ_ERR_TOO_FEW, "m must be in [1, K]");
  if (!relaxed && (int64_t)k < 2 * f + 3) return tz_fail(TZ_ERR_TOO_FEW, "MultiKrum needs K >= 2f+3");
  double *d;
  const float *x = tz_krum_prepare(dtype, k, n, inputs, (uint32_t)f, &d);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  uint8_t all[TZ_MAX_K];
  uint32_t idx[TZ_MAX_K];
  for (uint32_t i = 0; i < k; i++) all[i] = 1;
  uint32_t nb = tz_krum_nb(k, (uint32_t)f);
  for (uint32_t i = 0; i < k; i++) scores[i] = tz_krum_score(d, k, i, all, nb);
  tz_order_by_score(scores, k, idx);
  for (uint32_t i = 0; i < k; i++) selected[i] = 0;
  for (uint32_t q = 0; q < (uint32_t)m; q++) selected[idx[q]] = 1;
  v128_t mm = wasm_f64x2_splat((double)m);
  for (uint32_t c = 0; c < n; c += 4) {
    uint32_t valid = n - c;
    v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
    for (uint32_t q = 0; q < (uint32_t)m; q++) {
      v128_t v = tz_load4(x + (uint64_t)idx[q] * n + c, valid);
      s0 = wasm_f64x2_add(s0, tz_lo64(v));
      s1 = wasm_f64x2_add(s1, tz_hi64(v));
    }
    tz_store4(out + c, tz_join32(wasm_f64x2_div(s0, mm), wasm_f64x2_div(s1, mm)), valid);
  }
  return TZ_OK;
}
