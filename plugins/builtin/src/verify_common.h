#include "common.h"

/* A running L2 norm: four f64 lanes for F32 inputs, one sequential f64 sum
 * for BF16 inputs (coordinates in ascending order either way), carried from
 * chunk to chunk in chunked mode (ABI.md §6). */
typedef struct {
  tz_lanes l;
  double s;
  double pad;
} tz_norm_acc;

static void tz_norm_accum(uint32_t dtype, const void *in, uint32_t n, tz_norm_acc *acc) {
  if (dtype == TZ_F32) {
    tz_sqdist_accum((const float *)in, 0, n, &acc->l);
    return;
  }
  const uint16_t *h = (const uint16_t *)in;
  double s = acc->s;
  for (uint32_t c = 0; c < n; c++) {
    double v = (double)tz_bf16_to_f32(h[c]);
    s += v * v;
  }
  acc->s = s;
}

static double tz_norm_finish(uint32_t dtype, const tz_norm_acc *acc) {
  return __builtin_sqrt(dtype == TZ_F32 ? tz_fold(acc->l) : acc->s);
}

static inline void tz_norm_zero(tz_norm_acc *acc, uint32_t count) {
  for (uint32_t i = 0; i < count; i++) {
    tz_lanes_zero(&acc[i].l, 1);
    acc[i].s = 0;
  }
}

/* L2 norm in f64 of one whole input. */
static double tz_norm(uint32_t dtype, const void *in, uint32_t n) {
  tz_norm_acc acc;
  tz_norm_zero(&acc, 1);
  tz_norm_accum(dtype, in, n, &acc);
  return tz_norm_finish(dtype, &acc);
}
