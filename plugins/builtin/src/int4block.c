/* Int4Block ("int4-block"): blockwise absmax 4-bit quantization (Streaming
 * DiLoCo, Douillard et al. 2025, sends 4-bit outer gradients). Tensors:
 * q U8[ceil(N/2)] (two signed nibbles per byte, element 2i in the low nibble,
 * 2i+1 in the high one; codes in [-7, 7], -8 refused; with N odd the last high
 * nibble is 0) and scale F32[ceil(N/block)] (finite, >= 0).
 * Value c = f32(q[c] * scale[c/block]). */
#include "codec.h"

static inline int32_t nib(uint8_t byte, uint32_t hi) {
  int32_t v = hi ? (byte >> 4) : (byte & 15);
  return v >= 8 ? v - 16 : v;
}

TZ_DECODE_SIGNATURE {
  int32_t rc = tz_check_out(dtype);
  if (rc) return rc;
  if (nt != 2) return tz_fail(TZ_ERR_LAYOUT, "int4-block takes 2 tensors (q, scale)");
  if ((rc = tz_need(t, 0, TZ_T_U8, "q")) || (rc = tz_need(t, 1, TZ_T_F32, "scale"))) return rc;
  uint32_t block = (uint32_t)tz_param_int(params, nparams, 0, 64);
  if (block == 0) return tz_fail(TZ_ERR_PARAMS, "block must be >= 1");
  uint32_t nb = tz_nblocks(n, block);
  uint64_t qb = ((uint64_t)n + 1) / 2;
  if (t[0].bytes != qb) return tz_bad_len("q", t[0].bytes, qb, n);
  if (t[1].bytes != (uint64_t)nb * 4) return tz_bad_len("scale", t[1].bytes, (uint64_t)nb * 4, n);
  const uint8_t *q = (const uint8_t *)(uintptr_t)t[0].ptr;
  const float *scale = (const float *)(uintptr_t)t[1].ptr;
  for (uint32_t b = 0; b < nb; b++)
    if (!tz_scale_ok(scale[b])) return tz_bad_at(TZ_ERR_SCALE, "scale of block", b, " is NaN, infinite or negative");
  for (uint32_t c = 0; c < n; c++)
    if (nib(q[c >> 1], c & 1) == -8) return tz_bad_at(TZ_ERR_VALUE, "q at", c, " is -8 (codes are -7..7)");
  if ((n & 1) && (q[n >> 1] >> 4) != 0) return tz_fail(TZ_ERR_VALUE, "the padding nibble after the last code is not 0");
  for (uint32_t b = 0; b < nb; b++) {
    float s = scale[b];
    uint32_t c1 = (uint32_t)((uint64_t)(b + 1) * block < n ? (b + 1) * block : n);
    for (uint32_t c = b * block; c < c1; c++) tz_put(dtype, out, c, (float)nib(q[c >> 1], c & 1) * s);
  }
  return TZ_OK;
}
