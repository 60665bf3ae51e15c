/* Finite: rejects an input holding any NaN or infinity (IEEE 754-2019 §3.4:
 * all-ones exponent). Per-submission verifier. */
#include "common.h"

TZ_EXPORT(tenzro_verify)
int32_t tenzro_verify(uint32_t dtype, uint32_t n, const void *input, uint32_t k, const void *round,
                      const double *params, uint32_t nparams, uint32_t *verdict) {
  (void)k; (void)round; (void)params; (void)nparams;
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  verdict[0] = 1;
  verdict[1] = 0;
  if (dtype == TZ_F32) {
    const uint32_t *b = (const uint32_t *)input;
    v128_t e = wasm_i32x4_splat(0x7f800000), bad = wasm_i32x4_splat(0);
    uint32_t c = 0;
    for (; c + 4 <= n; c += 4) bad = wasm_v128_or(bad, wasm_i32x4_eq(wasm_v128_and(wasm_v128_load(b + c), e), e));
    int any = wasm_v128_any_true(bad);
    for (; c < n; c++) any |= (b[c] & 0x7f800000u) == 0x7f800000u;
    if (any) verdict[0] = 0, verdict[1] = TZ_REASON_NONFINITE;
  } else {
    const uint16_t *h = (const uint16_t *)input;
    for (uint32_t c = 0; c < n; c++)
      if ((h[c] & 0x7f80u) == 0x7f80u) {
        verdict[0] = 0, verdict[1] = TZ_REASON_NONFINITE;
        break;
      }
  }
  return TZ_OK;
}
