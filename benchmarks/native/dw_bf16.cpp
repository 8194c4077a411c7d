// EfficientNet-B4's bf16 depthwise convolutions (3x3 and 5x5, stride 1 and 2, bias + SiLU,
// channels-last): oneDNN 3.2's jit_dw:avx512_core_bf16, the kernel that leaves autofusion's bf16
// EfficientNet-B4 behind OpenVINO's (25.7 ms against OpenVINO's brgconv_dw 22.0 at one thread,
// BENCHMARKS.md session 7), against a first plain C++ kernel, which is not in the runtime: it is
// the measured starting point for one. Each input row is converted to f32 once, into a ring of
// k zero-padded rows; 8 outputs x 16 channels accumulate in f32 vectors (GCC's vector extension);
// SiLU and the rounding to bf16 follow over the row. Checked against oneDNN's output (max error
// ~1 bf16 ulp). Measured at 0.91-0.99x jit_dw's speed in all at one thread, 0.92x at two: faster
// on large stride-1 images (up to 1.17x), slower at stride 2 (0.7-0.85x: a quarter as many
// outputs per converted value) and at 12x12 with 1632 channels (0.6-0.9x). Not there yet: bf16
// operands straight into the FMAs (vdpbf16ps pairs) instead of a converted copy, SiLU fused into
// the store, wider channel blocking for small images. Built and run by
// `python -m benchmarks.conv_floor --program dw_bf16`.
#include <oneapi/dnnl/dnnl.hpp>

#include "bench.h"
#include "gated.h"    // the runtime's bf16 loads, stores and conversion
#include "scalar.h"   // the runtime's: af_silu over libmvec's vector expf
#include <immintrin.h>
#include <omp.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

static inline v16 load_bf16(const uint16_t* p) { return (v16)af::load16(p); }
static inline void store_bf16(uint16_t* p, v16 x) { af::store16(p, (__m512)x); }

// N outputs of one 16-channel block: bias + the k x k taps, accumulated in registers
template <int N>
static inline void block(const v16* const* rk, const v16u* wv, const v16u* bv, v16* acc, int k,
                         int cb, int c, int ow0, size_t step) {
  v16 a[N];
  #pragma GCC unroll 8
  for (int j = 0; j < N; ++j) a[j] = bv[c];
  for (int kh = 0; kh < k; ++kh) {
    const v16* r = rk[kh] + size_t(ow0) * step + c;
    const v16u* wk = wv + size_t(kh * k) * cb + c;
    for (int kw = 0; kw < k; ++kw) {
      const v16 wt = wk[size_t(kw) * cb];
      const v16* p = r + size_t(kw) * cb;
      #pragma GCC unroll 8
      for (int j = 0; j < N; ++j) a[j] += p[j * step] * wt;
    }
  }
  #pragma GCC unroll 8
  for (int j = 0; j < N; ++j) acc[size_t(ow0 + j) * cb + c] = a[j];
}

// src [H][W][C] bf16, w [k][k][C] f32, bias [C], dst [Ho][Wo][C] bf16; C % 16 == 0
void dw(const uint16_t* src, const float* w, const float* bias, uint16_t* dst, int H, int W, int C,
        int k, int s, int pad) {
  const int Ho = (H + 2 * pad - k) / s + 1, Wo = (W + 2 * pad - k) / s + 1, Wp = W + 2 * pad;
  const int cb = C / 16;
  #pragma omp parallel
  {
    std::vector<v16> rows(size_t(k) * Wp * cb);   // k padded input rows, f32
    std::vector<v16> acc(size_t(Wo) * cb);
    std::vector<int> held(k, -2);   // which input row each slot of `rows` holds (a ring)
    #pragma omp for schedule(static)
    for (int oh = 0; oh < Ho; ++oh) {
      for (int kh = 0; kh < k; ++kh) {
        const int ih = oh * s - pad + kh, slot = ((ih % k) + k) % k;
        if (held[slot] == ih) continue;   // converted for an earlier output row
        held[slot] = ih;
        v16* r = &rows[size_t(slot) * Wp * cb];
        if (ih < 0 || ih >= H) { std::memset(r, 0, sizeof(v16) * Wp * cb); continue; }
        std::memset(r, 0, sizeof(v16) * pad * cb);
        std::memset(r + size_t(pad + W) * cb, 0, sizeof(v16) * pad * cb);
        const uint16_t* in = src + size_t(ih) * W * C;
        for (int i = 0; i < W * cb; ++i) r[pad * cb + i] = load_bf16(in + size_t(i) * 16);
      }
      const v16u* wv = (const v16u*)w;
      const v16u* bv = (const v16u*)bias;
      const size_t step = size_t(s) * cb;
      const v16* rk[16];   // the input row of each kh
      for (int kh = 0; kh < k; ++kh) rk[kh] = &rows[size_t((((oh * s - pad + kh) % k) + k) % k) * Wp * cb];
      int ow0 = 0;   // 8 outputs at a time, every channel block of them before the next 8
      for (; ow0 + 8 <= Wo; ow0 += 8)
        for (int c = 0; c < cb; ++c) block<8>(rk, wv, bv, acc.data(), k, cb, c, ow0, step);
      for (; ow0 + 4 <= Wo; ow0 += 4)
        for (int c = 0; c < cb; ++c) block<4>(rk, wv, bv, acc.data(), k, cb, c, ow0, step);
      for (; ow0 < Wo; ++ow0)
        for (int c = 0; c < cb; ++c) block<1>(rk, wv, bv, acc.data(), k, cb, c, ow0, step);
      uint16_t* out = dst + size_t(oh) * Wo * C;
      for (int i = 0; i < Wo * cb; ++i) {
        v16 x = acc[i];
        float t[16];
        std::memcpy(t, &x, 64);
        #pragma omp simd
        for (int l = 0; l < 16; ++l) t[l] = af::af_silu(t[l]);
        std::memcpy(&x, t, 64);
        store_bf16(out + size_t(i) * 16, x);
      }
    }
  }
}

