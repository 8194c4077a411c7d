// What a squeeze-excitation gate costs on each call, two ways (fusion/rules/conv.py
// ConvGateFusionOp): x·g, in place over the activation (channels-last, as the runtime keeps it),
// against W·g over the weight and its reorder into the convolution's blocked layout. The ratio
// of their cost per value is the rule's GATED_WEIGHT_COST. Shapes: EfficientNet-B4's and
// MobileNetV3-L's gated projections. Built and run by `python -m autofusion.benchmarks.conv_floor
// --program gate_cost`; prints the median of 300 runs of each, in fp32 and bf16.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <unordered_map>

#include "bench.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Gated { int channels, size, out; };   // x [1, channels, size, size], W [out, channels, 1, 1]

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const Gated shapes[] = {{48, 190, 24}, {144, 95, 32}, {192, 95, 32}, {336, 48, 56}, {672, 24, 112},
                          {1632, 12, 272}, {72, 28, 40}, {120, 28, 40}, {480, 14, 112}};
  for (dt type : {dt::f32, dt::bf16}) {
    std::printf("%s\n", type == dt::f32 ? "fp32" : "bf16");
    for (const Gated& g : shapes) {
      const memory::dim x_size = memory::dim(g.channels) * g.size * g.size, w_size = memory::dim(g.out) * g.channels;
      memory::desc x_md({1, g.channels, g.size, g.size}, type, tag::nhwc), g_md({1, g.channels, 1, 1}, type, tag::nhwc);
      memory x(x_md, eng), gate(g_md, eng);
      binary on_x(binary::primitive_desc(eng, algorithm::binary_mul, x_md, g_md, x_md));
      std::unordered_map<int, memory> x_args{{DNNL_ARG_SRC_0, x}, {DNNL_ARG_SRC_1, gate}, {DNNL_ARG_DST, x}};
      const double x_us = median_us([&] { on_x.execute(s, x_args); s.wait(); }, 300, 100);

      convolution_forward::primitive_desc conv(
          eng, prop_kind::forward_inference, algorithm::convolution_direct,
          memory::desc({1, g.channels, g.size, g.size}, type, tag::any),
          memory::desc({g.out, g.channels, 1, 1}, type, tag::any),
          memory::desc({1, g.out, g.size, g.size}, type, tag::any), {1, 1}, {0, 0}, {0, 0});
      memory::desc w_md({g.out, g.channels, 1, 1}, dt::f32, tag::abcd), gp_md({1, g.channels, 1, 1}, dt::f32, tag::abcd);
      memory w(w_md, eng), gated(w_md, eng), plain_gate(gp_md, eng), blocked(conv.weights_desc(), eng);
      binary on_w(binary::primitive_desc(eng, algorithm::binary_mul, w_md, gp_md, w_md));
      reorder to_blocked(gated, blocked);
      std::unordered_map<int, memory> w_args{{DNNL_ARG_SRC_0, w}, {DNNL_ARG_SRC_1, plain_gate}, {DNNL_ARG_DST, gated}};
      const double w_us = median_us([&] {
        on_w.execute(s, w_args);
        to_blocked.execute(s, gated, blocked);
        s.wait();
      }, 300, 100);
      std::printf("  x %4d x %3d x %3d (%8ld values): x*g %7.1f us, %.3f ns a value | W %4d x %4d (%6ld): "
                  "W*g + reorder %7.1f us, %.3f ns a value\n",
                  g.channels, g.size, g.size, long(x_size), x_us, 1e3 * x_us / x_size, g.out, g.channels,
                  long(w_size), w_us, 1e3 * w_us / w_size);
    }
  }
}
