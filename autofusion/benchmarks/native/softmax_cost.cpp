// What a softmax over rows costs oneDNN 3.2 on this CPU against the runtime's own loop
// (runtime/softmax.h, what the runtime runs): the attention scores of ViT-B/16 (12 heads x 197
// rows of 197) and BERT-Base at sequence 128 (12 x 128 of 128), f32 in, f32 or bf16 out (bf16
// is what an attention in bf16 writes for its second product). Built and run by
// `python -m autofusion.benchmarks.conv_floor --program softmax_cost`.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <random>
#include <vector>

#include "bench.h"
#include "softmax.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.f, 4.f);
  printf("%-22s %-5s %26s %10s %10s\n", "scores", "out", "oneDNN impl", "oneDNN us", "runtime us");
  for (auto [what, dims] : {std::pair{"ViT-B/16 12x197x197", memory::dims{1, 12, 197, 197}},
                            std::pair{"BERT-Base 12x128x128", memory::dims{1, 12, 128, 128}}}) {
    const int64_t cols = dims[3], rows = dims[1] * dims[2];
    std::vector<float> x(rows * cols);
    for (auto& v : x) v = normal(rng);
    const memory::desc src(dims, dt::f32, tag::abcd);
    for (dt out : {dt::f32, dt::bf16}) {
      const memory::desc dst(dims, out, tag::abcd);
      softmax_forward::primitive_desc pd(eng, prop_kind::forward_inference,
                                         algorithm::softmax_accurate, src, dst, 3);
      memory a(src, eng, x.data()), b(dst, eng);
      softmax_forward softmax(pd);
      const double onednn = median_us([&] {
        softmax.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_DST, b}});
        s.wait();
      }, 200, 20);
      const double runtime = median_us([&] {
        if (out == dt::f32) af::softmax_rows(x.data(), static_cast<float*>(b.get_data_handle()), rows, cols, false);
        else af::softmax_rows(x.data(), static_cast<uint16_t*>(b.get_data_handle()), rows, cols, false);
      }, 200, 20);
      printf("%-22s %-5s %26s %10.1f %10.1f\n", what, out == dt::f32 ? "f32" : "bf16",
             pd.impl_info_str(), onednn, runtime);
    }
  }
}
