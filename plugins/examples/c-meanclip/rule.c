/* Example third-party rule in C: the mean of inputs after clipping each to an
 * L2 norm of at most `clip` (norm clipping, Sun et al. 2019, "Can You Really
 * Backdoor Federated Learning?"). Scalar C, f32 only, for clarity.
 *
 *   tenzro plugin build plugins/examples/c-meanclip
 */
#include "../../sdk/c/tenzro_plugin.h"

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  if (dtype != TZ_F32) return tz_fail(TZ_ERR_DTYPE, "MeanClip takes F32 inputs");
  if (k == 0) return tz_fail(TZ_ERR_TOO_FEW, "need at least one input");
  double clip = tz_param(params, nparams, 0, 1.0);
  const float *x = (const float *)inputs;
  for (uint32_t c = 0; c < n; c++) out[c] = 0;
  for (uint32_t i = 0; i < k; i++) {
    double s = 0;
    for (uint32_t c = 0; c < n; c++) s += (double)x[(uint64_t)i * n + c] * x[(uint64_t)i * n + c];
    double norm = __builtin_sqrt(s), f = norm > clip ? clip / norm : 1.0;
    scores[i] = f;
    selected[i] = 1;
    for (uint32_t c = 0; c < n; c++) out[c] += (float)(f * x[(uint64_t)i * n + c] / k);
  }
  return TZ_OK;
}
