/* TopK ("topk"): the k = max(1, min(N, floor(fraction * N))) largest-magnitude
 * coordinates (the fraction and N multiplied in binary64), as indices and
 * values (SparseLoCo, Sarfi et al. 2025, sends top-k with error feedback).
 * Tensors: indices I32[k] (strictly increasing, each in [0, N)), values of
 * the dtype the parameter "values" names (0 = BF16[k], 1 = F16[k], 2 = I8[k]),
 * and with I8 values scale F32[1] (value = f32(q * scale), q in [-127, 127]).
 * Every other coordinate is 0. Non-finite values are refused. */
#include "codec.h"

TZ_DECODE_SIGNATURE {
  int32_t rc = tz_check_out(dtype);
  if (rc) return rc;
  if (nt != 3) return tz_fail(TZ_ERR_LAYOUT, "topk takes 3 tensors (indices, values, scale)");
  if ((rc = tz_need(t, 0, TZ_T_I32, "indices"))) return rc;
  if (t[1].ptr == 0) return tz_fail(TZ_ERR_LAYOUT, "tensor values is missing");
  uint32_t vd = t[1].dtype;
  int64_t want = tz_param_int(params, nparams, 1, 0);
  if (want < 0 || want > 2) return tz_fail(TZ_ERR_PARAMS, "values must be 0 (BF16), 1 (F16) or 2 (I8)");
  uint32_t wd = want == 0 ? TZ_T_BF16 : want == 1 ? TZ_T_F16 : TZ_T_I8;
  if (vd != wd) return tz_fail(TZ_ERR_LAYOUT, want == 0 ? "tensor values must be BF16 (values=0)" : want == 1 ? "tensor values must be F16 (values=1)" : "tensor values must be I8 (values=2)");
  if (vd == TZ_T_I8) {
    if ((rc = tz_need(t, 2, TZ_T_F32, "scale"))) return rc;
    if (t[2].bytes != 4) return tz_bad_len("scale", t[2].bytes, 4, n);
  } else if (t[2].ptr != 0) {
    return tz_fail(TZ_ERR_LAYOUT, "tensor scale is only allowed with I8 values");
  }
  double frac = tz_param(params, nparams, 0, 0.01);
  double kk = __builtin_floor(frac * (double)n);
  if (kk < 1) kk = 1;
  if (kk > n) kk = n;
  uint32_t k = (uint32_t)kk;
  if (t[0].bytes != (uint64_t)k * 4) return tz_bad_len("indices", t[0].bytes, (uint64_t)k * 4, n);
  uint32_t vs = vd == TZ_T_I8 ? 1 : 2;
  if (t[1].bytes != (uint64_t)k * vs) return tz_bad_len("values", t[1].bytes, (uint64_t)k * vs, n);
  const int32_t *idx = (const int32_t *)(uintptr_t)t[0].ptr;
  for (uint32_t j = 0; j < k; j++) {
    if (idx[j] < 0 || (uint32_t)idx[j] >= n) return tz_bad_at(TZ_ERR_INDEX, "index", j, " is out of range [0, N)");
    if (j > 0 && idx[j] <= idx[j - 1]) return tz_bad_at(TZ_ERR_INDEX, "index", j, " is not greater than the one before it (indices must be sorted, without repeats)");
  }
  float scale = 0;
  if (vd == TZ_T_I8) {
    scale = *(const float *)(uintptr_t)t[2].ptr;
    if (!tz_scale_ok(scale)) return tz_fail(TZ_ERR_SCALE, "scale is NaN, infinite or negative");
  }
  __builtin_memset(out, 0, (size_t)n * (dtype == TZ_F32 ? 4 : 2));
  for (uint32_t j = 0; j < k; j++) {
    float v;
    if (vd == TZ_T_F16) v = tz_f16_to_f32(((const uint16_t *)(uintptr_t)t[1].ptr)[j]);
    else if (vd == TZ_T_BF16) v = tz_bf16_to_f32(((const uint16_t *)(uintptr_t)t[1].ptr)[j]);
    else {
      int8_t q = ((const int8_t *)(uintptr_t)t[1].ptr)[j];
      if (q == -128) return tz_bad_at(TZ_ERR_VALUE, "value", j, " is -128 (codes are -127..127)");
      v = (float)q * scale;
    }
    if (!tz_is_finite(v)) return tz_bad_at(TZ_ERR_VALUE, "value", j, " is NaN or infinite");
    tz_put(dtype, out, (uint32_t)idx[j], v);
  }
  return TZ_OK;
}
