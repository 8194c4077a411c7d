// A 2-D depthwise convolution (one input channel per output channel, K×K taps, stride S, no
// dilation) over channels-last values, f32 or bf16 in and out, with its bias and post-ops; the
// runtime's own loop where a bf16 step would get oneDNN 3.2's older depthwise kernel (jit_dw),
// which takes 1.36-1.55x this one's time over MobileNetV3-L's fifteen depthwise shapes here
// (Sapphire Rapids, 2 threads, bf16 in and out: `python -m autofusion.benchmarks.conv_floor --program
// depthwise_cost`).
//
// Why it is fast: B outputs along a row are computed together (B independent FMA chains), and
// each input column of their window is loaded and widened from bf16 once, then feeds every tap
// that reads it: (B-1)·S+K loads per kernel row instead of B·K. Columns outside the image read
// as zero, so the row's edges run the same code. Every channel of B outputs is done before the
// next B (their input window stays in L1).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "native.h"
#include "vector.h"

namespace af {

// whether the loop below computes act after the bias (those oneDNN post-ops it knows)
inline bool depthwise_act(const Act& a) {
  switch (a.alg) {
    case Alg::Relu: case Alg::Clip: case Alg::HardSigmoid: case Alg::HardSwish: case Alg::Linear:
    case Alg::Logistic:
      return true;
    default:
      return false;
  }
}

// the (taps, stride) pairs the loop is built for: X(K, S) for each
#define AF_DEPTHWISE_KERNELS(X) X(3, 1) X(3, 2) X(5, 1) X(5, 2) X(7, 1) X(7, 2)

struct DepthwiseShape {
  int64_t batches, channels, height, width, out_height, out_width;
  int64_t pad_top, pad_left;
};

#if defined(__AVX512F__)
// acts over B vectors, oneDNN's definitions of its eltwise algorithms (alpha, beta as its post-ops
// take them): one dispatch per activation for all B, so the vectors stay in registers
template <int B>
inline void acts_over(const Act* acts, int n, __m512* v) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.f);
  for (int a = 0; a < n; ++a) {
    const __m512 alpha = _mm512_set1_ps(acts[a].alpha), beta = _mm512_set1_ps(acts[a].beta);
    auto each = [&](auto f) {
#pragma GCC unroll 16
      for (int b = 0; b < B; ++b) v[b] = f(v[b]);
    };
    switch (acts[a].alg) {
      case Alg::Relu:
        each([&](__m512 x) { return _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x, alpha); });
        break;
      case Alg::Clip: each([&](__m512 x) { return _mm512_min_ps(_mm512_max_ps(x, alpha), beta); }); break;
      case Alg::HardSigmoid:
        each([&](__m512 x) { return _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(x, alpha, beta), zero), one); });
        break;
      case Alg::HardSwish:
        each([&](__m512 x) {
          return _mm512_mul_ps(x, _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(x, alpha, beta), zero), one));
        });
        break;
      case Alg::Linear: each([&](__m512 x) { return _mm512_fmadd_ps(x, alpha, beta); }); break;
      case Alg::Logistic: each([&](__m512 x) { return sigmoid16(x); }); break;
      default: break;
    }
  }
}

// 16 channels, all of them (full: plain loads and stores) or those of mask m
template <bool full, class T>
inline __m512 load_channels(const T* p, __mmask16 m) { return full ? load16(p) : load16(p, m); }
template <bool full, class T>
inline void store_channels(T* p, __m512 x, __mmask16 m) {
  if (full) store16(p, x);
  else store16(p, x, m);
}

// B outputs of one row, whose window's top left input pixel is `at` pixels from x (checked: some
// of the window's columns, at column iw0 on, are outside [0, width), and only the first nb
// outputs exist); addresses are formed only for pixels inside the image
template <int K, int S, int B, bool checked, bool full, class In, class Out>
inline void depthwise_block(const In* x, int64_t at, const float* w, __m512 bias, const Act* acts, int n_acts,
                            Out* y, int64_t width, int64_t pixel, int i_lo, int i_hi, int64_t iw0,
                            int nb, __mmask16 m) {
  constexpr int T = (B - 1) * S + K;
  __m512 acc[B];
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) acc[b] = bias;
  for (int i = i_lo; i < i_hi; ++i) {
    const int64_t row = at + int64_t(i) * width;
    __m512 wv[K];
#pragma GCC unroll 8
    for (int j = 0; j < K; ++j) wv[j] = load_channels<full>(w + (i * K + j) * pixel, m);
#pragma GCC unroll 64
    for (int t = 0; t < T; ++t) {
      const bool inside = !checked || (iw0 + t >= 0 && iw0 + t < width);
      const __m512 v = inside ? load_channels<full>(x + (row + t) * pixel, m) : _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int j = 0; j < K; ++j)
        if ((t - j) % S == 0 && t >= j && (t - j) / S < B)
          acc[(t - j) / S] = _mm512_fmadd_ps(v, wv[j], acc[(t - j) / S]);
    }
  }
  acts_over<B>(acts, n_acts, acc);
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b)
    if (!checked || b < nb) store_channels<full>(y + int64_t(b) * pixel, acc[b], m);
}

