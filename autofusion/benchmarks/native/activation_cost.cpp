// What SiLU and GELU cost oneDNN 3.2 on this CPU: EfficientNet-B4's convolutions (channels-last,
// bias) with swish as a post-op, without it, and without it followed by the runtime's own SiLU
// over the result (runtime/gated.h, what the runtime runs), for the depthwise ones a separate
// swish eltwise too; BERT-Base's and ViT-B's MLP expansion (a matrix product of 768 to 3072 with
// a bias) with each GELU as a post-op, without, and without + the runtime's tanh-GELU; in bf16
// and fp32. Measured at one thread (BENCHMARKS.md, 2026-12-01-se-gate-bf16): oneDNN's swish takes ~0.7-1 ns a
// value, about twice the depthwise convolution itself and three times the 1x1's (24->144 at
// 190x190: 6.4 ms with it, 1.24 ms without). Built and run by
// `python -m autofusion.benchmarks.conv_floor --program activation_cost`.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <unordered_map>

#include "bench.h"
#include "gated.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Pointwise { int in, out, size; };   // a 1x1 convolution over size x size
const Pointwise EXPANDS[] = {{24, 144, 190}, {32, 192, 95}, {56, 336, 48}, {112, 672, 24}, {160, 960, 24},
                             {272, 1632, 12}};

primitive_attr post_op(algorithm alg, float alpha = 0.f) {
  post_ops po;
  po.append_eltwise(alg, alpha, 0.f);
  primitive_attr attr;
  attr.set_post_ops(po);
  return attr;
}

struct Times { double with, without, runtime_silu; };

// a convolution's median µs: with swish as a post-op, without, and without + the runtime's SiLU
Times with_and_without(engine& eng, stream& s, const memory::desc& src,
                                           const memory::desc& w, const memory::desc& dst,
                                           const memory::dims& strides, const memory::dims& pads,
                                           const char** impl) {
  memory::desc b({dst.get_dims()[1]}, dt::f32, tag::x);
  auto make = [&](const primitive_attr& attr) {
    return convolution_forward::primitive_desc(eng, prop_kind::forward_inference,
                                               algorithm::convolution_direct, src, w, b, dst, strides,
                                               pads, pads, attr);
  };
  auto with = make(post_op(algorithm::eltwise_swish, 1.f)), without = make(primitive_attr());
  *impl = with.impl_info_str();
  memory ms(src, eng), mw(with.weights_desc(), eng), mb(b, eng), md(dst, eng);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb},
                                       {DNNL_ARG_DST, md}};
  convolution_forward cw(with), cp(without);
  const int64_t n = int64_t(dst.get_size() / memory::data_type_size(dst.get_data_type()));
  auto silu = [&] {
    if (dst.get_data_type() == dt::bf16)
      af::gated_in_place<af::Gate::SiLU>(static_cast<uint16_t*>(md.get_data_handle()), n);
    else
      af::gated_in_place<af::Gate::SiLU>(static_cast<float*>(md.get_data_handle()), n);
  };
  return {median_us([&] { cw.execute(s, args); s.wait(); }, 60, 20),
          median_us([&] { cp.execute(s, args); s.wait(); }, 60, 20),
          median_us([&] { cp.execute(s, args); s.wait(); silu(); }, 60, 20)};
}

