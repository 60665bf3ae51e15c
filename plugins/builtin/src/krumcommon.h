/* Distance matrix and Krum scores shared by Krum, MultiKrum and Bulyan. */
#include "common.h"

/* Computes pairwise distances and the Krum score of every input over all K.
 * Returns the f32 inputs or NULL on out-of-memory. */
static const float *tz_krum_prepare(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, uint32_t f,
                                    double **dout) {
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!x) return 0;
  double *d = (double *)tz_alloc(k * k * 8);
  if (!d) return 0;
  if (!tz_pair_dists(x, k, n, d)) return 0;
  *dout = d;
  (void)f;
  return x;
}

/* Sorts indices by (score, index) ascending. */
static void tz_order_by_score(const double *s, uint32_t k, uint32_t *idx) {
  for (uint32_t i = 0; i < k; i++) {
    uint32_t q = i;
    while (q > 0 && s[idx[q - 1]] > s[i]) { idx[q] = idx[q - 1]; q--; }
    idx[q] = i;
  }
}
