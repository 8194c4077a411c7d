// y = x·W + b for one row x and a constant W [K, N]: a linear layer at batch 1 (a classifier's
// head), the runtime's own. Reading W once bounds it, so it reads W front to back, four rows at a
// time, into N sums kept in L1 (oneDNN 3.2's matmul walks W in blocks). In MobileNetV3-L, one
// thread (`autofusion profile`), its two heads took 0.51 and 0.45 ms with oneDNN's product and
// take 0.39 and 0.36 with this one; called alone (`python -m benchmarks.conv_floor --program
// gemv_cost`) the two are within a few percent with W warm, this one up to 1.3x faster with W
// cold. In bf16, W's rows are interleaved in pairs (pair_rows), as vdpbf16ps multiplies them, and
// x is read in bf16, as oneDNN's bf16 product reads it; sums are f32. Threads split K, each
// summing into its own N floats, added to b at the end.
#pragma once

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "vector.h"

namespace af {

#if defined(__AVX512F__) && defined(__AVX512BF16__)
constexpr bool BF16_DOT = true;
#else
constexpr bool BF16_DOT = false;
#endif

// W [K, N] in bf16 as the bf16 kernel reads it: [⌈K/2⌉][N][2], rows 2p and 2p+1 interleaved
// (a missing last row 0)
inline void pair_rows(const uint16_t* w, int64_t k, int64_t n, uint16_t* pairs) {
  for (int64_t p = 0; p < (k + 1) / 2; ++p)
    for (int64_t j = 0; j < n; ++j) {
      pairs[(p * n + j) * 2] = w[2 * p * n + j];
      pairs[(p * n + j) * 2 + 1] = 2 * p + 1 < k ? w[(2 * p + 1) * n + j] : 0;
    }
}

#if defined(__AVX512F__)
// a + x·w over 16 columns (m of them): an f32 row, or a pair of bf16 rows (x two bf16 in 32 bits,
// w the pair interleaved, as vdpbf16ps multiplies them)
inline __m512 add_unit(__m512 a, float x, const float* w, __mmask16 m) {
  return _mm512_fmadd_ps(_mm512_set1_ps(x), _mm512_maskz_loadu_ps(m, w), a);
}
#if defined(__AVX512BF16__)
inline __m512 add_unit(__m512 a, uint32_t x, const uint16_t* w, __mmask16 m) {
  return _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi32(int(x)), (__m512bh)_mm512_maskz_loadu_epi32(m, w));
}
#endif

// sums[0:n] += x[u0:u1]·W[u0:u1, :], R units at a time (a unit's row is n·(4 / sizeof(W)) values)
template <class X, class W>
inline void add_rows(const X* x, const W* w, int64_t u0, int64_t u1, int64_t n, float* sums) {
  constexpr int64_t width = 4 / sizeof(W);   // values per column per unit
  auto units = [&](auto r_count, int64_t u) {
    constexpr int R = decltype(r_count)::value;
    auto columns = [&](int64_t j, __mmask16 m) {
      __m512 a = _mm512_maskz_loadu_ps(m, sums + j);
      for (int r = 0; r < R; ++r) a = add_unit(a, x[u + r], w + ((u + r) * n + j) * width, m);
      _mm512_mask_storeu_ps(sums + j, m, a);
    };
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) columns(j, 0xffff);
    if (j < n) columns(j, first(n - j));
  };
  int64_t u = u0;
  for (; u + 4 <= u1; u += 4) units(std::integral_constant<int, 4>{}, u);
  for (; u < u1; ++u) units(std::integral_constant<int, 1>{}, u);
}

// y = x·W + b. Unit: f32 rows (x float, W [K][N]) or pairs of bf16 rows (x as uint32_t pairs,
// W pair_rows'); units: K or ⌈K/2⌉; b may be null; sums: omp_get_max_threads()·n floats.
template <class X, class W, class Y>
void gemv_units(const X* x, const W* w, const float* b, Y* y, int64_t units, int64_t n, float* sums) {
#pragma omp parallel if (units * n >= PARALLEL_FROM)
  {
    const int t = omp_get_thread_num(), threads = omp_get_num_threads();
    const int64_t chunk = (units + threads - 1) / threads;
    float* own = sums + t * n;
    std::fill(own, own + n, 0.f);
    add_rows(x, w, std::min(units, t * chunk), std::min(units, (t + 1) * chunk), n, own);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = j + 16 <= n ? __mmask16(0xffff) : first(n - j);
      __m512 a = b ? _mm512_maskz_loadu_ps(m, b + j) : _mm512_setzero_ps();
      for (int s = 0; s < threads; ++s) a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(m, sums + s * n + j));
      if (m == 0xffff) store16(y + j, a);
      else store16(y + j, a, m);
    }
  }
}
#endif

// The entry points (y f32, or bf16 as uint16_t). x: k floats, or k bf16 for bf16 W (an odd k's
// pairs completed in `padded`, ⌈k/2⌉ of them: x[k] may be a NaN, which 0·NaN would carry).
template <class Y>
void gemv(const float* x, const float* w, const float* b, Y* y, int64_t k, int64_t n, float* sums) {
#if defined(__AVX512F__)
  gemv_units(x, w, b, y, k, n, sums);
#else
  throw std::runtime_error("the runtime's product of one row needs AVX-512");
#endif
}

template <class Y>
void gemv(const uint16_t* x, const uint16_t* pairs, const float* b, Y* y, int64_t k, int64_t n,
          float* sums, uint32_t* padded) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const uint32_t* xs = reinterpret_cast<const uint32_t*>(x);
  if (k % 2) {
    std::memcpy(padded, x, size_t(k) * 2);
    reinterpret_cast<uint16_t*>(padded)[k] = 0;
    xs = padded;
  }
  gemv_units(xs, pairs, b, y, (k + 1) / 2, n, sums);
#else
  throw std::runtime_error("the runtime's bf16 product of one row needs AVX-512 BF16");
#endif
}

}  // namespace af
