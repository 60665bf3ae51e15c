/* Sign1 ("sign1"): one sign bit per value and one scale per block (signSGD
 * with a magnitude, Bernstein et al. 2018; DeMo/DisTrO send 1-bit signs; used
 * with error feedback on the trainer, Karimireddy et al. 2019). Tensors:
 * bits U8[ceil(N/8)] (bit c%8 of byte c/8, least significant first; 1 =
 * negative; the padding bits after N are 0) and scale F32[ceil(N/block)]
 * (finite, >= 0). Value c = bit ? -scale[c/block] : +scale[c/block]. */
#include "codec.h"

TZ_DECODE_SIGNATURE {
  int32_t rc = tz_check_out(dtype);
  if (rc) return rc;
  if (nt != 2) return tz_fail(TZ_ERR_LAYOUT, "sign1 takes 2 tensors (bits, scale)");
  if ((rc = tz_need(t, 0, TZ_T_U8, "bits")) || (rc = tz_need(t, 1, TZ_T_F32, "scale"))) return rc;
  uint32_t block = (uint32_t)tz_param_int(params, nparams, 0, 64);
  if (block == 0) return tz_fail(TZ_ERR_PARAMS, "block must be >= 1");
  uint32_t nb = tz_nblocks(n, block);
  uint64_t bb = ((uint64_t)n + 7) / 8;
  if (t[0].bytes != bb) return tz_bad_len("bits", t[0].bytes, bb, n);
  if (t[1].bytes != (uint64_t)nb * 4) return tz_bad_len("scale", t[1].bytes, (uint64_t)nb * 4, n);
  const uint8_t *bits = (const uint8_t *)(uintptr_t)t[0].ptr;
  const float *scale = (const float *)(uintptr_t)t[1].ptr;
  for (uint32_t b = 0; b < nb; b++)
    if (!tz_scale_ok(scale[b])) return tz_bad_at(TZ_ERR_SCALE, "scale of block", b, " is NaN, infinite or negative");
  if ((n & 7) && (bits[n >> 3] >> (n & 7)) != 0) return tz_fail(TZ_ERR_VALUE, "the padding bits after the last sign are not 0");
  for (uint32_t b = 0; b < nb; b++) {
    float s = scale[b];
    uint32_t c1 = (uint32_t)((uint64_t)(b + 1) * block < n ? (b + 1) * block : n);
    for (uint32_t c = b * block; c < c1; c++) tz_put(dtype, out, c, ((bits[c >> 3] >> (c & 7)) & 1) ? -s : s);
  }
  return TZ_OK;
}
