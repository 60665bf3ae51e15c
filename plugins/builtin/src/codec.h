/* Shared helpers for the built-in codecs (ABI v2 "decode" plugins, ABI.md
 * §4.1; formats in docs/protocol/compression.md). A decoder receives the
 * payload's tensors in manifest order as a table of {ptr, bytes, dtype}
 * triples (ptr 0 = the optional tensor is absent) and writes the fragment's
 * N values, as F32 or BF16 (round to nearest even), to out. Every length is
 * checked against N before a single value is written; every refusal names the
 * tensor and the numbers. */
#ifndef TZ_CODEC_H
#define TZ_CODEC_H
#define TZ_ABI_VERSION 2
#include "common.h"

/* Tensor dtype codes of the decode table (ABI.md §3). */
#define TZ_T_F32 0u
#define TZ_T_BF16 1u
#define TZ_T_F16 2u
#define TZ_T_I8 3u
#define TZ_T_U8 4u
#define TZ_T_I32 5u

/* Codec error codes (rule-specific range, ABI.md §5). */
#define TZ_ERR_LENGTH 100 /* a tensor's length does not match N and the parameters */
#define TZ_ERR_INDEX 101  /* a top-k index is out of range or not strictly increasing */
#define TZ_ERR_SCALE 102  /* a scale is NaN, infinite or negative */
#define TZ_ERR_VALUE 103  /* a value is outside the code's range or not finite */
#define TZ_ERR_LAYOUT 104 /* tensors missing, extra, or of the wrong dtype */

typedef struct {
  uint32_t ptr, bytes, dtype;
} tz_tensor;

/* A tiny message builder: error texts carry the numbers that were wrong. */
static char tz_msg[256];
static uint32_t tz_msg_len;
static void tz_m_str(const char *s) {
  while (*s && tz_msg_len < sizeof(tz_msg) - 1) tz_msg[tz_msg_len++] = *s++;
  tz_msg[tz_msg_len] = 0;
}
static void tz_m_u64(uint64_t v) {
  char d[24];
  int i = 0;
  do d[i++] = (char)('0' + v % 10), v /= 10;
  while (v);
  char s[24];
  int j = 0;
  while (i) s[j++] = d[--i];
  s[j] = 0;
  tz_m_str(s);
}
static int32_t tz_m_fail(int32_t code) { return tz_fail(code, tz_msg); }
static void tz_m_reset(void) { tz_msg_len = 0, tz_msg[0] = 0; }

/* "<what> has B bytes, want W (N=n)" */
static int32_t tz_bad_len(const char *what, uint64_t have, uint64_t want, uint32_t n) {
  tz_m_reset();
  tz_m_str(what);
  tz_m_str(" has ");
  tz_m_u64(have);
  tz_m_str(" bytes, want ");
  tz_m_u64(want);
  tz_m_str(" for N=");
  tz_m_u64(n);
  return tz_m_fail(TZ_ERR_LENGTH);
}

static int32_t tz_bad_at(int32_t code, const char *what, uint64_t at, const char *why) {
  tz_m_reset();
  tz_m_str(what);
  tz_m_str(" ");
  tz_m_u64(at);
  tz_m_str(why);
  return tz_m_fail(code);
}

static inline uint32_t tz_f32_bits(float f) {
  uint32_t b;
  __builtin_memcpy(&b, &f, 4);
  return b;
}

/* A scale must be finite and non-negative (sign bit clear: no -0). */
static inline int tz_scale_ok(float s) {
  uint32_t b = tz_f32_bits(s);
  return (b & 0x80000000u) == 0 && (b & 0x7f800000u) != 0x7f800000u;
}

/* IEEE binary16 -> binary32, exact (subnormals included). */
static inline float tz_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, b;
  if (exp == 0x1fu) b = sign | 0x7f800000u | (man << 13);
  else if (exp != 0) b = sign | ((exp + 112u) << 23) | (man << 13);
  else if (man == 0) b = sign;
  else {
    exp = 113u;
    while ((man & 0x400u) == 0) man <<= 1, exp--;
    b = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  __builtin_memcpy(&f, &b, 4);
  return f;
}

static inline void tz_put(uint32_t dtype, void *out, uint32_t c, float v) {
  if (dtype == TZ_F32) ((float *)out)[c] = v;
  else ((uint16_t *)out)[c] = tz_f32_to_bf16(v);
}

/* Block parameter (index 0 of the schema for the block codecs). */
static inline uint32_t tz_nblocks(uint32_t n, uint32_t block) { return (uint32_t)(((uint64_t)n + block - 1) / block); }

static inline int32_t tz_check_out(uint32_t dtype) {
  if (dtype != TZ_F32 && dtype != TZ_BF16) return tz_fail(TZ_ERR_DTYPE, "output dtype must be F32 or BF16");
  return TZ_OK;
}

/* Checks the tensor count and that tensor i is present with dtype d. */
static inline int32_t tz_need(const tz_tensor *t, uint32_t i, uint32_t d, const char *name) {
  if (t[i].ptr == 0 || t[i].dtype != d) {
    tz_m_reset();
    tz_m_str("tensor ");
    tz_m_str(name);
    tz_m_str(" is missing or has the wrong dtype");
    return tz_m_fail(TZ_ERR_LAYOUT);
  }
  return TZ_OK;
}

#define TZ_DECODE_SIGNATURE                                                                                  \
  TZ_EXPORT(tenzro_decode)                                                                                   \
  int32_t tenzro_decode(uint32_t dtype, uint32_t n, uint32_t nt, const tz_tensor *t, const double *params, \
                        uint32_t nparams, void *out)
#endif
