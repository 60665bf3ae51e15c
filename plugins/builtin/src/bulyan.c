/* Bulyan{f} (El Mhamdi, Guerraoui, Rouault 2018, "The Hidden Vulnerability of
 * Distributed Learning in Byzantium", ICML): theta = K-2f inputs are chosen by
 * repeated Krum on the remaining set (K-f-2 neighbours among the remaining,
 * at least 1; ties to the lowest index); then per coordinate the beta =
 * theta-2f selected values closest to their median are averaged. Needs
 * K >= 4f+3. The closest values are taken by growing a window around the
 * median of the sorted values (ties to the lower value), and are summed in f64
 * in ascending order. Scores are the Krum scores over all K inputs. Chunked:
 * two passes (krumcommon.h). */
#include "krumcommon.h"

static int32_t check(uint32_t k, const double *params, uint32_t nparams) {
  int64_t f = tz_param_int(params, nparams, 0, 1);
  if (f < 0 || f >= k) return tz_fail(TZ_ERR_PARAMS, "f must be in [0, K)");
  if ((int64_t)k < 4 * f + 3) return tz_fail(TZ_ERR_TOO_FEW, "Bulyan needs K >= 4f+3");
  return TZ_OK;
}

static void sel(const double *d, uint32_t k, const double *params, uint32_t nparams, tz_krum_carry *c) {
  uint32_t f = (uint32_t)tz_param_int(params, nparams, 0, 1);
  uint8_t rem[TZ_MAX_K];
  for (uint32_t i = 0; i < k; i++) rem[i] = 1, c->selected[i] = 0;
  uint32_t nb = tz_krum_nb(k, f);
  for (uint32_t i = 0; i < k; i++) c->scores[i] = tz_krum_score(d, k, i, rem, nb);
  uint32_t theta = k - 2 * f;
  for (uint32_t s = 0; s < theta; s++) {
    uint32_t members = k - s, nbs = tz_krum_nb(members, f);
    int64_t best = -1;
    double bs = 0;
    for (uint32_t i = 0; i < k; i++) {
      if (!rem[i]) continue;
      double sc = tz_krum_score(d, k, i, rem, nbs);
      if (best < 0 || tz_dless(sc, bs)) best = i, bs = sc;
    }
    rem[best] = 0;
    c->selected[best] = 1;
    c->order[s] = (uint32_t)best;
  }
  c->nsel = theta;
}

/* Coordinate phase: sort theta values, grow a window of beta around the median. */
static void apply(const float *x, uint32_t k, uint32_t n, const tz_krum_carry *c, float *out) {
  uint32_t theta = c->nsel, beta = theta - (k - theta); /* k - theta = 2f */
  v128_t v[TZ_MAX_K];
  for (uint32_t cc = 0; cc < n; cc += 4) {
    uint32_t valid = n - cc;
    for (uint32_t q = 0; q < theta; q++) v[q] = tz_load4(x + (uint64_t)c->order[q] * n + cc, valid);
    tz_sort_lanes(v, theta);
    float res[4], w4[TZ_MAX_K * 4];
    for (uint32_t q = 0; q < theta; q++) wasm_v128_store(&w4[4 * q], v[q]);
    for (uint32_t lane = 0; lane < 4; lane++) {
      float w[TZ_MAX_K];
      for (uint32_t q = 0; q < theta; q++) w[q] = w4[4 * q + lane];
      double med = (theta & 1u) ? (double)w[theta / 2] : ((double)w[theta / 2 - 1] + (double)w[theta / 2]) * 0.5;
      /* window [lo, hi) starts empty at the median position */
      uint32_t lo = theta / 2, hi = theta / 2;
      while (hi - lo < beta) {
        if (lo == 0) { hi++; continue; }
        if (hi == theta) { lo--; continue; }
        double dl = med - (double)w[lo - 1], dh = (double)w[hi] - med;
        if (dl <= dh) lo--; else hi++;
      }
      double s = 0;
      for (uint32_t q = lo; q < hi; q++) s += (double)w[q];
      res[lane] = (float)(s / (double)beta);
    }
    tz_store4(out + cc, wasm_v128_load(res), valid);
  }
}

TZ_KRUM_RULE(check, sel, apply)
