// SiLU, x·sigmoid(x), in place over a primitive's result: what the runtime computes itself
// rather than as oneDNN's swish post-op. oneDNN 3.2's swish costs ~0.7 ns a value on this
// CPU (Zen 4, one thread), more than the depthwise convolution it follows; this costs ~0.3
// (`python -m benchmarks.conv_floor --program swish_cost`). Values are f32 or bf16; SiLU(0) = 0,
// so the zero padding of a blocked layout stays zero and the whole buffer can be swept.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace af {

inline float silu(float x) { return x / (1.f + std::exp(-x)); }

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

#if defined(__AVX512F__)
// e^-x = 2^n · e^-r with n = round(-x·log2 e) and r = x + n·ln 2 (|r| <= ln 2 / 2, ln 2 in two
// parts), e^-r by Taylor to r^6 (relative error ~2e-7), 2^n by vscalefps; 1 / (1 + e^-x) by
// vrcp14ps and one Newton step. x is held to [-87, 87], where 1 + e^-x stays finite, and below
// -87 sigmoid(x) is taken as 0 (SiLU(-inf) is NaN, as -inf·0 is; a NaN stays NaN through x·y).
inline __m512 silu16(__m512 x) {
  const __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.f)), _mm512_set1_ps(87.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(-1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(0.693145752f), c);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 720);
  for (float k : {-1.f / 120, 1.f / 24, -1.f / 6, 0.5f, -1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k));
  const __m512 d = _mm512_add_ps(_mm512_scalef_ps(p, n), _mm512_set1_ps(1.f));
  __m512 y = _mm512_rcp14_ps(d);
  y = _mm512_mul_ps(y, _mm512_fnmadd_ps(d, y, _mm512_set1_ps(2.f)));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.f), _CMP_LT_OQ), _mm512_setzero_ps());
  return _mm512_mul_ps(x, y);
}

inline __m512 load_bf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline void store_bf16(uint16_t* p, __m512 x) {
#if defined(__AVX512BF16__)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(x));
#else
  alignas(64) float f[16];
  _mm512_store_ps(f, x);
  for (int i = 0; i < 16; ++i) p[i] = f32_to_bf16(f[i]);
#endif
}
#endif

// below this many values one thread does it all: a parallel region costs more than it saves
constexpr int64_t SILU_PARALLEL_FROM = 1 << 15;

inline void silu_in_place(float* v, int64_t n) {
  int64_t vector_end = 0;
#if defined(__AVX512F__)
  vector_end = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n >= SILU_PARALLEL_FROM)
  for (int64_t i = 0; i < vector_end; i += 16) _mm512_storeu_ps(v + i, silu16(_mm512_loadu_ps(v + i)));
#endif
  for (int64_t i = vector_end; i < n; ++i) v[i] = silu(v[i]);
}

inline void silu_in_place(uint16_t* v, int64_t n) {
  int64_t vector_end = 0;
#if defined(__AVX512F__)
  vector_end = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n >= SILU_PARALLEL_FROM)
  for (int64_t i = 0; i < vector_end; i += 16) store_bf16(v + i, silu16(load_bf16(v + i)));
#endif
  for (int64_t i = vector_end; i < n; ++i) v[i] = f32_to_bf16(silu(bf16_to_f32(v[i])));
}

}  // namespace af
