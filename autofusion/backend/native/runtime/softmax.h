// Softmax and log-softmax over the rows of a dense [rows, cols] array, the runtime's own: on this
// CPU (Zen 4) oneDNN 3.2's softmax costs twice as much or more (ViT's 2364 rows of 197, one
// thread: 450 µs in f32 against 180; `python -m autofusion.benchmarks.conv_floor --program softmax_cost`). It
// reads f32 and writes f32 or bf16 (uint16_t: an attention's weights), computing in f32. Per row: the largest value m, then
// s = Σ e^(x-m), then e^(x-m)/s (the exponentials kept from the second pass in an f32 row) or
// x - m - log s. As in PyTorch, a row holding a NaN, or whose largest value is ±inf, is NaN
// throughout; e^(x-m) below e^-87 is 0.
// An attention's additive mask is added to x as the row is read (x + mask row, one mask row per
// row of x, rows shared where the mask broadcasts): as a binary post-op of oneDNN's q·kᵀ it adds
// 40% to the product (GPT-2's causal mask, [12,128,128] bf16 on AMX: 29 µs against 20,
// autofusion/benchmarks/native/attention_cost.cpp), here one more load per value of a pass that reads the
// row anyway.
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

#include "reduce.h"
#include "scalar.h"   // expf's vector form for the loops below
#include "vector.h"

namespace af {

// Softmax and log-softmax along an axis that is not the last: x seen as [outer, run, inner], the
// axis the run, each of the inner columns normalised on its own (a detector's distribution over
// 16 box bins, [b, 16, 4, anchors] over axis 1, where oneDNN 3.2 has only its reference kernel:
// 22 ms of a 52 ms YOLO-style model at 320x320, two threads). The work is split into blocks of
// COLUMNS columns of one outer index; per block the passes go row by row over contiguous values
// the compiler vectorises (any ISA): the columns' largest values m (NaN-propagating),
// y = e^(x-m) and the sums s, then y / s or x - m - log s. A column holding a NaN, or whose
// largest value is ±inf, is NaN throughout, as the rows' loop makes it.
inline void softmax_columns(const float* x, float* y, int64_t outer, int64_t run, int64_t inner, bool log) {
  constexpr int64_t COLUMNS = 512;
  const int64_t blocks = (inner + COLUMNS - 1) / COLUMNS;
#pragma omp parallel for schedule(static) if (outer * run * inner >= PARALLEL_FROM && outer * blocks > 1)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    const int64_t o = task / blocks, from = task % blocks * COLUMNS, n = std::min(COLUMNS, inner - from);
    const float* xs = x + o * run * inner + from;
    float* ys = y + o * run * inner + from;
    float m[COLUMNS], s[COLUMNS];
    for (int64_t i = 0; i < n; ++i) m[i] = xs[i], s[i] = 0.f;
    for (int64_t r = 1; r < run; ++r)
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) m[i] = fold<Fold::Max>(m[i], xs[r * inner + i]);
    for (int64_t r = 0; r < run; ++r)
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float e = expf(xs[r * inner + i] - m[i]);
        s[i] += e;
        ys[r * inner + i] = e;
      }
    if (log) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) s[i] = m[i] + logf(s[i]);
      for (int64_t r = 0; r < run; ++r)
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) ys[r * inner + i] = xs[r * inner + i] - s[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) s[i] = 1.f / s[i];
      for (int64_t r = 0; r < run; ++r)
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) ys[r * inner + i] *= s[i];
    }
  }
}

#if defined(__AVX512F__)
template <class Out>
void softmax_row(const float* x, const float* mask, Out* y, int64_t cols, bool log, std::vector<float>& row) {
  const int64_t full = cols / 16 * 16;
  const __mmask16 tail = first(cols - full);
  // x (plus the mask) at i: all 16, or the tail's
  auto at = [&](int64_t i) { return mask ? _mm512_add_ps(load16(x + i), load16(mask + i)) : load16(x + i); };
  auto at_tail = [&] {
    return mask ? _mm512_add_ps(load16(x + full, tail), load16(mask + full, tail)) : load16(x + full, tail);
  };
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mv = neg_inf;
  __mmask16 nan = 0;
  for (int64_t i = 0; i < full; i += 16) {
    const __m512 v = at(i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    mv = _mm512_max_ps(mv, v);
  }
  if (tail) {
    const __m512 v = at_tail();
    nan |= _mm512_mask_cmp_ps_mask(tail, v, v, _CMP_UNORD_Q);
    mv = _mm512_mask_max_ps(mv, tail, mv, v);
  }
  const float m = _mm512_reduce_max_ps(mv);
  if (nan || std::isinf(m)) {
    for (int64_t i = 0; i < cols; ++i) store1(y + i, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const __m512 mm = _mm512_set1_ps(m), floor = _mm512_set1_ps(-87.f), zero = _mm512_setzero_ps();
  // e^(x-m): 0 below e^-87 (and for -inf)
  auto exp_from_max = [&](__m512 v) {
    const __m512 d = _mm512_sub_ps(v, mm);
    return _mm512_mask_mov_ps(exp16(_mm512_max_ps(d, floor)), _mm512_cmp_ps_mask(d, floor, _CMP_LT_OQ), zero);
  };
  if (!log && int64_t(row.size()) < cols) row.resize(cols);
  __m512 sv = zero;
  for (int64_t i = 0; i < full; i += 16) {
    const __m512 e = exp_from_max(at(i));
    if (!log) _mm512_storeu_ps(row.data() + i, e);
    sv = _mm512_add_ps(sv, e);
  }
  if (tail) {
    const __m512 e = _mm512_maskz_mov_ps(tail, exp_from_max(at_tail()));
    if (!log) _mm512_mask_storeu_ps(row.data() + full, tail, e);
    sv = _mm512_add_ps(sv, e);
  }
  const float s = _mm512_reduce_add_ps(sv);
  if (log) {
    const __m512 ls = _mm512_set1_ps(std::log(s));
    for (int64_t i = 0; i < full; i += 16) store16(y + i, _mm512_sub_ps(_mm512_sub_ps(at(i), mm), ls));
    if (tail) store16(y + full, _mm512_sub_ps(_mm512_sub_ps(at_tail(), mm), ls), tail);
    return;
  }
  const __m512 inv = _mm512_set1_ps(1.f / s);
  for (int64_t i = 0; i < full; i += 16) store16(y + i, _mm512_mul_ps(_mm512_loadu_ps(row.data() + i), inv));
  if (tail) store16(y + full, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row.data() + full), inv), tail);
}

// `mask_rows`: where each row's mask row starts in `mask` (none without a mask). `stride`: the
// rows' distance in x and y, the values past `cols` in a row of y written 0 (padding)
template <class Out>
void softmax_rows(const float* x, Out* y, int64_t rows, int64_t cols, int64_t stride, bool log,
                  const float* mask = nullptr, const int64_t* mask_rows = nullptr) {
#pragma omp parallel if (rows * cols >= PARALLEL_FROM)
  {
    std::vector<float> row;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      Out* out = y + r * stride;
      softmax_row(x + r * stride, mask ? mask + mask_rows[r] : nullptr, out, cols, log, row);
      for (int64_t i = cols; i < stride; ++i) store1(out + i, 0.f);
    }
  }
}
#else
// declared only: the runtime calls it in `if constexpr (VECTORISED)` branches (vector.h)
template <class Out>
void softmax_rows(const float* x, Out* y, int64_t rows, int64_t cols, int64_t stride, bool log,
                  const float* mask = nullptr, const int64_t* mask_rows = nullptr);
#endif

}  // namespace af
