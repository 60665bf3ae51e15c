/* L2NormBound{max}: rejects an input whose Euclidean norm exceeds max (norm
 * bounding as in Sun, Kairouz, Suresh, McMahan 2019, "Can You Really Backdoor
 * Federated Learning?"). A NaN norm is rejected. Per-submission verifier.
 * Chunked (ABI.md §6): one pass; the norm's running sum is carried and the
 * verdict written on the last chunk. */
#include "verify_common.h"

static int32_t check(uint32_t dtype, const double *params, uint32_t nparams) {
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "dtype must be F32 or BF16");
  double max = tz_param(params, nparams, 0, 0);
  if (!(max > 0)) return tz_fail(TZ_ERR_PARAMS, "max must be positive");
  return TZ_OK;
}

static void judge(double nr, const double *params, uint32_t nparams, uint32_t *verdict) {
  double max = tz_param(params, nparams, 0, 0);
  verdict[0] = nr <= max;
  verdict[1] = nr <= max ? 0 : TZ_REASON_NORM;
}

TZ_EXPORT(tenzro_verify)
int32_t tenzro_verify(uint32_t dtype, uint32_t n, const void *input, uint32_t k, const void *round,
                      const double *params, uint32_t nparams, uint32_t *verdict) {
  (void)k; (void)round;
  int32_t rc = check(dtype, params, nparams);
  if (rc) return rc;
  judge(tz_norm(dtype, input, n), params, nparams, verdict);
  return TZ_OK;
}

TZ_EXPORT(tenzro_chunk_plan)
int32_t tenzro_chunk_plan(uint32_t k, uint32_t ntotal, const double *params, uint32_t nparams, uint32_t *plan) {
  (void)k; (void)ntotal;
  int32_t rc = check(TZ_F32, params, nparams);
  if (rc) return rc;
  tz_plan(plan, 1, sizeof(tz_norm_acc));
  return TZ_OK;
}

TZ_EXPORT(tenzro_verify_chunk)
int32_t tenzro_verify_chunk(uint32_t dtype, uint32_t n, uint32_t c0, uint32_t ntotal, const void *input, uint32_t k,
                            const void *round, const double *params, uint32_t nparams, uint32_t pass, void *carry,
                            uint32_t *verdict) {
  (void)k; (void)round;
  int32_t rc = tz_check_chunk(n, c0, ntotal);
  if (rc || (rc = check(dtype, params, nparams))) return rc;
  if (pass != 0) return tz_fail(TZ_ERR_PARAMS, "pass out of range");
  tz_norm_acc *acc = (tz_norm_acc *)carry;
  if (c0 == 0) tz_norm_zero(acc, 1);
  tz_norm_accum(dtype, input, n, acc);
  if (c0 + n == ntotal) judge(tz_norm_finish(dtype, acc), params, nparams, verdict);
  return TZ_OK;
}
