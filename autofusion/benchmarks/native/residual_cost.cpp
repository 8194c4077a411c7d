// A residual add after a convolution, as oneDNN 3.2 takes it: a binary add post-op reading the
// residual from its own buffer into a new result (what the runtime runs) against a sum post-op
// accumulating into the residual's buffer in place. ResNet-50's bottleneck expansions (1x1,
// with the ReLU after the add) and EfficientNet-B4's projections, bf16 and fp32; the two
// results are checked equal. Every buffer is warm here, and the two run equally fast
// (benchmarks/results/2026-12-04-in-place-residual.md): what the sum saves in a network is the cache room of one buffer. Built and run by
// `python -m autofusion.benchmarks.conv_floor --program residual_cost`.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "bench.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Expand { int in, out, size, count; };   // a 1x1 convolution over size x size, count in the net
const std::vector<Expand> RESNET50 = {{64, 256, 56, 3}, {128, 512, 28, 4}, {256, 1024, 14, 6}, {512, 2048, 7, 3}};
// EfficientNet-B4's projections with a residual (no activation after; the ReLU here is extra)
const std::vector<Expand> EFFICIENTNET_B4 = {{24, 24, 190, 1},  {192, 32, 95, 3},  {336, 56, 48, 3}, {672, 112, 24, 5},
                                  {960, 160, 24, 5}, {1632, 272, 12, 7}};

primitive_attr with(bool sum, const memory::desc& residual) {
  post_ops po;
  if (sum) po.append_sum(1.f);
  else po.append_binary(algorithm::binary_add, residual);
  po.append_eltwise(algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(po);
  return attr;
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::printf("threads %d\n", omp_get_max_threads());
  for (dt type : {dt::bf16, dt::f32})
  for (bool resnet : {true, false}) {
    const auto& NET = resnet ? RESNET50 : EFFICIENTNET_B4;
    double total_binary = 0, total_sum = 0;
    std::printf("%s\n%-18s %12s %12s %s\n", type == dt::bf16 ? "bf16" : "f32", "in->out @ size", "binary µs",
                "sum µs", "implementation");
    for (const Expand& e : NET) {
      memory::desc src({1, e.in, e.size, e.size}, type, tag::nhwc),
          dst({1, e.out, e.size, e.size}, type, tag::nhwc), w({e.out, e.in, 1, 1}, type, tag::any),
          b({e.out}, dt::f32, tag::x);
      auto make = [&](bool sum) {
        return convolution_forward::primitive_desc(eng, prop_kind::forward_inference,
                                                   algorithm::convolution_direct, src, w, b, dst, {1, 1},
                                                   {0, 0}, {0, 0}, with(sum, dst));
      };
      auto pb = make(false), ps = make(true);
      memory ms(src, eng), mw(pb.weights_desc(), eng), mb(b, eng), residual(dst, eng), out(dst, eng),
          acc(dst, eng);
      const size_t bytes = dst.get_size();
      // small values, so bf16's rounding is the same either way
      auto fill = [](memory& m, size_t n, float scale) {
        if (m.get_desc().get_data_type() == dt::f32) {
          float* p = static_cast<float*>(m.get_data_handle());
          for (size_t i = 0; i < n; ++i) p[i] = scale * float(int(i % 7) - 3);
        } else {
          uint16_t* p = static_cast<uint16_t*>(m.get_data_handle());
          for (size_t i = 0; i < n; ++i) {
            float v = scale * float(int(i % 7) - 3);
            uint32_t u;
            std::memcpy(&u, &v, 4);
            p[i] = uint16_t(u >> 16);
          }
        }
      };
      const size_t esize = type == dt::f32 ? 4 : 2;
      fill(ms, src.get_size() / esize, 0.25f);
      fill(mw, mw.get_desc().get_size() / esize, 0.125f);
      fill(mb, e.out, 0.5f);
      fill(residual, bytes / esize, 1.f);
      convolution_forward cb(pb), cs(ps);
      std::unordered_map<int, memory> binary_args{
          {DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, out},
          {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, residual}};
      std::unordered_map<int, memory> sum_args{
          {DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, acc}};
      cb.execute(s, binary_args);
      std::memcpy(acc.get_data_handle(), residual.get_data_handle(), bytes);
      cs.execute(s, sum_args);
      s.wait();
      if (std::memcmp(acc.get_data_handle(), out.get_data_handle(), bytes) != 0) {
        std::printf("results differ at %d->%d\n", e.in, e.out);
        return 1;
      }
      // the residual is rewritten before each sum run, as the layer before would have
      const double tb = median_us([&] { cb.execute(s, binary_args); s.wait(); }, 60, 20,
                                  [&] { std::memcpy(out.get_data_handle(), residual.get_data_handle(), bytes); });
      const double ts = median_us([&] { cs.execute(s, sum_args); s.wait(); }, 60, 20,
                                  [&] { std::memcpy(acc.get_data_handle(), residual.get_data_handle(), bytes); });
      total_binary += tb * e.count;
      total_sum += ts * e.count;
      std::printf("%4d->%-4d @ %-4d %12.1f %12.1f %s / %s\n", e.in, e.out, e.size, tb, ts, pb.impl_info_str(),
                  ps.impl_info_str());
    }
    std::printf("%s, in all: binary %.0f µs, sum %.0f µs\n", resnet ? "ResNet-50's 16" : "EfficientNet-B4's 24",
                total_binary, total_sum);
  }
  return 0;
}
