#include "common.h"

/* L2 norm in f64 (input order of coordinates, two f64 lanes per half). */
static double tz_norm(uint32_t dtype, const void *in, uint32_t n) {
  double s = 0;
  if (dtype == TZ_F32) {
    const float *a = (const float *)in;
    v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
    for (uint32_t c = 0; c < n; c += 4) {
      v128_t v = tz_load4(a + c, n - c);
      v128_t d0 = tz_lo64(v), d1 = tz_hi64(v);
      s0 = wasm_f64x2_add(s0, wasm_f64x2_mul(d0, d0));
      s1 = wasm_f64x2_add(s1, wasm_f64x2_mul(d1, d1));
    }
    v128_t t = wasm_f64x2_add(s0, s1);
    s = wasm_f64x2_extract_lane(t, 0) + wasm_f64x2_extract_lane(t, 1);
  } else {
    const uint16_t *h = (const uint16_t *)in;
    for (uint32_t c = 0; c < n; c++) {
      double v = (double)tz_bf16_to_f32(h[c]);
      s += v * v;
    }
  }
  return __builtin_sqrt(s);
}
