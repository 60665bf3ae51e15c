/* MultiKrum{f,m}: averages the m inputs with the lowest Krum scores
 * (Blanchard et al. 2017, NeurIPS, §4 "Multi-Krum"; El Mhamdi, Guerraoui,
 * Rouault 2018 use m = K-f). m = 0 means K-f. Needs K >= 2f+3 unless
 * relaxed=1. The selected inputs are summed in f64 in ascending (score,
 * index) order, so the output does not depend on input order. Chunked: two
 * passes (krumcommon.h). */
#include "krumcommon.h"

static int32_t check(uint32_t k, const double *params, uint32_t nparams) {
  int64_t f = tz_param_int(params, nparams, 0, 1);
  int64_t m = tz_param_int(params, nparams, 1, 0);
  int64_t relaxed = tz_param_int(params, nparams, 2, 0);
  if (f < 0 || f >= k) return tz_fail(TZ_ERR_PARAMS, "f must be in [0, K)");
  if (m == 0) m = (int64_t)k - f;
  if (m < 1 || m > (int64_t)k) return tz_fail(TZ_ERR_TOO_FEW, "m must be in [1, K]");
  if (!relaxed && (int64_t)k < 2 * f + 3) return tz_fail(TZ_ERR_TOO_FEW, "MultiKrum needs K >= 2f+3");
  return TZ_OK;
}

static void sel(const double *d, uint32_t k, const double *params, uint32_t nparams, tz_krum_carry *c) {
  int64_t f = tz_param_int(params, nparams, 0, 1);
  int64_t m = tz_param_int(params, nparams, 1, 0);
  if (m == 0) m = (int64_t)k - f;
  uint8_t all[TZ_MAX_K];
  for (uint32_t i = 0; i < k; i++) all[i] = 1;
  uint32_t nb = tz_krum_nb(k, (uint32_t)f);
  for (uint32_t i = 0; i < k; i++) c->scores[i] = tz_krum_score(d, k, i, all, nb);
  tz_order_by_score(c->scores, k, c->order);
  for (uint32_t i = 0; i < k; i++) c->selected[i] = 0;
  for (uint32_t q = 0; q < (uint32_t)m; q++) c->selected[c->order[q]] = 1;
  c->nsel = (uint32_t)m;
}

static void apply(const float *x, uint32_t k, uint32_t n, const tz_krum_carry *c, float *out) {
  (void)k;
  uint32_t m = c->nsel;
  v128_t mm = wasm_f64x2_splat((double)m);
  for (uint32_t cc = 0; cc < n; cc += 4) {
    uint32_t valid = n - cc;
    v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
    for (uint32_t q = 0; q < m; q++) {
      v128_t v = tz_load4(x + (uint64_t)c->order[q] * n + cc, valid);
      s0 = wasm_f64x2_add(s0, tz_lo64(v));
      s1 = wasm_f64x2_add(s1, tz_hi64(v));
    }
    tz_store4(out + cc, tz_join32(wasm_f64x2_div(s0, mm), wasm_f64x2_div(s1, mm)), valid);
  }
}

TZ_KRUM_RULE(check, sel, apply)
