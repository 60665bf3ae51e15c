/* Nesterov: the outer optimizer step with PyTorch torch.optim.SGD semantics
 * (momentum, dampening=0, weight_decay=0; Sutskever, Martens, Dahl, Hinton
 * 2013, "On the importance of initialization and momentum in deep learning",
 * ICML; the DiLoCo outer step, Douillard et al. 2023):
 *   buf = g                         (first step)
 *   buf = RN(RN(beta*buf) + g)      (later steps: mul_ then add_)
 *   d   = fma(buf, beta, g)         (nesterov; g.add(buf, alpha=beta))
 *   w   = fma(d, -lr, w)            (p.add_(d, alpha=-lr))
 * PyTorch's CPU add kernel with alpha computes a + alpha*b through
 * vec::fmadd, a fused multiply-add on AVX2/AVX-512, so the two alpha adds
 * round once. Wasm has no FMA outside relaxed SIMD, so tz_fmaf emulates a
 * correctly rounded f32 FMA exactly: the f64 product of two f32 is exact, the
 * f64 sum is made exact with TwoSum (Knuth, TAOCP vol. 2, 4.2.2) and rounded
 * to odd (Boldo, Melquiond 2008, "Emulation of FMA and correctly rounded sums:
 * proved algorithms using rounding to odd", IEEE TC) before the final rounding
 * to f32, which avoids double rounding. BF16 weights are updated in f32 and
 * rounded to nearest even. */
#include "common.h"
#include "fmaf.h"

TZ_EXPORT(tenzro_fmaf) float tenzro_fmaf(float a, float b, float c) { return tz_fmaf(a, b, c); }

TZ_EXPORT(tenzro_outer_step)
int32_t tenzro_outer_step(uint32_t dtype, uint32_t n, void *weights, float *momentum, uint32_t has_momentum,
                          const float *grad, float lr, float beta, uint32_t nesterov) {
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  float nlr = -lr;
  for (uint32_t c = 0; c < n; c++) {
    float g = grad[c];
    float buf = has_momentum ? (momentum[c] * beta) + g : g;
    momentum[c] = buf;
    float dd = nesterov ? tz_fmaf(buf, beta, g) : buf;
    if (dtype == TZ_F32) {
      float *w = (float *)weights;
      w[c] = tz_fmaf(dd, nlr, w[c]);
    } else {
      uint16_t *w = (uint16_t *)weights;
      w[c] = tz_f32_to_bf16(tz_fmaf(dd, nlr, tz_bf16_to_f32(w[c])));
    }
  }
  return TZ_OK;
}
