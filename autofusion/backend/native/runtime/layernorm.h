// Layer normalization over the rows of a dense [rows, cols] f32 array, with the residual added
// first where there is one: the runtime's own. oneDNN 3.2 adds the residual with a binary
// primitive into a temporary, then runs its jit:uni layer normalization; inside BERT-Base in
// bf16 (Zen 4, two threads, `autofusion profile`) the two took 0.17 ms for each of its 25 norms
// of 128 rows of 768, this loop 0.07: it reads x and the residual once, writes y once, with no
// temporary. Alone, warm or cold, this loop is as fast as oneDNN's or up to a third faster
// (`python -m autofusion.benchmarks.conv_floor --program layernorm_cost`). Per row, in f32: t = x + r, the
// mean, the variance as the mean of (t - mean)² (a second pass over a row still in L1, not
// E[t²] - mean²: no cancellation), then y = (t - mean)/√(var + ε)·scale + shift, written f32 or
// bf16 (uint16_t: normed rows a bf16 product reads). A NaN or an infinity in a row makes the
// row NaN, as the arithmetic does in the reference.
#pragma once

#include <cmath>

#include "vector.h"

namespace af {

#if defined(__AVX512F__)
template <class Out>
void layer_norm_row(const float* x, const float* r, const float* scale, const float* shift,
                    Out* y, int64_t cols, float epsilon) {
  const int64_t full = cols / 16 * 16;
  const __mmask16 tail = first(cols - full);
  auto at = [&](int64_t i, __mmask16 k) {   // t = x (+ r) at i, the lanes outside k 0
    const __m512 v = load16(x + i, k);
    return r ? _mm512_add_ps(v, load16(r + i, k)) : v;
  };
  // Σ f(i) over the row's 16-value pieces, on four sums: one sum's chain of dependent adds
  // would bound the loop (ViT's 197 rows of 768, one thread, warm, layernorm_cost
  // built with each: 43 µs on one sum, 32 on four)
  auto summed = [&](auto f) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= full; i += 64) {
      s0 = _mm512_add_ps(s0, f(i, 0xffff));
      s1 = _mm512_add_ps(s1, f(i + 16, 0xffff));
      s2 = _mm512_add_ps(s2, f(i + 32, 0xffff));
      s3 = _mm512_add_ps(s3, f(i + 48, 0xffff));
    }
    for (; i < full; i += 16) s0 = _mm512_add_ps(s0, f(i, 0xffff));
    if (tail) s1 = _mm512_add_ps(s1, f(full, tail));
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  };
  const __m512 mean = _mm512_set1_ps(summed(at) / float(cols));
  const float var = summed([&](int64_t i, __mmask16 k) {
    const __m512 d = _mm512_maskz_sub_ps(k, at(i, k), mean);
    return _mm512_mul_ps(d, d);
  }) / float(cols);
  const __m512 inv = _mm512_set1_ps(1.f / std::sqrt(var + epsilon));
  auto normed = [&](int64_t i, __mmask16 k) {
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(at(i, k), mean), inv);
    if (scale) v = _mm512_mul_ps(v, load16(scale + i, k));
    if (shift) v = _mm512_add_ps(v, load16(shift + i, k));
    return v;
  };
  for (int64_t i = 0; i < full; i += 16) store16(y + i, normed(i, 0xffff));
  if (tail) store16(y + full, normed(full, tail), tail);
}

// r, scale and shift may be null (no residual, no affine)
template <class Out>
void layer_norm_rows(const float* x, const float* r, const float* scale, const float* shift,
                     Out* y, int64_t rows, int64_t cols, float epsilon) {
#pragma omp parallel for schedule(static) if (rows * cols >= PARALLEL_FROM)
  for (int64_t i = 0; i < rows; ++i)
    layer_norm_row(x + i * cols, r ? r + i * cols : nullptr, scale, shift, y + i * cols, cols, epsilon);
}
#else
// declared only: the runtime calls it in `if constexpr (VECTORISED)` branches (vector.h)
template <class Out>
void layer_norm_rows(const float* x, const float* r, const float* scale, const float* shift,
                     Out* y, int64_t rows, int64_t cols, float epsilon);
#endif

}  // namespace af
