// What a 1x1 convolution followed by a 3x3 depthwise one costs oneDNN 3.2 run as two primitives
// (what the runtime runs) against as one, the depthwise convolution as the 1x1's post-op
// (post_ops::append_dw: the 1x1's output never leaves the cache). MobileNetV3-Large's expand ->
// depthwise pairs at 224x224, channels-last, bias, each activation (ReLU or hardswish) as a post-op
// of the convolution it follows; bf16 and fp32. Built and run by
// `python -m autofusion.benchmarks.conv_floor --program dw_fusion_cost`.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "bench.h"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

// x [1, in, size, size] -> 1x1 to `mid` channels -> 3x3 depthwise of this stride, padding 1
struct Pair { int in, mid, size, stride; algorithm act; };
const Pair MOBILENET_V3_LARGE[] = {
    {16, 64, 112, 2, algorithm::eltwise_relu},       {24, 72, 56, 1, algorithm::eltwise_relu},
    {40, 240, 28, 2, algorithm::eltwise_hardswish},  {80, 200, 14, 1, algorithm::eltwise_hardswish},
    {80, 184, 14, 1, algorithm::eltwise_hardswish},  {80, 184, 14, 1, algorithm::eltwise_hardswish},
    {80, 480, 14, 1, algorithm::eltwise_hardswish},  {112, 672, 14, 1, algorithm::eltwise_hardswish}};

memory filled(const memory::desc& md, const engine& eng) {
  memory m(md, eng);
  std::memset(m.get_data_handle(), 0, md.get_size());   // zeros: the timing does not depend on values
  return m;
}

struct Times { double separate, fused; const char* separate_impl; const char* fused_impl; };

Times pair_times(engine& eng, stream& s, dt type, const Pair& p) {
  const int out = (p.size + 2 - 3) / p.stride + 1;
  const float alpha = p.act == algorithm::eltwise_hardswish ? 1.f / 6 : 0.f;
  const float beta = p.act == algorithm::eltwise_hardswish ? 0.5f : 0.f;
  memory::desc src({1, p.in, p.size, p.size}, type, tag::nhwc), w1({p.mid, p.in, 1, 1}, type, tag::any),
      b1({p.mid}, dt::f32, tag::x), mid({1, p.mid, p.size, p.size}, type, tag::nhwc),
      w2({p.mid, 1, 1, 3, 3}, type, tag::any), b2({p.mid}, dt::f32, tag::x),
      dst({1, p.mid, out, out}, type, tag::nhwc);
  auto conv = [&](const memory::desc& x, const memory::desc& w, const memory::desc& b, const memory::desc& y,
                  int stride, int pad, const primitive_attr& attr) {
    return convolution_forward::primitive_desc(eng, prop_kind::forward_inference, algorithm::convolution_direct,
                                               x, w, b, y, {stride, stride}, {pad, pad}, {pad, pad}, attr);
  };
  post_ops act;
  act.append_eltwise(p.act, alpha, beta);
  primitive_attr act_attr;
  act_attr.set_post_ops(act);

  // two primitives
  auto pd1 = conv(src, w1, b1, mid, 1, 0, act_attr), pd2 = conv(mid, w2, b2, dst, p.stride, 1, act_attr);
  memory ms = filled(src, eng), mw1 = filled(pd1.weights_desc(), eng), mb1 = filled(b1, eng),
         mm = filled(mid, eng), mw2 = filled(pd2.weights_desc(), eng), mb2 = filled(b2, eng),
         md = filled(dst, eng);
  convolution_forward c1(pd1), c2(pd2);
  std::unordered_map<int, memory> a1{{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw1}, {DNNL_ARG_BIAS, mb1},
                                     {DNNL_ARG_DST, mm}},
      a2{{DNNL_ARG_SRC, mm}, {DNNL_ARG_WEIGHTS, mw2}, {DNNL_ARG_BIAS, mb2}, {DNNL_ARG_DST, md}};
  const double separate = median_us([&] { c1.execute(s, a1); c2.execute(s, a2); s.wait(); }, 200, 50);

  // one: the depthwise convolution and its activation as the 1x1's post-ops
  post_ops fused;
  fused.append_eltwise(p.act, alpha, beta);
  fused.append_dw(type, dt::f32, type, 3, p.stride, 1);
  fused.append_eltwise(p.act, alpha, beta);
  primitive_attr fused_attr;
  fused_attr.set_post_ops(fused);
  auto pdf = conv(src, w1, b1, dst, 1, 0, fused_attr);
  const int dw_w = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, dw_b = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS;
  memory mwf = filled(pdf.weights_desc(), eng), mwd = filled(pdf.query_md(query::exec_arg_md, dw_w), eng),
         mbd = filled(pdf.query_md(query::exec_arg_md, dw_b), eng);
  convolution_forward cf(pdf);
  std::unordered_map<int, memory> af{{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mwf}, {DNNL_ARG_BIAS, mb1},
                                     {DNNL_ARG_DST, md}, {dw_w, mwd}, {dw_b, mbd}};
  const double one = median_us([&] { cf.execute(s, af); s.wait(); }, 200, 50);
  static std::string impls[2];
  impls[0] = std::string(pd1.impl_info_str()) + " + " + pd2.impl_info_str();
  impls[1] = pdf.impl_info_str();
  return {separate, one, impls[0].c_str(), impls[1].c_str()};
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  for (dt type : {dt::bf16, dt::f32}) {
    const char* name = type == dt::bf16 ? "bf16" : "fp32";
    double separate_total = 0, fused_total = 0;
    for (const Pair& p : MOBILENET_V3_LARGE) {
      try {
        Times t = pair_times(eng, s, type, p);
        std::printf("%s 1x1 %3d -> %3d x %3d, dw3x3 s%d: two primitives %7.1f us | one %7.1f us (%s | %s)\n",
                    name, p.in, p.mid, p.size, p.stride, t.separate, t.fused, t.separate_impl, t.fused_impl);
        separate_total += t.separate, fused_total += t.fused;
      } catch (const dnnl::error& e) {
        std::printf("%s 1x1 %3d -> %3d x %3d, dw3x3 s%d: not fused by oneDNN (%s)\n", name, p.in, p.mid,
                    p.size, p.stride, e.what());
      }
    }
    std::printf("%s in all: two primitives %.1f us, one %.1f us\n", name, separate_total, fused_total);
  }
}
