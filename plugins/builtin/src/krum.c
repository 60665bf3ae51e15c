/* Krum{f}: selects the input whose sum of squared distances to its K-f-2
 * nearest neighbours is smallest (Blanchard, El Mhamdi, Guerraoui, Stainer
 * 2017, "Machine Learning with Adversaries: Byzantine Tolerant Gradient
 * Descent", NeurIPS). Requires K >= 2f+3 unless relaxed=1, in which case the
 * neighbour count is max(1, K-f-2) as in Flower's aggregate_krum. Ties go to
 * the lowest index. Scores are the Krum scores. */
#include "krumcommon.h"

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  int64_t f = tz_param_int(params, nparams, 0, 1);
  int64_t relaxed = tz_param_int(params, nparams, 1, 0);
  if (f < 0 || f >= k) return tz_fail(TZ_ERR_PARAMS, "f must be in [0, K)");
  if (!relaxed && (int64_t)k < 2 * f + 3) return tz_fail(TZ_ERR_TOO_FEW, "Krum needs K >= 2f+3");
  double *d;
  const float *x = tz_krum_prepare(dtype, k, n, inputs, (uint32_t)f, &d);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  uint8_t all[TZ_MAX_K];
  for (uint32_t i = 0; i < k; i++) all[i] = 1;
  uint32_t nb = tz_krum_nb(k, (uint32_t)f), best = 0;
  for (uint32_t i = 0; i < k; i++) {
    scores[i] = tz_krum_score(d, k, i, all, nb);
    if (scores[i] < scores[best]) best = i;
  }
  for (uint32_t i = 0; i < k; i++) selected[i] = i == best;
  tz_copy_input(x, n, best, out);
  return TZ_OK;
}
