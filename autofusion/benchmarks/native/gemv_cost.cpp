// What a linear layer at batch 1 costs oneDNN 3.2's matmul on this CPU against the runtime's own
// product of one row (runtime/gemv.h, what the runtime runs): the classifier heads of the zoo,
// in f32 and in bf16 (x and W in bf16, f32 sums), each with W warm in cache and cold (a 64 MB
// buffer read between calls, as a model's other weights evict W between runs). The two
// alternate in blocks of 50 calls; the medians of the block medians are printed. Built and run
// by `python -m autofusion.benchmarks.conv_floor --program gemv_cost`.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <random>
#include <vector>

#include "bench.h"
#include "gemv.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

static std::vector<float> other(16 << 20, 1.f);   // 64 MB
static volatile float sink;

static void evict() {
  float s = 0;
  for (size_t i = 0; i < other.size(); i += 16) s += other[i];
  sink = s;
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  printf("%-28s %-5s %-5s %20s %10s %10s %8s\n", "head [K x N]", "type", "W", "oneDNN impl", "oneDNN us",
         "runtime us", "ratio");
  struct Head { const char* what; int64_t k, n; };
  for (auto [what, k, n] : {Head{"MobileNetV3-L 960x1280", 960, 1280}, Head{"MobileNetV3-L 1280x1000", 1280, 1000},
                            Head{"EfficientNet-B4 1792x1000", 1792, 1000}, Head{"ResNet-50 2048x1000", 2048, 1000},
                            Head{"ConvNeXt-T 768x1000", 768, 1000}}) {
    std::vector<float> x(k), w(k * n), b(n);
    for (auto& v : x) v = normal(rng);
    for (auto& v : w) v = normal(rng);
    for (auto& v : b) v = normal(rng);
    for (dt type : {dt::f32, dt::bf16}) {
      const memory::desc x_md({1, k}, type, tag::ab), y_md({1, n}, dt::f32, tag::ab), b_md({1, n}, dt::f32, tag::ab);
      matmul::primitive_desc pd(eng, x_md, memory::desc({k, n}, type, tag::any), b_md, y_md);
      memory w_f32({{k, n}, dt::f32, tag::ab}, eng, w.data()), x_f32({{1, k}, dt::f32, tag::ab}, eng, x.data());
      memory wm(pd.weights_desc(), eng), xm(x_md, eng), ym(y_md, eng), bm(b_md, eng, b.data());
      reorder(w_f32, wm).execute(s, w_f32, wm);
      reorder(x_f32, xm).execute(s, x_f32, xm);
      // the runtime's operands: W panelled (f32 rows, or bf16 row pairs), x as the product reads it
      memory w_plain({{k, n}, type, tag::ab}, eng);
      reorder(w_f32, w_plain).execute(s, w_f32, w_plain);
      s.wait();
      std::vector<float> w_panels, y(n);
      std::vector<uint16_t> pair_panels;
      if (type == dt::f32) {
        w_panels.resize(af::panelled_size<float>(k, n));
        af::panelled(static_cast<const float*>(w_plain.get_data_handle()), k, n, w_panels.data());
      } else {
        pair_panels.resize(af::panelled_size<uint16_t>(k, n));
        af::panelled(static_cast<const uint16_t*>(w_plain.get_data_handle()), k, n, pair_panels.data());
      }
      std::vector<uint32_t> padded((k + 1) / 2);
      s.wait();
      matmul product(pd);
      auto onednn = [&] {
        product.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}});
        s.wait();
      };
      auto runtime = [&] {
        if (type == dt::f32)
          af::gemv(x.data(), w_panels.data(), b.data(), y.data(), k, n);
        else
          af::gemv(static_cast<const uint16_t*>(xm.get_data_handle()), pair_panels.data(), b.data(), y.data(), k, n,
                   padded.data());
      };
      for (bool cold : {false, true}) {
        std::vector<double> a, r;
        onednn(), runtime();
        for (int block = 0; block < 6; ++block) {
          auto before = [&] { if (cold) evict(); };
          a.push_back(median_us(onednn, 50, 0, before));
          r.push_back(median_us(runtime, 50, 0, before));
        }
        std::sort(a.begin(), a.end());
        std::sort(r.begin(), r.end());
        const double ma = (a[2] + a[3]) / 2, mr = (r[2] + r[3]) / 2;
        printf("%-28s %-5s %-5s %20s %10.1f %10.1f %7.2fx\n", what, type == dt::f32 ? "f32" : "bf16",
               cold ? "cold" : "warm", pd.impl_info_str(), ma, mr, ma / mr);
      }
    }
  }
}
