// ResNet-50's convolutions (bf16 and f32) with their activations channels-last (nhwc, what the
// runtime's convolutions settle on) against blocked by 16 channels (nChw16c): whether the layout
// is what makes the 1x1s slower than OpenVINO's. Built and run by
// `python -m autofusion.benchmarks.conv_floor --program layout_cost`.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "bench.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Conv { int in, out, size, k, stride, count; };   // over size x size input, count in the net
const std::vector<Conv> RESNET50 = {
    {64, 64, 56, 1, 1, 1},    {256, 64, 56, 1, 1, 2},   {64, 64, 56, 3, 1, 3},    {64, 256, 56, 1, 1, 4},
    {256, 128, 56, 1, 1, 1},  {128, 128, 56, 3, 2, 1},  {512, 128, 28, 1, 1, 3},  {128, 128, 28, 3, 1, 3},
    {128, 512, 28, 1, 1, 4},  {256, 512, 56, 1, 2, 1},  {512, 256, 28, 1, 1, 1},  {256, 256, 28, 3, 2, 1},
    {1024, 256, 14, 1, 1, 5}, {256, 256, 14, 3, 1, 5},  {256, 1024, 14, 1, 1, 6}, {512, 1024, 28, 1, 2, 1},
    {1024, 512, 14, 1, 1, 1}, {512, 512, 14, 3, 2, 1},  {2048, 512, 7, 1, 1, 2},  {512, 512, 7, 3, 1, 2},
    {512, 2048, 7, 1, 1, 3},  {1024, 2048, 14, 1, 2, 1}};

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::printf("threads %d\n", omp_get_max_threads());
  for (dt type : {dt::bf16, dt::f32}) {
    double total[2] = {0, 0};
    std::printf("%s\n%-26s %10s %10s  %s\n", type == dt::bf16 ? "bf16" : "f32", "in->out @ size kxk /s",
                "nhwc µs", "16c µs", "implementations");
    for (const Conv& c : RESNET50) {
      const int pad = c.k / 2, out_size = (c.size + 2 * pad - c.k) / c.stride + 1;
      double t[2];
      std::string impl[2];
      for (int blocked = 0; blocked < 2; ++blocked) {
        const tag act = blocked ? tag::aBcd16b : tag::acdb;
        memory::desc src({1, c.in, c.size, c.size}, type, act), dst({1, c.out, out_size, out_size}, type, act),
            w({c.out, c.in, c.k, c.k}, type, tag::any), b({c.out}, dt::f32, tag::x);
        post_ops po;
        po.append_eltwise(algorithm::eltwise_relu, 0.f, 0.f);
        primitive_attr attr;
        attr.set_post_ops(po);
        convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference, algorithm::convolution_direct,
                                               src, w, b, dst, {c.stride, c.stride}, {pad, pad}, {pad, pad}, attr);
        memory ms(src, eng), mw(pd.weights_desc(), eng), mb(b, eng), md(dst, eng);
        std::memset(ms.get_data_handle(), 0, src.get_size());
        std::memset(mw.get_data_handle(), 0, pd.weights_desc().get_size());
        std::memset(mb.get_data_handle(), 0, b.get_size());
        convolution_forward conv(pd);
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}};
        t[blocked] = median_us([&] { conv.execute(s, args); s.wait(); }, 60, 20);
        impl[blocked] = pd.impl_info_str();
        total[blocked] += t[blocked] * c.count;
      }
      std::printf("%4d->%-4d @ %-3d %dx%d /%d %10.1f %10.1f  %s / %s\n", c.in, c.out, c.size, c.k, c.k, c.stride, t[0],
                  t[1], impl[0].c_str(), impl[1].c_str());
    }
    std::printf("ResNet-50's 52 (the stem left out), in all: nhwc %.0f µs, nChw16c %.0f µs\n", total[0], total[1]);
  }
  return 0;
}
