// What the runtime's own loops share (gated.h, softmax.h): f32 and bf16 (as uint16_t) loads
// and stores, one value or 16 at a time, and e^x and the sigmoid for 16 floats (the latter also
// to bf16's precision only).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace af {

// without AVX-512 only scalar loops are here, slower than oneDNN's: the runtime leaves the
// work to oneDNN
#if defined(__AVX512F__)
constexpr bool VECTORISED = true;
#else
constexpr bool VECTORISED = false;
#endif

// below this many values one thread does it all: a parallel region costs more than it saves
constexpr int64_t PARALLEL_FROM = 1 << 15;

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {   // round to nearest even, as oneDNN does
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return uint16_t((bits >> 16) | 0x40);
  return uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

inline float load1(const float* p) { return *p; }
inline void store1(float* p, float x) { *p = x; }
inline float load1(const uint16_t* p) { return bf16_to_f32(*p); }
inline void store1(uint16_t* p, float x) { *p = f32_to_bf16(x); }

#if defined(__AVX512F__)
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline void store16(float* p, __m512 x) { _mm512_storeu_ps(p, x); }

inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline void store16(uint16_t* p, __m512 x) {
#if defined(__AVX512BF16__)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(x));
#else
  alignas(64) float f[16];
  _mm512_store_ps(f, x);
  for (int i = 0; i < 16; ++i) p[i] = f32_to_bf16(f[i]);
#endif
}

// the first n < 16 values (the rest of a row), the other lanes 0; and their store
inline __mmask16 first(int64_t n) { return __mmask16((1u << n) - 1); }
inline __m512 load16(const float* p, __mmask16 k) { return _mm512_maskz_loadu_ps(k, p); }
inline __m512 load16(const uint16_t* p, __mmask16 k) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16));
}
inline void store16(float* p, __m512 x, __mmask16 k) { _mm512_mask_storeu_ps(p, k, x); }
inline void store16(uint16_t* p, __m512 x, __mmask16 k) {
  alignas(64) uint16_t h[16];
  store16(h, x);
  _mm256_mask_storeu_epi16(p, k, _mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
}

// e^x for x in [-88, 88] (the caller clamps): 2^n · e^r with n = round(x·log2 e) and
// r = x - n·ln 2 (|r| <= ln 2 / 2, ln 2 in two parts), e^r by Taylor to r^6 (relative error
// ~2e-7), 2^n by vscalefps. (The loop is unrolled: at -O2, as generated kernels are built, GCC
// would keep it a loop over a stack array.)
inline __m512 exp16(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 720);
  _Pragma("GCC unroll 8")
  for (float k : {1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k));
  return _mm512_scalef_ps(p, n);
}

// 1 + e^-x for 16 floats, the sigmoid's denominator: e^-x = 2^n · e^-r with n = round(-x·log2 e)
// and r = x + n·ln 2 (ln 2 in two parts, |r| <= ln 2 / 2), e^-r by Taylor to r^6 (relative error
// ~2e-7) and 2^n by vscalefps, after x is clamped to ±100 (min and max return their second
// operand, x, where it is NaN). Below x = -88.7, e^-x overflows to inf. 14 operations.
inline __m512 one_plus_exp_neg16(__m512 x) {
  const __m512 t = _mm512_max_ps(_mm512_set1_ps(-100.f), _mm512_min_ps(_mm512_set1_ps(100.f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(-1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(0.693145752f), t);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 720);
  _Pragma("GCC unroll 8")
  for (float k : {-1.f / 120, 1.f / 24, -1.f / 6, 0.5f, -1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k));
  return _mm512_add_ps(_mm512_set1_ps(1.f), _mm512_scalef_ps(p, n));
}

// 1 / (1 + e^-x): 0 below x = -88.7 (the answer is a denormal under 4e-39). A division, not
// vrcp14ps and a Newton step: as fast on Zen 4 in these loops, and exact.
inline __m512 sigmoid16(__m512 x) { return _mm512_div_ps(_mm512_set1_ps(1.f), one_plus_exp_neg16(x)); }

// x / (1 + e^-x), one division and no multiply (3% faster than x·sigmoid(x) in elementwise-8's
// kernel): -0 below x = -88.7 and NaN at -inf (inf / inf), as the scalar form is.
inline __m512 silu16(__m512 x) { return _mm512_div_ps(x, one_plus_exp_neg16(x)); }

// The sigmoid within 6e-5 of it (vrcp14ps's error), for results rounded to bf16 next, whose
// values are 2^-8 apart: 12 operations to sigmoid16's 20, 1.5x its speed. e^-x as exp16 takes it
// (2^n · e^-r, e^-r by Taylor to r^5), for x <= 88 only: above, e^-x is 0 to bf16 and clamping x
// keeps the polynomial finite. Below -88, 2^n overflows to inf and the reciprocal gives 0.
inline __m512 sigmoid16_for_bf16(__m512 x) {
  const __m512 t = _mm512_min_ps(_mm512_set1_ps(88.f), x);   // NaN stays NaN (min's second operand)
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(-1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(0.693147181f), t);   // e^-t = 2^n · e^-r
  __m512 p = _mm512_set1_ps(-1.f / 120);
  _Pragma("GCC unroll 8")
  for (float k : {1.f / 24, -1.f / 6, 0.5f, -1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k));
  return _mm512_rcp14_ps(_mm512_add_ps(_mm512_set1_ps(1.f), _mm512_scalef_ps(p, n)));
}
#endif

}  // namespace af