// [rows, 768] x [768, 3072] + bias: with oneDNN's GELU (erf, tanh) post-ops, without, and without
// followed by the runtime's tanh-GELU
void gelu_times(engine& eng, stream& s, dt type, int rows) {
  memory::desc a({rows, 768}, type, tag::ab), w({768, 3072}, type, tag::any), y({rows, 3072}, dt::f32, tag::ab),
      b({1, 3072}, dt::f32, tag::ab);
  auto time = [&](const primitive_attr& attr, bool runtime_gelu) {
    matmul::primitive_desc pd(eng, a, w, b, y, attr);
    matmul mm(pd);
    memory ma(a, eng), mw(pd.weights_desc(), eng), my(y, eng), mb(b, eng);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb},
                                         {DNNL_ARG_DST, my}};
    float* out = static_cast<float*>(my.get_data_handle());
    return median_us([&] {
      mm.execute(s, args);
      s.wait();
      if (runtime_gelu) af::gated_in_place<af::Gate::GeluTanh>(out, int64_t(rows) * 3072);
    }, 40, 10);
  };
  std::printf("%s matmul %d x 768 -> 3072: without %7.1f us | erf-GELU post-op %7.1f | tanh-GELU post-op "
              "%7.1f | + the runtime's tanh-GELU %7.1f us\n", type == dt::bf16 ? "bf16" : "fp32", rows,
              time(primitive_attr(), false), time(post_op(algorithm::eltwise_gelu_erf), false),
              time(post_op(algorithm::eltwise_gelu_tanh), false), time(primitive_attr(), true));
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  for (dt type : {dt::bf16, dt::f32}) {
    const char* name = type == dt::bf16 ? "bf16" : "fp32";
    double with_total = 0, without_total = 0, eltwise_total = 0, runtime_total = 0;
    for (const Depthwise& c : EFFICIENTNET_B4_DEPTHWISE) {
      const int pad = c.k / 2, out = (c.size + 2 * pad - c.k) / c.stride + 1;
      memory::desc src({1, c.channels, c.size, c.size}, type, tag::nhwc),
          w({c.channels, 1, 1, c.k, c.k}, type, tag::any), dst({1, c.channels, out, out}, type, tag::nhwc);
      const char* impl;
      auto [with, without, runtime] = with_and_without(eng, s, src, w, dst, {c.stride, c.stride}, {pad, pad}, &impl);
      eltwise_forward sw(eltwise_forward::primitive_desc(eng, prop_kind::forward_inference,
                                                         algorithm::eltwise_swish, dst, dst, 1.f, 0.f));
      memory md(dst, eng);
      std::unordered_map<int, memory> eargs{{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}};
      const double eltwise = median_us([&] { sw.execute(s, eargs); s.wait(); }, 60, 20);
      std::printf("%s depthwise %4d x %3d k%d s%d: with the swish post-op %7.1f us | without %7.1f + "
                  "a swish eltwise %6.1f = %7.1f us | + the runtime's SiLU %7.1f us (%s)\n",
                  name, c.channels, c.size, c.k, c.stride, with, without, eltwise, without + eltwise, runtime,
                  impl);
      with_total += with, without_total += without, eltwise_total += eltwise, runtime_total += runtime;
    }
    std::printf("%s depthwise in all: with the post-op %.1f us, without %.1f + eltwise %.1f, "
                "+ the runtime's SiLU %.1f\n", name, with_total, without_total, eltwise_total, runtime_total);
    with_total = without_total = runtime_total = 0;
    for (const Pointwise& c : EXPANDS) {
      memory::desc src({1, c.in, c.size, c.size}, type, tag::nhwc), w({c.out, c.in, 1, 1}, type, tag::any),
          dst({1, c.out, c.size, c.size}, type, tag::nhwc);
      const char* impl;
      auto [with, without, runtime] = with_and_without(eng, s, src, w, dst, {1, 1}, {0, 0}, &impl);
      std::printf("%s 1x1 %4d -> %4d x %3d: with the swish post-op %7.1f us, without %7.1f us, + the "
                  "runtime's SiLU %7.1f us (%s)\n", name, c.in, c.out, c.size, with, without, runtime, impl);
      with_total += with, without_total += without, runtime_total += runtime;
    }
    std::printf("%s 1x1 in all: with the post-op %.1f us, without %.1f, + the runtime's SiLU %.1f\n", name,
                with_total, without_total, runtime_total);
    for (int rows : {128, 197}) gelu_times(eng, s, type, rows);
  }
}