int main() {
  engine eng(engine::kind::cpu, 0); stream s(eng);
  double tj = 0, tm = 0;
  for (const Depthwise& sh : EFFICIENTNET_B4_DEPTHWISE) {
    const int pad = sh.k / 2, ho = (sh.size + 2 * pad - sh.k) / sh.stride + 1;
    memory::desc src({1, sh.channels, sh.size, sh.size}, dt::bf16, tag::nhwc), wd({sh.channels, 1, 1, sh.k, sh.k}, dt::bf16, tag::any), b({sh.channels}, dt::f32, tag::x), d({1, sh.channels, ho, ho}, dt::bf16, tag::nhwc);
    post_ops po; po.append_eltwise(algorithm::eltwise_swish, 1.f, 0.f); primitive_attr a; a.set_post_ops(po);
    convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference, algorithm::convolution_direct, src, wd, b, d, {sh.stride, sh.stride}, {pad, pad}, {pad, pad}, a);
    memory ms(src, eng), mb(b, eng), md(d, eng);
    // weights: plain f32 [C][k][k] -> oneDNN's layout via reorder; ours [k][k][C] f32
    std::vector<float> wplain(size_t(sh.channels) * sh.k * sh.k), wours(wplain.size()), bias(sh.channels);
    for (size_t i = 0; i < wplain.size(); ++i) wplain[i] = std::sin(i * 0.37f) * 0.3f;
    for (int c = 0; c < sh.channels; ++c) { bias[c] = 0.01f * (c % 7); for (int t = 0; t < sh.k * sh.k; ++t) wours[size_t(t) * sh.channels + c] = wplain[size_t(c) * sh.k * sh.k + t]; }
    memory wp(memory::desc({sh.channels, 1, 1, sh.k, sh.k}, dt::f32, tag::goihw), eng, wplain.data());
    memory mw(pd.weights_desc(), eng);
    reorder(wp, mw).execute(s, wp, mw); s.wait();
    std::memcpy(mb.get_data_handle(), bias.data(), 4 * sh.channels);
    uint16_t* sp = (uint16_t*)ms.get_data_handle();
    for (size_t i = 0; i < size_t(sh.channels) * sh.size * sh.size; ++i) { float f = std::cos(i * 0.11f); uint32_t u; std::memcpy(&u, &f, 4); sp[i] = u >> 16; }
    convolution_forward c(pd);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}};
    std::vector<uint16_t> mine(size_t(sh.channels) * ho * ho);
    double j = median_us([&] { c.execute(s, args); s.wait(); }, 50, 10);
    double m = median_us([&] { dw(sp, wours.data(), bias.data(), mine.data(), sh.size, sh.size, sh.channels, sh.k, sh.stride, pad); }, 50, 10);
    const uint16_t* ref = (const uint16_t*)md.get_data_handle();
    float err = 0, mx = 0;
    for (size_t i = 0; i < mine.size(); ++i) { err = std::max(err, std::fabs(af::bf16_to_f32(mine[i]) - af::bf16_to_f32(ref[i]))); mx = std::max(mx, std::fabs(af::bf16_to_f32(ref[i]))); }
    printf("c%4d %3d k%d s%d: jit_dw %7.1f us  ours %7.1f us  %.2fx  max err %.2g of %.2g\n", sh.channels, sh.size, sh.k, sh.stride, j, m, j / m, err, mx);
    tj += j; tm += m;
  }
  printf("total jit_dw %.1f ours %.1f: %.2fx\n", tj, tm, tj / tm);
}
