// A squeeze-excitation's scale, y = x·s with s one value per channel, over a channels-last
// activation: oneDNN 3.2's binary multiply (s broadcast as [1, C, 1, 1]) against the runtime's
// own loop (runtime/channel_scale.h), side by side. MobileNetV3-L's eight
// squeeze-excitation blocks, whose scales ConvGateFusionOp leaves on the activation (the next
// convolution's weight is larger than it). Built and run by
// `python -m autofusion.benchmarks.conv_floor --program channel_scale_cost`.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cstdio>
#include <unordered_map>

#include "bench.h"
#include "channel_scale.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Scale { int channels, size; };
const Scale MOBILENET_V3_LARGE[] = {{72, 28}, {120, 28}, {120, 28}, {480, 14}, {672, 14}, {672, 7},
                                    {960, 7}, {960, 7}};

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  double total_dnnl = 0, total_loop = 0;
  std::printf("threads %d\n%-14s %12s %12s %s\n", omp_get_max_threads(), "C x H x W", "oneDNN µs",
              "loop µs", "oneDNN's implementation");
  for (const Scale& sc : MOBILENET_V3_LARGE) {
    const memory::dims dims = {1, sc.channels, sc.size, sc.size};
    memory::desc x_md(dims, dt::f32, tag::nhwc), s_md({1, sc.channels, 1, 1}, dt::f32, tag::nchw);
    binary::primitive_desc pd(eng, algorithm::binary_mul, x_md, s_md, x_md);
    memory x(x_md, eng), sv(s_md, eng), y(x_md, eng), y2(x_md, eng);
    const int64_t n = int64_t(sc.channels) * sc.size * sc.size;
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(x.get_data_handle())[i] = float(i % 97) * 0.01f;
    for (int c = 0; c < sc.channels; ++c) static_cast<float*>(sv.get_data_handle())[c] = 0.5f + c % 7;
    binary prim(pd);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC_0, x}, {DNNL_ARG_SRC_1, sv}, {DNNL_ARG_DST, y}};
    const float* xs = static_cast<const float*>(x.get_data_handle());
    const float* ss = static_cast<const float*>(sv.get_data_handle());
    float* out = static_cast<float*>(y2.get_data_handle());
    double a = 0, b = 0;
    for (int round = 0; round < 5; ++round) {   // alternating, each the median of 200 calls
      a += median_us([&] { prim.execute(s, args); s.wait(); }, 200, 20);
      b += median_us([&] { af::scale_channels(xs, ss, out, 1, int64_t(sc.size) * sc.size, sc.channels, false); }, 200, 20);
    }
    for (int64_t i = 0; i < n; ++i)
      if (static_cast<float*>(y.get_data_handle())[i] != out[i]) {
        std::printf("results differ at %lld\n", (long long)i);
        return 1;
      }
    total_dnnl += a / 5;
    total_loop += b / 5;
    char name[32];
    std::snprintf(name, sizeof name, "%dx%dx%d", sc.channels, sc.size, sc.size);
    std::printf("%-14s %12.2f %12.2f %s\n", name, a / 5, b / 5, pd.impl_info_str());
  }
  std::printf("%-14s %12.2f %12.2f\n", "all eight", total_dnnl, total_loop);
}
