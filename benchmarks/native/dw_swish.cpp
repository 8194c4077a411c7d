// What SiLU costs oneDNN 3.2 on this CPU: EfficientNet-B4's depthwise convolutions (channels-last,
// bias) with swish as a post-op, against the same convolution without it plus a separate swish
// eltwise primitive, in bf16 and fp32. Measured at one thread (BENCHMARKS.md, session 7): the
// swish eltwise takes ~0.7 ns a value, about twice the convolution itself, where a libmvec-based
// SiLU loop (dw_bf16.cpp's, af_silu of runtime/scalar.h) takes ~0.25 ns. Built and run by
// `python -m benchmarks.conv_floor --program dw_swish`.
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
  for (int r = 0; r < 80; ++r) { auto a = std::chrono::steady_clock::now(); f(); t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count()); }
  std::sort(t.begin() + 20, t.end()); return t[20 + 30];
}
int main() {
  engine eng(engine::kind::cpu, 0); stream s(eng);
  struct Sh { int c, hw, k, st; };
  double T[3] = {0, 0, 0};
  for (dt D : {dt::bf16, dt::f32}) {
  T[0] = T[1] = T[2] = 0;
  for (Sh sh : {Sh{48, 190, 3, 1}, {144, 190, 3, 2}, {192, 95, 3, 1}, {192, 95, 5, 2}, {336, 48, 5, 1}, {336, 48, 3, 2}, {672, 24, 3, 1}, {672, 24, 5, 1}, {960, 24, 5, 2}, {1632, 12, 5, 1}, {1632, 12, 3, 1}}) {
    const int pad = sh.k / 2, ho = (sh.hw + 2 * pad - sh.k) / sh.st + 1;
    memory::desc src({1, sh.c, sh.hw, sh.hw}, D, tag::nhwc), wd({sh.c, 1, 1, sh.k, sh.k}, D, tag::any), b({sh.c}, dt::f32, tag::x), d({1, sh.c, ho, ho}, D, tag::nhwc);
    post_ops po; po.append_eltwise(algorithm::eltwise_swish, 1.f, 0.f); primitive_attr a; a.set_post_ops(po);
    convolution_forward::primitive_desc with(eng, prop_kind::forward_inference, algorithm::convolution_direct, src, wd, b, d, {sh.st, sh.st}, {pad, pad}, {pad, pad}, a);
    convolution_forward::primitive_desc plain(eng, prop_kind::forward_inference, algorithm::convolution_direct, src, wd, b, d, {sh.st, sh.st}, {pad, pad}, {pad, pad});
    eltwise_forward::primitive_desc sw(eng, prop_kind::forward_inference, algorithm::eltwise_swish, d, d, 1.f, 0.f);
    memory ms(src, eng), mw(with.weights_desc(), eng), mb(b, eng), md(d, eng);
    convolution_forward cw(with), cp(plain); eltwise_forward e(sw);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}};
    std::unordered_map<int, memory> eargs{{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}};
    double t1 = med([&] { cw.execute(s, args); s.wait(); });
    double t2 = med([&] { cp.execute(s, args); s.wait(); });
    double t3 = med([&] { e.execute(s, eargs); s.wait(); });
    printf("%s c%4d %3d k%d s%d: dw+swish post-op %7.1f | dw %7.1f + swish eltwise %6.1f = %7.1f us (%s / %s)\n", D == dt::bf16 ? "bf16" : "f32 ", sh.c, sh.hw, sh.k, sh.st, t1, t2, t3, t2 + t3, with.impl_info_str(), sw.impl_info_str());
    T[0] += t1; T[1] += t2; T[2] += t3;
  }
  printf("total: with post-op %.1f, separate %.1f (dw %.1f + eltwise %.1f)\n", T[0], T[1] + T[2], T[1], T[2]);
  }
}
