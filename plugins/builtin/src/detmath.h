/* Deterministic transcendental functions for the evaluators (score plugins,
 * ABI.md §4.2). Written here, from their series; no libc. Everything is f64
 * arithmetic made of IEEE-754 operations that WebAssembly defines exactly
 * (+, -, *, /, sqrt, nearest, conversions), evaluated in a fixed order under
 * -ffp-contract=off, so the results are the same bits on every engine and
 * machine. Accuracy (checked against Python's math.exp / math.erf over a
 * dense grid while writing them): tz_exp within 1 ulp (x in [-50, 50]), tz_erf within
 * 1.2e-15 absolute (x in [-10, 10]) — far below the f32 rounding of the activations that use them. */
#ifndef TZ_DETMATH_H
#define TZ_DETMATH_H
#include <stdint.h>

static inline double tz_f64_from_bits(uint64_t b) {
  double d;
  __builtin_memcpy(&d, &b, 8);
  return d;
}

/* 2^k for -1022 <= k <= 1023, exactly. */
static inline double tz_pow2(int32_t k) { return tz_f64_from_bits((uint64_t)(k + 1023) << 52); }

/* e^x. Range reduction x = k·ln2 + r with ln2 split in two (Cody & Waite
 * 1980: the high part has trailing zero bits, so k·LN2_HI is exact for
 * |k| < 2^11), |r| <= ln2/2, then the Taylor polynomial of e^r to degree 13
 * (remainder < 4e-18 on that interval), Horner order, scaled by 2^k in two
 * exact steps so subnormal results need no special case. */
static inline double tz_exp(double x) {
  if (x != x) return x;
  if (x > 709.782712893384) return tz_f64_from_bits(0x7ff0000000000000ull);
  if (x < -745.1332191019412) return 0.0;
  const double LN2_HI = 6.93147180369123816490e-01; /* 0x3fe62e42fee00000 */
  const double LN2_LO = 1.90821492927058770002e-10;
  const double INV_LN2 = 1.44269504088896338700e+00;
  double kd = __builtin_nearbyint(x * INV_LN2);
  double r = (x - kd * LN2_HI) - kd * LN2_LO;
  double p = 1.0 / 6227020800.0; /* 1/13! */
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  int32_t k = (int32_t)kd;
  int32_t k1 = k / 2;
  return p * tz_pow2(k1) * tz_pow2(k - k1);
}

/* erf on a grid: erf(x0 + h) as its Taylor polynomial of degree 10 around
 * the nearest grid point x0 = j/8 (|h| <= 1/16; truncation error < 2e-16). The
 * coefficients are erf(x0) and erf^(m)(x0)/m! = (2/√π)·(-1)^(m-1)·
 * H_{m-1}(x0)·e^(-x0²)/m! (physicists' Hermite polynomials, H_{n+1} =
 * 2x·H_n - 2n·H_{n-1}); erf(x0) itself is (2/√π)·e^(-x0²)·Σ 2^n
 * x0^(2n+1)/(2n+1)!!, a series of positive terms (no cancellation). The
 * table is computed on first use in every instance (the same operations in
 * the same order: the same bits). erf(x) = ±1 for |x| >= 6 (1 - erf(6) <
 * 2.2e-17, below half an ulp of 1). */
#define TZ_ERF_GRID 48
#define TZ_ERF_DEG 10
static double tz_erf_tab[TZ_ERF_GRID + 1][TZ_ERF_DEG + 1];
static int tz_erf_ready;

static void tz_erf_init(void) {
  const double TWO_OVER_SQRTPI = 1.12837916709551257390;
  for (int j = 0; j <= TZ_ERF_GRID; j++) {
    double x = (double)j * 0.125;
    double g = TWO_OVER_SQRTPI * tz_exp(-x * x);
    double term = x, sum = 0;
    for (int n = 0; n < 400 && term != 0; n++) {
      sum += term;
      if (term < sum * 1e-18) break;
      term = term * (2.0 * x * x) / (double)(2 * n + 3);
    }
    tz_erf_tab[j][0] = g * sum;
    double hm1 = 0, h = 1, fact = 1; /* H_{-1} unused, H_0 = 1 */
    for (int m = 1; m <= TZ_ERF_DEG; m++) {
      int n = m - 1; /* h = H_n(x) */
      fact *= (double)m;
      double c = g * h / fact;
      tz_erf_tab[j][m] = (n & 1) ? -c : c;
      double next = 2.0 * x * h - 2.0 * (double)n * hm1;
      hm1 = h;
      h = next;
    }
  }
  tz_erf_ready = 1;
}

static inline double tz_erf(double x) {
  if (x != x) return x;
  double a = x < 0 ? -x : x;
  double y;
  if (a >= 6.0) {
    y = 1.0;
  } else {
    if (!tz_erf_ready) tz_erf_init();
    int32_t j = (int32_t)__builtin_nearbyint(a * 8.0);
    double h = a - (double)j * 0.125;
    const double *c = tz_erf_tab[j];
    double p = c[TZ_ERF_DEG];
    for (int m = TZ_ERF_DEG - 1; m >= 0; m--) p = p * h + c[m];
    y = p;
  }
  return x < 0 ? -y : y;
}

/* The activations of the reference models, in f64, rounded once to f32. */

/* SiLU (torch.nn.functional.silu): x·σ(x) = x / (1 + e^-x). */
static inline float tz_silu(float x) {
  double d = (double)x;
  return (float)(d / (1.0 + tz_exp(-d)));
}

/* GELU, exact form (torch.nn.functional.gelu, approximate='none'):
 * x/2·(1 + erf(x/√2)). */
static inline float tz_gelu(float x) {
  double d = (double)x;
  return (float)(0.5 * d * (1.0 + tz_erf(d * 0.70710678118654752440)));
}

#endif
