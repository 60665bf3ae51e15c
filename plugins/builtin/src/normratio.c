/* NormRatio{max_ratio}: round-level verifier; rejects an input whose L2 norm
 * exceeds max_ratio times the median norm of the round's inputs (median-based
 * norm filtering, cf. Sun et al. 2019 and FLAME, Nguyen et al. 2022, USENIX
 * Security). Even round sizes use the mean of the two middle norms.
 * Chunked (ABI.md §6): one pass; the K+1 running norms are carried and the
 * verdict written on the last chunk. */
#include "verify_common.h"

static int32_t check(uint32_t dtype, uint32_t k, const double *params, uint32_t nparams) {
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  double ratio = tz_param(params, nparams, 0, 0);
  if (!(ratio > 0)) return tz_fail(TZ_ERR_PARAMS, "max_ratio must be positive");
  if (k == 0 || k > TZ_MAX_K) return tz_fail(TZ_ERR_TOO_FEW, "round-level verifier needs 1..256 round inputs");
  return TZ_OK;
}

/* acc[0] is the input's norm, acc[1+i] round input i's. */
static void accum(uint32_t dtype, uint32_t n, const void *input, uint32_t k, const void *round, tz_norm_acc *acc) {
  uint32_t es = dtype == TZ_F32 ? 4 : 2;
  for (uint32_t i = 0; i < k; i++) tz_norm_accum(dtype, (const uint8_t *)round + (uint64_t)i * n * es, n, &acc[1 + i]);
  tz_norm_accum(dtype, input, n, &acc[0]);
}

static void judge(uint32_t dtype, uint32_t k, const tz_norm_acc *acc, const double *params, uint32_t nparams,
                  uint32_t *verdict) {
  double ratio = tz_param(params, nparams, 0, 0);
  double norms[TZ_MAX_K];
  for (uint32_t i = 0; i < k; i++) {
    double x = tz_norm_finish(dtype, &acc[1 + i]);
    uint32_t q = i;
    while (q > 0 && tz_dless(x, norms[q - 1])) { norms[q] = norms[q - 1]; q--; }
    norms[q] = x;
  }
  double med = (k & 1u) ? norms[k / 2] : (norms[k / 2 - 1] + norms[k / 2]) * 0.5;
  double nr = tz_norm_finish(dtype, &acc[0]);
  int ok = nr <= ratio * med;
  verdict[0] = ok;
  verdict[1] = ok ? 0 : TZ_REASON_NORM_RATIO;
}

TZ_EXPORT(tenzro_verify)
int32_t tenzro_verify(uint32_t dtype, uint32_t n, const void *input, uint32_t k, const void *round,
                      const double *params, uint32_t nparams, uint32_t *verdict) {
  int32_t rc = check(dtype, k, params, nparams);
  if (rc) return rc;
  tz_norm_acc *acc = (tz_norm_acc *)tz_alloc((k + 1) * sizeof(tz_norm_acc));
  if (!acc) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  tz_norm_zero(acc, k + 1);
  accum(dtype, n, input, k, round, acc);
  judge(dtype, k, acc, params, nparams, verdict);
  return TZ_OK;
}

TZ_EXPORT(tenzro_chunk_plan)
int32_t tenzro_chunk_plan(uint32_t k, uint32_t ntotal, const double *params, uint32_t nparams, uint32_t *plan) {
  (void)ntotal;
  int32_t rc = check(TZ_F32, k, params, nparams);
  if (rc) return rc;
  tz_plan(plan, 1, (k + 1) * sizeof(tz_norm_acc));
  return TZ_OK;
}

TZ_EXPORT(tenzro_verify_chunk)
int32_t tenzro_verify_chunk(uint32_t dtype, uint32_t n, uint32_t c0, uint32_t ntotal, const void *input, uint32_t k,
                            const void *round, const double *params, uint32_t nparams, uint32_t pass, void *carry,
                            uint32_t *verdict) {
  int32_t rc = tz_check_chunk(n, c0, ntotal);
  if (rc || (rc = check(dtype, k, params, nparams))) return rc;
  if (pass != 0) return tz_fail(TZ_ERR_PARAMS, "pass out of range");
  tz_norm_acc *acc = (tz_norm_acc *)carry;
  if (c0 == 0) tz_norm_zero(acc, k + 1);
  accum(dtype, n, input, k, round, acc);
  if (c0 + n == ntotal) judge(dtype, k, acc, params, nparams, verdict);
  return TZ_OK;
}
