// y = x·W + b for one row x and a constant W [K, N]: a linear layer at batch 1 (a classifier's
// head), the runtime's own. Reading W once bounds it. W is stored in panels of 64 columns, each
// panel's rows one after another, so a thread streams one contiguous run of W per panel with its
// 64 sums in registers, and threads take whole panels (nothing to add across threads). In bf16 a
// panel's rows are interleaved in pairs, as vdpbf16ps multiplies them, and x is read in bf16, as
// oneDNN's bf16 product reads it; sums are f32. Against oneDNN 3.2's matmul, called alone
// (`python -m autofusion.benchmarks.conv_floor --program gemv_cost`, AMD Zen 5, one thread): 0.95-1.26x of
// its speed over the zoo's heads, warm and cold; the earlier form (four plain rows at a time into
// N sums in L1) was 0.68-0.86x with W cold on that CPU, though up to 1.3x faster on Zen 4.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "vector.h"

namespace af {

#if defined(__AVX512F__) && defined(__AVX512BF16__)
constexpr bool BF16_DOT = true;
#else
constexpr bool BF16_DOT = false;
#endif

// Columns per panel: four vectors of sums, held in registers while the panel's rows stream by.
constexpr int64_t PANEL = 64;

// Values in W's panelled form: ⌈N/64⌉ panels, each the units of 64 columns in turn (a unit: one
// f32 row, or two bf16 rows interleaved as vdpbf16ps multiplies them), zero past N and K.
template <class W>
int64_t panelled_size(int64_t k, int64_t n) {
  constexpr int64_t width = 4 / sizeof(W);
  return (n + PANEL - 1) / PANEL * ((k + width - 1) / width) * PANEL * width;
}

// W [K, N] row-major into its panelled form (out: panelled_size values)
template <class W>
void panelled(const W* w, int64_t k, int64_t n, W* out) {
  constexpr int64_t width = 4 / sizeof(W);
  const int64_t units = (k + width - 1) / width;
  for (int64_t p = 0; p < (n + PANEL - 1) / PANEL; ++p)
    for (int64_t u = 0; u < units; ++u)
      for (int64_t c = 0; c < PANEL; ++c)
        for (int64_t h = 0; h < width; ++h) {
          const int64_t row = u * width + h, col = p * PANEL + c;
          *out++ = row < k && col < n ? w[row * n + col] : W(0);
        }
}

#if defined(__AVX512F__)
// a + x·w over 16 columns: an f32 row, or a pair of bf16 rows (x two bf16 in 32 bits, w the pair
// interleaved, as vdpbf16ps multiplies them)
inline __m512 add_unit(__m512 a, float x, const float* w) {
  return _mm512_fmadd_ps(_mm512_set1_ps(x), _mm512_loadu_ps(w), a);
}
#if defined(__AVX512BF16__)
inline __m512 add_unit(__m512 a, uint32_t x, const uint16_t* w) {
  return _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi32(int(x)), (__m512bh)_mm512_loadu_si512(w));
}
#endif

// y = x·W + b, W panelled; units: K f32 rows or ⌈K/2⌉ bf16 row pairs; b may be null. Threads
// take whole panels: no sums to add across threads. Two chains of sums (even and odd units)
// keep two multiply-adds in flight per vector.
template <class X, class W, class Y>
void gemv_units(const X* x, const W* panels, const float* b, Y* y, int64_t units, int64_t n) {
  constexpr int64_t width = 4 / sizeof(W);
  const int64_t count = (n + PANEL - 1) / PANEL;
#pragma omp parallel for schedule(static) if (units * n >= PARALLEL_FROM)
  for (int64_t p = 0; p < count; ++p) {
    const W* w = panels + p * units * PANEL * width;
    __m512 even[4], odd[4];
    for (int i = 0; i < 4; ++i) even[i] = odd[i] = _mm512_setzero_ps();
    int64_t u = 0;
    for (; u + 2 <= units; u += 2, w += 2 * PANEL * width)
      for (int i = 0; i < 4; ++i) {
        even[i] = add_unit(even[i], x[u], w + 16 * i * width);
        odd[i] = add_unit(odd[i], x[u + 1], w + (PANEL + 16 * i) * width);
      }
    if (u < units)
      for (int i = 0; i < 4; ++i) even[i] = add_unit(even[i], x[u], w + 16 * i * width);
    for (int64_t i = 0, j = p * PANEL; i < 4 && j < n; ++i, j += 16) {
      const __mmask16 m = j + 16 <= n ? __mmask16(0xffff) : first(n - j);
      __m512 a = _mm512_add_ps(even[i], odd[i]);
      if (b) a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(m, b + j));
      if (m == 0xffff) store16(y + j, a);
      else store16(y + j, a, m);
    }
  }
}
#endif

// The entry points (y f32, or bf16 as uint16_t), W panelled. x: k floats, or k bf16 for bf16 W
// (an odd k's pairs completed in `padded`, ⌈k/2⌉ of them: x[k] may be a NaN, which 0·NaN would
// carry).
template <class Y>
void gemv(const float* x, const float* w, const float* b, Y* y, int64_t k, int64_t n) {
#if defined(__AVX512F__)
  gemv_units(x, w, b, y, k, n);
#else
  throw std::runtime_error("the runtime's product of one row needs AVX-512");
#endif
}

template <class Y>
void gemv(const uint16_t* x, const uint16_t* w, const float* b, Y* y, int64_t k, int64_t n,
          uint32_t* padded) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const uint32_t* xs = reinterpret_cast<const uint32_t*>(x);
  if (k % 2) {
    std::memcpy(padded, x, size_t(k) * 2);
    reinterpret_cast<uint16_t*>(padded)[k] = 0;
    xs = padded;
  }
  gemv_units(xs, w, b, y, (k + 1) / 2, n);
#else
  throw std::runtime_error("the runtime's bf16 product of one row needs AVX-512 BF16");
#endif
}

}  // namespace af
