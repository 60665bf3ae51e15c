/* Int8Block ("int8-block"): blockwise absmax int8 quantization, as sent by
 * INTELLECT-1 (Jaghouar et al. 2024) for its pseudo-gradients. Tensors: q I8[N]
 * (codes in [-127, 127]; -128 is refused so an encoding is canonical) and
 * scale F32[ceil(N/block)] (finite, >= 0). Value c = f32(q[c] * scale[c/block]).
 * The encoder's rounding (round to nearest, ties to even) is documented in
 * docs/protocol/compression.md; the decoder does not depend on it. */
#include "codec.h"

TZ_DECODE_SIGNATURE {
  int32_t rc = tz_check_out(dtype);
  if (rc) return rc;
  if (nt != 2) return tz_fail(TZ_ERR_LAYOUT, "int8-block takes 2 tensors (q, scale)");
  if ((rc = tz_need(t, 0, TZ_T_I8, "q")) || (rc = tz_need(t, 1, TZ_T_F32, "scale"))) return rc;
  uint32_t block = (uint32_t)tz_param_int(params, nparams, 0, 64);
  if (block == 0) return tz_fail(TZ_ERR_PARAMS, "block must be >= 1");
  uint32_t nb = tz_nblocks(n, block);
  if (t[0].bytes != n) return tz_bad_len("q", t[0].bytes, n, n);
  if (t[1].bytes != (uint64_t)nb * 4) return tz_bad_len("scale", t[1].bytes, (uint64_t)nb * 4, n);
  const int8_t *q = (const int8_t *)(uintptr_t)t[0].ptr;
  const float *scale = (const float *)(uintptr_t)t[1].ptr;
  for (uint32_t b = 0; b < nb; b++)
    if (!tz_scale_ok(scale[b])) return tz_bad_at(TZ_ERR_SCALE, "scale of block", b, " is NaN, infinite or negative");
  for (uint32_t c = 0; c < n; c++)
    if (q[c] == -128) return tz_bad_at(TZ_ERR_VALUE, "q at", c, " is -128 (codes are -127..127)");
  for (uint32_t b = 0; b < nb; b++) {
    float s = scale[b];
    uint32_t c1 = (uint32_t)((uint64_t)(b + 1) * block < n ? (b + 1) * block : n);
    for (uint32_t c = b * block; c < c1; c++) tz_put(dtype, out, c, (float)q[c] * s);
  }
  return TZ_OK;
}
