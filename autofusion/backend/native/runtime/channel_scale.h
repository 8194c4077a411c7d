// y = x·s with s one value per channel, x channels-last (a squeeze-excitation's scale on its
// activation): rows of `channels` values, each multiplied by the channels' scales. oneDNN 3.2's
// binary multiply with s broadcast takes about twice as long over MobileNetV3-L's eight
// (`python -m autofusion.benchmarks.conv_floor --program channel_scale_cost`). x and y are f32 or bf16 (y may
// be x), s f32 or bf16; s holds one row of scales per batch, or one for all.
#pragma once

#include "vector.h"

namespace af {

#if defined(__AVX512F__)
template <class X, class S>
void scale_channels(const X* x, const S* s, X* y, int64_t batches, int64_t pixels, int64_t channels,
                    bool scales_per_batch) {
  const int64_t rows = batches * pixels, full = channels / 16 * 16;
  const __mmask16 tail = first(channels - full);
#pragma omp parallel for schedule(static) if (rows * channels >= PARALLEL_FROM)
  for (int64_t r = 0; r < rows; ++r) {
    const S* sr = s + (scales_per_batch ? r / pixels * channels : 0);
    const X* xr = x + r * channels;
    X* yr = y + r * channels;
    for (int64_t c = 0; c < full; c += 16) store16(yr + c, _mm512_mul_ps(load16(xr + c), load16(sr + c)));
    if (tail) store16(yr + full, _mm512_mul_ps(load16(xr + full, tail), load16(sr + full, tail)), tail);
  }
}
#else
// declared only: the runtime calls it in `if constexpr (VECTORISED)` branches (vector.h)
template <class X, class S>
void scale_channels(const X* x, const S* s, X* y, int64_t batches, int64_t pixels, int64_t channels,
                    bool scales_per_batch);
#endif

}  // namespace af
