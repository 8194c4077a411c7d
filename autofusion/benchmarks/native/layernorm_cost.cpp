// What a layer normalization over rows costs oneDNN 3.2 on this CPU against the runtime's own loop
// (runtime/layernorm.h, what the runtime runs), on the zoo's shapes: BERT-Base's post-norm
// (128 rows of 768, the residual added first: oneDNN's binary add into a temporary, then its
// layer normalization, as the runtime ran it before), GPT-2's and ViT-B/16's pre-norm (128 and
// 197 rows of 768, no affine: the rule folds it into the next product's weight), written f32 or
// bf16 (what a product in bf16 reads). Each call reads x as the step before left it: warm, and
// cold (a 32 MiB sweep first, as after a large product). Built and run by
// `python -m autofusion.benchmarks.conv_floor --program layernorm_cost`.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <random>
#include <unordered_map>
#include <vector>

#include "bench.h"
#include "layernorm.h"

using namespace dnnl;
using dt = memory::data_type;

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> sweep(8 << 20);
  float sink = 0.f;
  auto evict = [&] {
    for (size_t i = 0; i < sweep.size(); i += 16) sink += sweep[i] += 1.f;
  };
  printf("%-30s %-5s %-5s %22s %10s %10s\n", "rows", "out", "cache", "oneDNN impl", "oneDNN us", "runtime us");
  struct Shape { const char* what; int64_t rows, cols; bool residual, affine; };
  for (Shape sh : {Shape{"BERT-Base 128x768 + residual", 128, 768, true, true},
                   Shape{"GPT-2 128x768", 128, 768, false, false},
                   Shape{"ViT-B/16 197x768", 197, 768, false, false}}) {
    const int64_t n = sh.rows * sh.cols;
    std::vector<float> x(n), r(n), g(sh.cols), b(sh.cols);
    for (auto* v : {&x, &r, &g, &b})
      for (auto& e : *v) e = normal(rng);
    const memory::desc md({sh.rows, sh.cols}, dt::f32, memory::format_tag::ab);
    for (dt out : {dt::f32, dt::bf16}) {
      if (sh.residual && out == dt::bf16) continue;
      const memory::desc dst({sh.rows, sh.cols}, out, memory::format_tag::ab);
      auto flags = sh.affine ? normalization_flags::use_scale | normalization_flags::use_shift
                             : normalization_flags::none;
      layer_normalization_forward::primitive_desc pd(eng, prop_kind::forward_inference, md, dst,
                                                     1e-5f, flags);
      binary::primitive_desc add_pd(eng, algorithm::binary_add, md, md, md);
      memory xm(md, eng, x.data()), rm(md, eng, r.data()), sum(md, eng), y(dst, eng);
      memory gm({{sh.cols}, dt::f32, memory::format_tag::a}, eng, g.data());
      memory bm({{sh.cols}, dt::f32, memory::format_tag::a}, eng, b.data());
      layer_normalization_forward ln(pd);
      binary add(add_pd);
      auto onednn = [&] {
        memory src = xm;
        if (sh.residual) {
          add.execute(s, {{DNNL_ARG_SRC_0, xm}, {DNNL_ARG_SRC_1, rm}, {DNNL_ARG_DST, sum}});
          src = sum;
        }
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, y}};
        if (sh.affine) args.insert({{DNNL_ARG_SCALE, gm}, {DNNL_ARG_SHIFT, bm}});
        ln.execute(s, args);
        s.wait();
      };
      auto runtime = [&] {
        const float* res = sh.residual ? r.data() : nullptr;
        const float *scale = sh.affine ? g.data() : nullptr, *shift = sh.affine ? b.data() : nullptr;
        if (out == dt::f32)
          af::layer_norm_rows(x.data(), res, scale, shift, static_cast<float*>(y.get_data_handle()), sh.rows, sh.cols, 1e-5f);
        else
          af::layer_norm_rows(x.data(), res, scale, shift, static_cast<uint16_t*>(y.get_data_handle()), sh.rows, sh.cols, 1e-5f);
      };
      for (bool cold : {false, true}) {
        auto before = [&] { if (cold) evict(); };
        const double a = median_us(onednn, 300, 20, before), c = median_us(runtime, 300, 20, before);
        printf("%-30s %-5s %-5s %22s %10.1f %10.1f\n", sh.what, out == dt::f32 ? "f32" : "bf16",
               cold ? "cold" : "warm", pd.impl_info_str(), a, c);
      }
    }
  }
  return sink == 0.123f;   // keeps the sweep
}
