/*
 * tenzro_plugin.h — C SDK for Tenzro Train Wasm plugins, ABI v1 to v3 (see plugins/ABI.md).
 *
 * Build with clang (no libc):
 *   clang --target=wasm32 -O3 -msimd128 -mbulk-memory -ffreestanding -nostdlib \
 *         -ffp-contract=off -Wl,--no-entry -Wl,--strip-all -o rule.wasm rule.c
 * then attach the manifest with `tenzro plugin build` (it appends the
 * "tenzro.manifest" custom section from manifest.json).
 *
 * Include this header in exactly one translation unit: it defines the ABI
 * exports tenzro_abi_version and tenzro_alloc and a bump allocator.
 */
#ifndef TENZRO_PLUGIN_H
#define TENZRO_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#define TZ_EXPORT(name) __attribute__((export_name(#name)))

/* Element types (ABI.md §3). */
#define TZ_F32 0u
#define TZ_BF16 1u

/* Standard error codes returned by entry points (ABI.md §5). */
#define TZ_OK 0
#define TZ_ERR_PARAMS 1      /* parameters out of range */
#define TZ_ERR_TOO_FEW 2     /* K too small for the parameters */
#define TZ_ERR_DTYPE 3       /* element type not supported */
#define TZ_ERR_NOMEM 4       /* tenzro_alloc failed (page limit) */
#define TZ_ERR_NONFINITE 5   /* a value is NaN or infinite where not allowed */
#define TZ_ERR_RULE 100      /* first rule-specific code */

/* Verifier reason codes used by the built-ins. */
#define TZ_REASON_NONFINITE 1
#define TZ_REASON_NORM 2
#define TZ_REASON_NORM_RATIO 3

/* The ABI version the plugin was written for: 1 (aggregate, verify, outer),
 * 2 (adds the decode kind, ABI.md §4.1) or 3 (adds the score kind, §4.2).
 * Define TZ_ABI_VERSION before including this header to declare 2 or 3; it
 * must equal the manifest's "abi". */
#ifndef TZ_ABI_VERSION
#define TZ_ABI_VERSION 1
#endif
TZ_EXPORT(tenzro_abi_version) int32_t tenzro_abi_version(void) { return TZ_ABI_VERSION; }

extern unsigned char __heap_base;
static uintptr_t tz_heap_top;

/* tenzro_alloc returns a 16-byte aligned block of size bytes, growing the
 * memory as needed; 0 when the page limit refuses. Nothing is ever freed: an
 * instance lives for one call. */
TZ_EXPORT(tenzro_alloc) uint32_t tenzro_alloc(uint32_t size) {
  if (tz_heap_top == 0) tz_heap_top = (uintptr_t)&__heap_base;
  uint64_t p = ((uint64_t)tz_heap_top + 15u) & ~(uint64_t)15u;
  uint64_t end = p + (uint64_t)size;
  if (end > 0xFFFFFFF0ull) return 0;
  uint64_t have = (uint64_t)__builtin_wasm_memory_size(0) * 65536ull;
  if (end > have) {
    uint64_t pages = (end - have + 65535ull) / 65536ull;
    if (__builtin_wasm_memory_grow(0, (size_t)pages) == (size_t)-1) return 0;
  }
  tz_heap_top = (uintptr_t)end;
  return (uint32_t)p;
}

static inline void *tz_alloc(uint32_t size) { return (void *)(uintptr_t)tenzro_alloc(size); }

/* Chunked passes (ABI.md §6.2, manifest "chunking":"passes"): a rule whose
 * result depends on sums over all coordinates also exports
 *   int32_t tenzro_chunk_plan(uint32_t k, uint32_t ntotal, const double *params,
 *                             uint32_t nparams, uint32_t *plan);  // plan[0]=passes, plan[1]=carry bytes
 *   int32_t tenzro_chunk_pass(uint32_t dtype, uint32_t k, uint32_t n, uint32_t c0,
 *                             uint32_t ntotal, const void *inputs, const double *params,
 *                             uint32_t nparams, uint32_t pass, void *carry, float *out,
 *                             uint8_t *selected, double *scores);         // aggregate
 *   int32_t tenzro_verify_chunk(uint32_t dtype, uint32_t n, uint32_t c0, uint32_t ntotal,
 *                               const void *input, uint32_t k, const void *round,
 *                               const double *params, uint32_t nparams, uint32_t pass,
 *                               void *carry, uint32_t *verdict);          // verify
 * and keeps partial sums in the carry unfolded (the built-ins keep four f64
 * lanes per sum) so chunked and whole runs give the same bytes. */

/* Error text for the host (optional export, ABI.md §5). */
static const char *tz_error_text = "";
TZ_EXPORT(tenzro_error_text) uint32_t tenzro_error_text(void) { return (uint32_t)(uintptr_t)tz_error_text; }
static inline int32_t tz_fail(int32_t code, const char *text) {
  tz_error_text = text;
  return code;
}

/* bf16 <-> f32 (bf16 is the top half of an f32; rounding is to nearest even). */
static inline float tz_bf16_to_f32(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  __builtin_memcpy(&f, &b, 4);
  return f;
}
static inline uint16_t tz_f32_to_bf16(float f) {
  uint32_t b;
  __builtin_memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x0040u); /* quiet NaN */
  b += 0x7fffu + ((b >> 16) & 1u);
  return (uint16_t)(b >> 16);
}

/* tz_inputs_f32 returns the K×N inputs as f32, converting bf16 into a new
 * buffer (exact). NULL when memory runs out. */
static inline const float *tz_inputs_f32(uint32_t dtype, uint32_t k, uint32_t n, const void *in) {
  if (dtype == TZ_F32) return (const float *)in;
  uint64_t total = (uint64_t)k * n;
  if (total * 4 > 0xFFFFFFFFull) return 0;
  float *out = (float *)tz_alloc((uint32_t)(total * 4));
  if (!out) return 0;
  const uint16_t *h = (const uint16_t *)in;
  for (uint64_t i = 0; i < total; i++) out[i] = tz_bf16_to_f32(h[i]);
  return out;
}

static inline int tz_is_finite(float x) {
  uint32_t b;
  __builtin_memcpy(&b, &x, 4);
  return (b & 0x7f800000u) != 0x7f800000u;
}

/* Integer-valued parameter helper: the host has already checked range and
 * integrality against the manifest schema. */
static inline int64_t tz_param_int(const double *params, uint32_t nparams, uint32_t i, int64_t def) {
  return i < nparams ? (int64_t)params[i] : def;
}
static inline double tz_param(const double *params, uint32_t nparams, uint32_t i, double def) {
  return i < nparams ? params[i] : def;
}

#endif
