// What SiLU costs oneDNN 3.2's bf16 1x1 convolutions on this CPU: EfficientNet-B4's expand
// convolutions (channels-last, bias) with swish as a post-op against without it. At one thread
// (BENCHMARKS.md, session 7) the post-op takes ~1 ns a value: 24->144 at 190x190 runs 6.4 ms with
// it and 1.24 ms without. Built and run by `python -m benchmarks.conv_floor --program pw_swish`.
#include <oneapi/dnnl/dnnl.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unordered_map>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
template <class F> double med(F f) {
  std::vector<double> t;
  for (int r = 0; r < 60; ++r) { auto a = std::chrono::steady_clock::now(); f(); t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count()); }
  std::sort(t.begin() + 10, t.end()); return t[10 + 25];
}
int main() {
  engine eng(engine::kind::cpu, 0); stream s(eng);
  struct Sh { int ci, co, hw; };
  double A = 0, B = 0;
  for (Sh sh : {Sh{24, 144, 190}, {32, 192, 95}, {56, 336, 48}, {112, 672, 24}, {160, 960, 24}, {272, 1632, 12}}) {
    memory::desc src({1, sh.ci, sh.hw, sh.hw}, dt::bf16, tag::nhwc), w({sh.co, sh.ci, 1, 1}, dt::bf16, tag::any), b({sh.co}, dt::f32, tag::x), d({1, sh.co, sh.hw, sh.hw}, dt::bf16, tag::nhwc);
    post_ops po; po.append_eltwise(algorithm::eltwise_swish, 1.f, 0.f); primitive_attr a; a.set_post_ops(po);
    convolution_forward::primitive_desc with(eng, prop_kind::forward_inference, algorithm::convolution_direct, src, w, b, d, {1, 1}, {0, 0}, {0, 0}, a);
    convolution_forward::primitive_desc plain(eng, prop_kind::forward_inference, algorithm::convolution_direct, src, w, b, d, {1, 1}, {0, 0}, {0, 0});
    memory ms(src, eng), mw(with.weights_desc(), eng), mb(b, eng), md(d, eng);
    convolution_forward cw(with), cp(plain);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}};
    double t1 = med([&] { cw.execute(s, args); s.wait(); }), t2 = med([&] { cp.execute(s, args); s.wait(); });
    printf("1x1 %4d->%4d @%3d: with swish %7.1f us, without %7.1f us (%s)\n", sh.ci, sh.co, sh.hw, t1, t2, with.impl_info_str());
    A += t1; B += t2;
  }
  printf("total with %.1f without %.1f\n", A, B);
}
