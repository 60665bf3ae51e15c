/* NormRatio{max_ratio}: round-level verifier; rejects an input whose L2 norm
 * exceeds max_ratio times the median norm of the round's inputs (median-based
 * norm filtering, cf. Sun et al. 2019 and FLAME, Nguyen et al. 2022, USENIX
 * Security). Even round sizes use the mean of the two middle norms. */
#include "verify_common.h"

TZ_EXPORT(tenzro_verify)
int32_t tenzro_verify(uint32_t dtype, uint32_t n, const void *input, uint32_t k, const void *round,
                      const double *params, uint32_t nparams, uint32_t *verdict) {
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  double ratio = tz_param(params, nparams, 0, 0);
  if (!(ratio > 0)) return tz_fail(TZ_ERR_PARAMS, "max_ratio must be positive");
  if (k == 0 || k > TZ_MAX_K) return tz_fail(TZ_ERR_TOO_FEW, "round-level verifier needs 1..256 round inputs");
  double norms[TZ_MAX_K];
  uint32_t es = dtype == TZ_F32 ? 4 : 2;
  for (uint32_t i = 0; i < k; i++) {
    double x = tz_norm(dtype, (const uint8_t *)round + (uint64_t)i * n * es, n);
    uint32_t q = i;
    while (q > 0 && norms[q - 1] > x) { norms[q] = norms[q - 1]; q--; }
    norms[q] = x;
  }
  double med = (k & 1u) ? norms[k / 2] : (norms[k / 2 - 1] + norms[k / 2]) * 0.5;
  double nr = tz_norm(dtype, input, n);
  int ok = nr <= ratio * med;
  verdict[0] = ok;
  verdict[1] = ok ? 0 : TZ_REASON_NORM_RATIO;
  return TZ_OK;
}
