// A reduction over one run of axes of a dense row-major f32 array, the runtime's own: x seen as
// [outer, run, inner], y as [outer, inner]. oneDNN 3.2's fast reduction takes the innermost axes
// only, and its reference kernel the rest (an OCR recognizer's mean over the height of
// [b, c, h, w]: `ref:any`). Per outer index, y's row starts at the first row of the run and each
// next row is folded in, `inner` values at a time (the compiler vectorises the row). Max and min
// propagate NaN, as PyTorch and NumPy do (ONNX Runtime's depends on
// where the NaN falls); sums accumulate in f32.
#pragma once

#include <cstdint>

#include "vector.h"

namespace af {

enum class Fold { Sum, Max, Min, Prod };

template <Fold F>
inline float fold(float acc, float v) {
  if constexpr (F == Fold::Sum) return acc + v;
  if constexpr (F == Fold::Prod) return acc * v;
  if constexpr (F == Fold::Max) return (v > acc || v != v) ? v : acc;   // NaN stays
  return (v < acc || v != v) ? v : acc;
}

template <Fold F>
void reduce_run(const float* x, float* y, int64_t outer, int64_t run, int64_t inner, float scale) {
#pragma omp parallel for schedule(static) if (outer * run * inner >= PARALLEL_FROM && outer > 1)
  for (int64_t o = 0; o < outer; ++o) {
    float* out = y + o * inner;
    const float* first = x + o * run * inner;
    for (int64_t i = 0; i < inner; ++i) out[i] = first[i];
    for (int64_t r = 1; r < run; ++r) {
      const float* row = first + r * inner;
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) out[i] = fold<F>(out[i], row[i]);
    }
    if (scale != 1.f)
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) out[i] *= scale;
  }
}

}  // namespace af
