/* Coordinate-wise order statistics shared by TrimmedMean and CoordinateMedian. */
#include "common.h"

/* For every group of 4 coordinates: gather the K values, sort them, and hand
 * the sorted vectors to emit. */
#define TZ_SORTED_LOOP(x, k, n, out, ...)                                    \
  do {                                                                       \
    v128_t v[TZ_MAX_K];                                                      \
    for (uint32_t c = 0; c < (n); c += 4) {                                  \
      uint32_t valid = (n) - c;                                              \
      for (uint32_t i = 0; i < (k); i++) v[i] = tz_load4((x) + (uint64_t)i * (n) + c, valid); \
      tz_sort_lanes(v, (k));                                                 \
      v128_t r;                                                              \
      __VA_ARGS__ \
      tz_store4((out) + c, r, valid);                                        \
    }                                                                        \
  } while (0)
