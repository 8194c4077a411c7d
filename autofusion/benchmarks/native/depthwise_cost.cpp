// Depthwise convolutions (channels-last, bias + an activation as a post-op): oneDNN 3.2's
// primitive against the runtime's own loop (runtime/depthwise.h), side by side. In bf16 (bf16
// in), where the runtime takes the loop and oneDNN has jit_dw:avx512_core_bf16: MobileNetV3-L's
// fifteen (HardSwish, bf16 out) and EfficientNet-B4's eleven (f32 out: the runtime's SiLU gate
// rounds it after, so no post-op here). In fp32, where oneDNN runs brdgmm_dw and the runtime
// keeps it: MobileNetV3-L's. Each line checks the loop's result against oneDNN's (max
// difference, in units of the largest output). Built and run by
// `python -m autofusion.benchmarks.conv_floor --program depthwise_cost`.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "bench.h"
#include "depthwise.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

template <class In, class Out>
void compare(engine& eng, stream& s, const char* model, const std::vector<Depthwise>& shapes, const af::Act* act) {
  double total_dnnl = 0, total_loop = 0;
  const dt in_type = std::is_same_v<In, float> ? dt::f32 : dt::bf16, out_type = std::is_same_v<Out, float> ? dt::f32 : dt::bf16;
  std::printf("\n%s, %s in, %s out\n%-16s %10s %10s %7s %9s  %s\n", model, in_type == dt::f32 ? "f32" : "bf16", out_type == dt::f32 ? "f32" : "bf16",
              "C x H, k, s", "oneDNN µs", "loop µs", "ratio", "max diff", "oneDNN's implementation");
  for (const Depthwise& sh : shapes) {
    const int64_t c = sh.channels, h = sh.size, k = sh.k, pad = k / 2, ho = (h + 2 * pad - k) / sh.stride + 1;
    memory::desc src({1, c, h, h}, in_type, tag::nhwc), dst({1, c, ho, ho}, out_type, tag::nhwc);
    memory::desc wd({c, 1, 1, k, k}, in_type, tag::any), bd({c}, dt::f32, tag::x);
    primitive_attr attr;
    if (act) {
      post_ops po;
      po.append_eltwise(algorithm::eltwise_hardswish, act->alpha, act->beta);
      attr.set_post_ops(po);
    }
    convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference, algorithm::convolution_direct, src, wd,
                                           bd, dst, {sh.stride, sh.stride}, {pad, pad}, {pad, pad}, attr);
    // weights: ONNX's [C, 1, k, k] f32, reordered into oneDNN's layout (in bf16) and the loop's [k, k, C]
    std::vector<float> w(size_t(c * k * k)), taps(w.size()), bias(c);
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(float(i) * 0.37f) * 0.3f;
    for (int64_t ch = 0; ch < c; ++ch) {
      bias[ch] = 0.01f * float(ch % 7);
      for (int64_t t = 0; t < k * k; ++t) taps[t * c + ch] = w[ch * k * k + t];
    }
    memory w_plain(memory::desc({c, 1, 1, k, k}, dt::f32, tag::goihw), eng, w.data()), mw(pd.weights_desc(), eng);
    reorder(w_plain, mw).execute(s, w_plain, mw);
    memory ms(src, eng), mb(bd, eng, bias.data()), md(pd.dst_desc(), eng);
    auto* x = static_cast<In*>(ms.get_data_handle());
    for (int64_t i = 0; i < c * h * h; ++i) af::store1(x + i, std::cos(float(i) * 0.11f));
    convolution_forward conv(pd);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}};
    std::vector<Out> mine(size_t(c * ho * ho));
    const af::DepthwiseShape shape{1, c, h, h, ho, ho, pad, pad};
    auto loop = [&] { af::depthwise_for(k, sh.stride, x, taps.data(), bias.data(), act, act ? 1 : 0, mine.data(), shape); };
    double t_dnnl = 0, t_loop = 0;
    for (int r = 0; r < 3; ++r) {   // alternating, the median of each block
      t_dnnl += median_us([&] { conv.execute(s, args); s.wait(); }, 100, 10);
      t_loop += median_us(loop, 100, 10);
    }
    const Out* ref = static_cast<const Out*>(md.get_data_handle());
    float diff = 0, largest = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      diff = std::max(diff, std::fabs(af::load1(&mine[i]) - af::load1(&ref[i])));
      largest = std::max(largest, std::fabs(af::load1(&ref[i])));
    }
    std::printf("%5ld x %3ld, %ld, %d %10.1f %10.1f %6.2fx %9.1e  %s\n", long(c), long(h), long(k), sh.stride, t_dnnl / 3,
                t_loop / 3, t_dnnl / t_loop, diff / largest, pd.impl_info_str());
    total_dnnl += t_dnnl / 3;
    total_loop += t_loop / 3;
  }
  std::printf("%-16s %10.1f %10.1f %6.2fx\n", "all", total_dnnl, total_loop, total_dnnl / total_loop);
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::printf("threads %d\n", omp_get_max_threads());
  const af::Act hard_swish{af::Alg::HardSwish, 1.f / 6, 0.5f};
  compare<uint16_t, uint16_t>(eng, s, "MobileNetV3-L, HardSwish", MOBILENET_V3_LARGE_DEPTHWISE, &hard_swish);
  compare<uint16_t, float>(eng, s, "EfficientNet-B4, no post-op", EFFICIENTNET_B4_DEPTHWISE, nullptr);
  // why fp32 steps keep oneDNN's (brdgmm_dw there)
  compare<float, float>(eng, s, "MobileNetV3-L in fp32, HardSwish", MOBILENET_V3_LARGE_DEPTHWISE, &hard_swish);
}
