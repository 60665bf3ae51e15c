/* L2NormBound{max}: rejects an input whose Euclidean norm exceeds max (norm
 * bounding as in Sun, Kairouz, Suresh, McMahan 2019, "Can You Really Backdoor
 * Federated Learning?"). A NaN norm is rejected. Per-submission verifier. */
#include "verify_common.h"

TZ_EXPORT(tenzro_verify)
int32_t tenzro_verify(uint32_t dtype, uint32_t n, const void *input, uint32_t k, const void *round,
                      const double *params, uint32_t nparams, uint32_t *verdict) {
  (void)k; (void)round;
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  double max = tz_param(params, nparams, 0, 0);
  if (!(max > 0)) return tz_fail(TZ_ERR_PARAMS, "max must be positive");
  double nr = tz_norm(dtype, input, n);
  verdict[0] = nr <= max;
  verdict[1] = nr <= max ? 0 : TZ_REASON_NORM;
  return TZ_OK;
}
