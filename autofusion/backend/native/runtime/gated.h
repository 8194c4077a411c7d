// x·sigmoid(g(x)) over a primitive's result, in place or into a bf16 copy: the activations the
// runtime computes itself rather than as oneDNN post-ops. SiLU is g(x) = x; tanh-GELU is g(x) = 2u with
// u = √(2/π)(x + 0.044715x³), as ½(1 + tanh u) = sigmoid(2u). On this CPU (Zen 4, one thread)
// oneDNN 3.2's swish post-op costs ~0.7 ns a value, more than the depthwise convolution it
// follows, and its tanh-GELU ~1 ns; these cost ~0.3 and ~0.4 (`python -m autofusion.benchmarks.conv_floor
// --program activation_cost`). Values are f32 or bf16. Both functions are 0 at 0, so the zero padding
// of a blocked layout stays zero and the whole buffer can be swept.
#pragma once

#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "vector.h"

namespace af {

enum class Gate { SiLU, GeluTanh };

constexpr float TWO_SQRT_2_OVER_PI = 1.5957691216057308f, GELU_CUBIC = 0.044715f;

template <Gate G>
inline float gated(float x) {
  const float g = G == Gate::SiLU ? x : TWO_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
  return x / (1.f + std::exp(-g));
}

#if defined(__AVX512F__)
// x·sigmoid(g) for 16 floats (SiLU(-inf) is NaN, as -inf·0 is); to bf16's precision where the
// result is rounded to bf16 next (a gate over a bf16 convolution costs a third less)
template <Gate G, class Out>
inline __m512 gated16(__m512 x) {
  __m512 g = x;
  if (G == Gate::GeluTanh) {
    const __m512 k = _mm512_set1_ps(TWO_SQRT_2_OVER_PI);
    g = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(TWO_SQRT_2_OVER_PI * GELU_CUBIC), k), x);
  }
  return _mm512_mul_ps(x, std::is_same_v<Out, uint16_t> ? sigmoid16_for_bf16(g) : sigmoid16(g));
}
#endif

// y = x·sigmoid(g(x)) over n values, each of type float or bf16 (uint16_t); y may be x (in place),
// or a bf16 copy of an f32 x (a gate over a bf16 convolution's f32 result, rounded once, after it)
template <Gate G, class In, class Out>
void gated_into(const In* x, Out* y, int64_t n) {
  int64_t vector_end = 0;
#if defined(__AVX512F__)
  vector_end = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_FROM)
  for (int64_t i = 0; i < vector_end; i += 16) store16(y + i, gated16<G, Out>(load16(x + i)));
#endif
  for (int64_t i = vector_end; i < n; ++i) store1(y + i, gated<G>(load1(x + i)));
}

template <Gate G, class T>
void gated_in_place(T* v, int64_t n) {
  gated_into<G>(v, v, n);
}

// gated_into, summing y over the pixels of each channel as it goes, for a squeeze-excitation's
// mean: the mean's own pass would read y again (in EfficientNet-B4, from L3 or memory, and
// oneDNN's pooling of one image runs on one thread). The layout puts channels innermost: `outer`
// blocks of `pixels` rows of `inner` values (nhwc: N × HW × C; nChw16c: N·⌈C/16⌉ × HW × 16), the
// sum of block o's value j going to sums[o·inner + j]. Threads split the rows and sum into their
// own row of `partial` (omp_get_max_threads() × partial_width(outer·inner) floats), added up at
// the end; a row a cache line longer than the sums, so no line is written by two threads.
inline int64_t partial_width(int64_t width) { return (width + 15) / 16 * 16 + 16; }

template <Gate G, class In, class Out>
void gated_summed_into(const In* x, Out* y, int64_t outer, int64_t pixels, int64_t inner, float* sums,
                       float* partial) {
  const int64_t rows = outer * pixels, width = outer * inner, stride = partial_width(width);
  int threads = 1;
#pragma omp parallel if (rows * inner >= PARALLEL_FROM)
  {
    const int t = omp_get_thread_num();
#pragma omp single
    threads = omp_get_num_threads();   // (its barrier: every thread sees it below)
    float* own = partial + t * stride;
    std::fill(own, own + width, 0.f);
    const int64_t begin = rows * t / threads, end = rows * (t + 1) / threads;
    int64_t o = begin / pixels, p = begin % pixels;
    for (int64_t r = begin; r < end; ++r) {
      const In* xr = x + r * inner;
      Out* yr = y + r * inner;
      float* s = own + o * inner;
      int64_t j = 0;
#if defined(__AVX512F__)
      for (; j + 16 <= inner; j += 16) {
        const __m512 v = gated16<G, Out>(load16(xr + j));
        store16(yr + j, v);
        store16(s + j, _mm512_add_ps(load16(s + j), v));
      }
      if (j < inner) {
        const __mmask16 k = first(inner - j);
        const __m512 v = gated16<G, Out>(load16(xr + j, k));
        store16(yr + j, v, k);
        store16(s + j, _mm512_add_ps(load16(s + j, k), v), k);
        j = inner;
      }
#endif
      for (; j < inner; ++j) {
        const float v = gated<G>(load1(xr + j));
        store1(yr + j, v);
        s[j] += v;
      }
      if (++p == pixels) p = 0, ++o;
    }
  }
  for (int64_t c = 0; c < width; ++c) {
    float total = 0.f;
    for (int t = 0; t < threads; ++t) total += partial[t * stride + c];
    sums[c] = total;
  }
}

}  // namespace af
