/* CenteredClipping{tau,iterations} (Karimireddy, He, Jaggi 2021, "Learning
 * from History for Byzantine Robust Optimization", ICML, eq. (CC)):
 *   v <- v + (1/K) sum_i (x_i - v) * min(1, tau/||x_i - v||)
 * repeated `iterations` times. The plugin is stateless, so v starts at 0 (the
 * paper starts from the previous aggregate; a pseudo-gradient's natural centre
 * is 0). Sums run in f64 in input order; v is kept in f32 between iterations.
 * Scores are the last clipping factors.
 *
 * Passes (ABI.md §6): iterations+1, with v living in `out` (the host hands
 * each chunk's out back on the next pass; zero on pass 0). Pass p >= 1 first
 * folds the carried lanes into the clipping factors (first chunk) and
 * updates v on the chunk; while p < iterations it then adds ||x_i - v||^2 to
 * the lanes of input i. The whole-fragment entry point runs the same passes
 * over one chunk. */
#include "common.h"

typedef struct {
  double cf[TZ_MAX_K];
  tz_lanes acc[TZ_MAX_K];
} carry_t;

static int32_t check(uint32_t dtype, uint32_t k, uint32_t n, const double *params, uint32_t nparams) {
  int32_t rc = tz_check_common(dtype, k, n);
  if (rc) return rc;
  double tau = tz_param(params, nparams, 0, 1.0);
  int64_t iters = tz_param_int(params, nparams, 1, 1);
  if (!(tau > 0)) return tz_fail(TZ_ERR_PARAMS, "tau must be positive");
  if (iters < 1 || iters > 100) return tz_fail(TZ_ERR_PARAMS, "iterations must be in [1, 100]");
  return TZ_OK;
}

/* One pass over one chunk; x holds the chunk's inputs as f32. */
static int32_t pass_chunk(const float *x, uint32_t k, uint32_t n, uint32_t c0, const double *params, uint32_t nparams,
                          uint32_t pass, carry_t *cs, float *out, uint8_t *selected, double *scores) {
  double tau = tz_param(params, nparams, 0, 1.0);
  uint32_t iters = (uint32_t)tz_param_int(params, nparams, 1, 1);
  if (pass > iters) return tz_fail(TZ_ERR_PARAMS, "pass out of range");
  if (c0 == 0) {
    if (pass > 0)
      for (uint32_t i = 0; i < k; i++) {
        double r = __builtin_sqrt(tz_fold(cs->acc[i]));
        cs->cf[i] = (r <= tau) ? 1.0 : tau / r;
      }
    tz_lanes_zero(cs->acc, k);
  }
  if (pass > 0) {
    v128_t kk = wasm_f64x2_splat((double)k);
    for (uint32_t c = 0; c < n; c += 4) {
      uint32_t valid = n - c;
      v128_t vz = tz_load4(out + c, valid);
      v128_t z0 = tz_lo64(vz), z1 = tz_hi64(vz);
      v128_t s0 = wasm_f64x2_splat(0.0), s1 = s0;
      for (uint32_t i = 0; i < k; i++) {
        v128_t va = tz_load4(x + (uint64_t)i * n + c, valid), ci = wasm_f64x2_splat(cs->cf[i]);
        s0 = wasm_f64x2_add(s0, wasm_f64x2_mul(ci, wasm_f64x2_sub(tz_lo64(va), z0)));
        s1 = wasm_f64x2_add(s1, wasm_f64x2_mul(ci, wasm_f64x2_sub(tz_hi64(va), z1)));
      }
      tz_store4(out + c, tz_join32(wasm_f64x2_add(z0, wasm_f64x2_div(s0, kk)), wasm_f64x2_add(z1, wasm_f64x2_div(s1, kk))),
                valid);
    }
  }
  if (pass < iters) {
    for (uint32_t i = 0; i < k; i++) tz_sqdist_accum(x + (uint64_t)i * n, out, n, &cs->acc[i]);
    return TZ_OK;
  }
  for (uint32_t i = 0; i < k; i++) scores[i] = cs->cf[i], selected[i] = 1;
  return TZ_OK;
}

TZ_EXPORT(tenzro_aggregate)
int32_t tenzro_aggregate(uint32_t dtype, uint32_t k, uint32_t n, const void *inputs, const double *params,
                         uint32_t nparams, float *out, uint8_t *selected, double *scores) {
  int32_t rc = check(dtype, k, n, params, nparams);
  if (rc) return rc;
  carry_t *cs = (carry_t *)tz_alloc(sizeof(carry_t));
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!cs || !x) return tz_fail(TZ_ERR_NOMEM, "out of memory");
  for (uint32_t c = 0; c < n; c++) out[c] = 0;
  uint32_t iters = (uint32_t)tz_param_int(params, nparams, 1, 1);
  for (uint32_t p = 0; p <= iters; p++)
    if ((rc = pass_chunk(x, k, n, 0, params, nparams, p, cs, out, selected, scores))) return rc;
  return TZ_OK;
}

TZ_EXPORT(tenzro_chunk_plan)
int32_t tenzro_chunk_plan(uint32_t k, uint32_t ntotal, const double *params, uint32_t nparams, uint32_t *plan) {
  int32_t rc = check(TZ_F32, k, ntotal, params, nparams);
  if (rc) return rc;
  tz_plan(plan, (uint32_t)tz_param_int(params, nparams, 1, 1) + 1, sizeof(carry_t));
  return TZ_OK;
}

TZ_EXPORT(tenzro_chunk_pass)
int32_t tenzro_chunk_pass(uint32_t dtype, uint32_t k, uint32_t n, uint32_t c0, uint32_t ntotal, const void *inputs,
                          const double *params, uint32_t nparams, uint32_t pass, void *carry, float *out,
                          uint8_t *selected, double *scores) {
  int32_t rc = tz_check_chunk(n, c0, ntotal);
  if (rc || (rc = check(dtype, k, n, params, nparams))) return rc;
  const float *x = tz_inputs_f32(dtype, k, n, inputs);
  if (!x) return tz_fail(TZ_ERR_NOMEM, "out of memory converting bf16");
  return pass_chunk(x, k, n, c0, params, nparams, pass, (carry_t *)carry, out, selected, scores);
}
