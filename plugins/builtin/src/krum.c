/* Krum{f}: selects the input whose sum of squared distances to its K-f-2
 * nearest neighbours is smallest (Blanchard, El Mhamdi, Guerraoui, Stainer
 * 2017, "Machine Learning with Adversaries: Byzantine Tolerant Gradient
 * Descent", NeurIPS). Requires K >= 2f+3 unless relaxed=1, in which case the
 * neighbour count is max(1, K-f-2) as in Flower's aggregate_krum. Ties go to
 * the lowest index. Scores are the Krum scores. Chunked: two passes
 * (krumcommon.h). */
#include "krumcommon.h"

static int32_t check(uint32_t k, const double *params, uint32_t nparams) {
  int64_t f = tz_param_int(params, nparams, 0, 1);
  int64_t relaxed = tz_param_int(params, nparams, 1, 0);
  if (f < 0 || f >= k) return tz_fail(TZ_ERR_PARAMS, "f must be in [0, K)");
  if (!relaxed && (int64_t)k < 2 * f + 3) return tz_fail(TZ_ERR_TOO_FEW, "Krum needs K >= 2f+3");
  return TZ_OK;
}

static void sel(const double *d, uint32_t k, const double *params, uint32_t nparams, tz_krum_carry *c) {
  uint32_t f = (uint32_t)tz_param_int(params, nparams, 0, 1);
  uint8_t all[TZ_MAX_K];
  for (uint32_t i = 0; i < k; i++) all[i] = 1;
  uint32_t nb = tz_krum_nb(k, f), best = 0;
  for (uint32_t i = 0; i < k; i++) {
    c->scores[i] = tz_krum_score(d, k, i, all, nb);
    if (tz_dless(c->scores[i], c->scores[best])) best = i;
  }
  for (uint32_t i = 0; i < k; i++) c->selected[i] = i == best;
  c->order[0] = best;
  c->nsel = 1;
}

static void apply(const float *x, uint32_t k, uint32_t n, const tz_krum_carry *c, float *out) {
  (void)k;
  tz_copy_input(x, n, c->order[0], out);
}

TZ_KRUM_RULE(check, sel, apply)
