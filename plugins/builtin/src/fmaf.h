/* tz_fmaf: a correctly rounded f32 fused multiply-add without an FMA
 * instruction (Wasm has none outside relaxed SIMD). The f64 product of two
 * f32 is exact, the f64 sum is made exact with TwoSum (Knuth, TAOCP vol. 2,
 * 4.2.2) and rounded to odd (Boldo, Melquiond 2008, IEEE TC) before the final
 * rounding to f32, which avoids double rounding. Shared by the outer step
 * (nesterov.c) and the evaluators, which apply a gradient exactly as the
 * outer step would. */
#ifndef TZ_FMAF_H
#define TZ_FMAF_H
#include "common.h"

static inline float tz_fmaf(float a, float b, float c) {
  double p = (double)a * (double)b; /* exact: 24+24 bits <= 53 */
  double cc = (double)c;
  double s = p + cc;
  if (!(s - s == 0)) return (float)s; /* inf or NaN */
  double bb = s - p;
  double e = (p - (s - bb)) + (cc - bb); /* s + e == p + c exactly */
  if (e != 0) {
    uint64_t bits;
    __builtin_memcpy(&bits, &s, 8);
    if ((bits & 1u) == 0) { /* make s the odd neighbour on e's side */
      if ((e > 0) == (s > 0)) bits++;
      else bits--;
      __builtin_memcpy(&s, &bits, 8);
    }
  }
  return (float)s;
}

#endif
