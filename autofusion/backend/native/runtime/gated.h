// x·sigmoid(g(x)), in place over a primitive's result: the activations the runtime computes
// itself rather than as oneDNN post-ops. SiLU is g(x) = x; tanh-GELU is g(x) = 2u with
// u = √(2/π)(x + 0.044715x³), as ½(1 + tanh u) = sigmoid(2u). On this CPU (Zen 4, one thread)
// oneDNN 3.2's swish post-op costs ~0.7 ns a value, more than the depthwise convolution it
// follows, and its tanh-GELU ~1 ns; these cost ~0.3 and ~0.4 (`python -m benchmarks.conv_floor
// --program activation_cost`). Values are f32 or bf16. Both functions are 0 at 0, so the zero padding
// of a blocked layout stays zero and the whole buffer can be swept.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace af {

// without AVX-512 only the scalar loop is here, slower than oneDNN's post-ops: the runtime
// leaves the activations to them
#if defined(__AVX512F__)
constexpr bool GATES_VECTORISED = true;
#else
constexpr bool GATES_VECTORISED = false;
#endif

enum class Gate { SiLU, GeluTanh };

constexpr float TWO_SQRT_2_OVER_PI = 1.5957691216057308f, GELU_CUBIC = 0.044715f;

template <Gate G>
inline float gated(float x) {
  const float g = G == Gate::SiLU ? x : TWO_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
  return x / (1.f + std::exp(-g));
}

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
// x·sigmoid(g) for 16 floats. e^-g = 2^n · e^-r with n = round(-g·log2 e) and r = g + n·ln 2
// (|r| <= ln 2 / 2, ln 2 in two parts), e^-r by Taylor to r^6 (relative error ~2e-7), 2^n by
// vscalefps; 1 / (1 + e^-g) by vrcp14ps and one Newton step. g is held to [-87, 87], where
// 1 + e^-g stays finite, and below -87 sigmoid(g) is taken as 0 (so SiLU(-inf) is NaN, as
// -inf·0 is; a NaN stays NaN through the last product).
template <Gate G>
inline __m512 gated16(__m512 x) {
  __m512 g = x;
  if (G == Gate::GeluTanh) {
    const __m512 k = _mm512_set1_ps(TWO_SQRT_2_OVER_PI);
    g = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(TWO_SQRT_2_OVER_PI * GELU_CUBIC), k), x);
  }
  const __m512 c = _mm512_min_ps(_mm512_max_ps(g, _mm512_set1_ps(-87.f)), _mm512_set1_ps(87.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(-1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(0.693145752f), c);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 720);
  for (float k : {-1.f / 120, 1.f / 24, -1.f / 6, 0.5f, -1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k));
  const __m512 d = _mm512_add_ps(_mm512_scalef_ps(p, n), _mm512_set1_ps(1.f));
  __m512 y = _mm512_rcp14_ps(d);
  y = _mm512_mul_ps(y, _mm512_fnmadd_ps(d, y, _mm512_set1_ps(2.f)));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(g, _mm512_set1_ps(-87.f), _CMP_LT_OQ), _mm512_setzero_ps());
  return _mm512_mul_ps(x, y);
}

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
#endif

inline float load1(const float* p) { return *p; }
inline void store1(float* p, float x) { *p = x; }
inline float load1(const uint16_t* p) { return bf16_to_f32(*p); }
inline void store1(uint16_t* p, float x) { *p = f32_to_bf16(x); }

// below this many values one thread does it all: a parallel region costs more than it saves
constexpr int64_t GATED_PARALLEL_FROM = 1 << 15;

// x·sigmoid(g(x)) over n values of type T (float, or bf16 as uint16_t), in place
template <Gate G, class T>
void gated_in_place(T* v, int64_t n) {
  int64_t vector_end = 0;
#if defined(__AVX512F__)
  vector_end = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n >= GATED_PARALLEL_FROM)
  for (int64_t i = 0; i < vector_end; i += 16) store16(v + i, gated16<G>(load16(v + i)));
#endif
  for (int64_t i = vector_end; i < n; ++i) store1(v + i, gated<G>(load1(v + i)));
}

}  // namespace af