// y[n, oh, ow, c] = acts(bias[c] + Σ_ij x[n, oh·S - pad_top + i, ow·S - pad_left + j, c]·w[i, j, c]),
// x and y channels-last (pixel stride = channels), w [K, K, C] f32, bias [C] f32
template <int K, int S, class In, class Out>
void depthwise(const In* x, const float* w, const float* bias, const Act* acts, int n_acts, Out* y,
               const DepthwiseShape& s) {
  constexpr int B = 8;
  const int64_t C = s.channels, blocks = (C + 15) / 16, rows = s.batches * s.out_height;
  const int64_t spans = (s.out_width + B - 1) / B;
  // the work is rows x spans of B outputs x chunks of channel blocks: every channel of a span
  // before the next span (its input window and output pixels stay in L1), the channels cut
  // into chunks only where too few spans would leave threads idle (7x7, 960 channels)
  const int64_t chunks = std::clamp<int64_t>(16 * omp_get_max_threads() / (rows * spans), 1, blocks);
#pragma omp parallel for schedule(static) collapse(3)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t sp = 0; sp < spans; ++sp)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t n = r / s.out_height, oh = r % s.out_height, ow = sp * B;
        const int64_t ih0 = oh * S - s.pad_top, iw0 = ow * S - s.pad_left;
        const int i_lo = int(std::max<int64_t>(0, -ih0)), i_hi = int(std::min<int64_t>(K, s.height - ih0));
        const int nb = int(std::min<int64_t>(B, s.out_width - ow));
        const bool inside = nb == B && iw0 >= 0 && iw0 + (B - 1) * S + K <= s.width;
        const int64_t at = (n * s.height + ih0) * s.width + iw0;
        Out* ys = y + (r * s.out_width + ow) * C;
        for (int64_t cb = ch * blocks / chunks; cb < (ch + 1) * blocks / chunks; ++cb) {
          const int64_t c = cb * 16;
          const __mmask16 m = C - c >= 16 ? __mmask16(0xffff) : first(C - c);
          const __m512 b = load16(bias + c, m);
          auto block = [&](auto checked, auto full) {
            depthwise_block<K, S, B, decltype(checked)::value, decltype(full)::value>(
                x + c, at, w + c, b, acts, n_acts, ys + c, s.width, C, i_lo, i_hi, iw0, nb, m);
          };
          using yes = std::true_type;
          using no = std::false_type;
          if (m == 0xffff) inside ? block(no(), yes()) : block(yes(), yes());
          else inside ? block(no(), no()) : block(yes(), no());
        }
      }
}

// the kernel for (k, stride), or false where this loop has none
template <class In, class Out>
bool depthwise_for(int64_t k, int64_t stride, const In* x, const float* w, const float* bias,
                   const Act* acts, int n_acts, Out* y, const DepthwiseShape& s) {
#define AF_DEPTHWISE_CALL(K, S) \
  if (k == K && stride == S) return depthwise<K, S>(x, w, bias, acts, n_acts, y, s), true;
  AF_DEPTHWISE_KERNELS(AF_DEPTHWISE_CALL)
#undef AF_DEPTHWISE_CALL
  return false;
}
#else
// declared only: the runtime calls it in `if constexpr (VECTORISED)` branches (vector.h)
template <class In, class Out>
bool depthwise_for(int64_t k, int64_t stride, const In* x, const float* w, const float* bias,
                   const Act* acts, int n_acts, Out* y, const DepthwiseShape& s);
#endif

inline bool depthwise_kernel_exists(int64_t k, int64_t stride) {
#define AF_DEPTHWISE_HAS(K, S) || (k == K && stride == S)
  return false AF_DEPTHWISE_KERNELS(AF_DEPTHWISE_HAS);
#undef AF_DEPTHWISE_HAS
}

}  // namespace af
