/* Coordinate-wise order statistics shared by TrimmedMean and CoordinateMedian. */
#include "common.h"
#include "sortnet.h"

/* tz_sort_lanes with Batcher's merge-exchange network for K from 2 to 16
 * (sortnet.h: 63 compare-exchanges at K = 16 against 120 for odd-even
 * transposition, 5 against 6 at K = 4). The keys are a total order on bit
 * patterns (NaN canonical and last), so every sorting network gives the
 * same bits as tz_sort_lanes. */
static inline __attribute__((always_inline)) void tz_sort_lanes_net(v128_t *v, uint32_t k) {
  for (uint32_t i = 0; i < k; i++) v[i] = tz_key(tz_canon_nan(v[i]));
  if (!tz_sort_net(v, k))
    for (uint32_t r = 0; r < k; r++)
      for (uint32_t i = r & 1u; i + 1 < k; i += 2) tz_cx(&v[i], &v[i + 1]);
  for (uint32_t i = 0; i < k; i++) v[i] = tz_key(v[i]);
}

/* For every group of 4 coordinates: gather the K values, sort them, and hand
 * the sorted vectors to emit. */
#define TZ_SORTED_BODY(x, k, n, out, ...)                                    \
  do {                                                                       \
    v128_t v[TZ_MAX_K];                                                      \
    for (uint32_t c = 0; c < (n); c += 4) {                                  \
      uint32_t valid = (n) - c;                                              \
      for (uint32_t i = 0; i < (k); i++) v[i] = tz_load4((x) + (uint64_t)i * (n) + c, valid); \
      tz_sort_lanes_net(v, (k));                                             \
      v128_t r;                                                              \
      __VA_ARGS__ \
      tz_store4((out) + c, r, valid);                                        \
    }                                                                        \
  } while (0)

/* One copy of the loop per K from 3 to 16, where `k` is a constant the body
 * sees under the same name: clang then unrolls the sort and keeps the K
 * vectors in Wasm locals (with a run-time K they live in linear memory and
 * every compare-exchange loads and stores them). Bodies must index v only
 * with expressions of k and constants for that to hold. Other K take the
 * generic loop; every copy computes the same bits. */
#define TZ_SORTED_CASE(K, x, n, out, ...) \
  case K: {                               \
    const uint32_t k = K;                 \
    TZ_SORTED_BODY(x, k, n, out, __VA_ARGS__); \
    break;                                \
  }
#define TZ_SORTED_LOOP(x, k, n, out, ...)                 \
  do {                                                    \
    switch (k) {                                          \
      TZ_SORTED_CASE(3, x, n, out, __VA_ARGS__)           \
      TZ_SORTED_CASE(4, x, n, out, __VA_ARGS__)           \
      TZ_SORTED_CASE(5, x, n, out, __VA_ARGS__)           \
      TZ_SORTED_CASE(6, x, n, out, __VA_ARGS__)           \
      TZ_SORTED_CASE(7, x, n, out, __VA_ARGS__)           \
      TZ_SORTED_CASE(8, x, n, out, __VA_ARGS__)           \
      TZ_SORTED_CASE(9, x, n, out, __VA_ARGS__)           \
      TZ_SORTED_CASE(10, x, n, out, __VA_ARGS__)          \
      TZ_SORTED_CASE(11, x, n, out, __VA_ARGS__)          \
      TZ_SORTED_CASE(12, x, n, out, __VA_ARGS__)          \
      TZ_SORTED_CASE(13, x, n, out, __VA_ARGS__)          \
      TZ_SORTED_CASE(14, x, n, out, __VA_ARGS__)          \
      TZ_SORTED_CASE(15, x, n, out, __VA_ARGS__)          \
      TZ_SORTED_CASE(16, x, n, out, __VA_ARGS__)          \
      default:                                            \
        TZ_SORTED_BODY(x, k, n, out, __VA_ARGS__);        \
    }                                                     \
  } while (0)
