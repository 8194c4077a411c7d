// The step builders: one Partition method per node kind, each choosing oneDNN's primitive or
// the runtime's own loop for its sizes and layouts.
#include "partition.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <unordered_map>

namespace af {

dnnl::algorithm eltwise_alg(Alg a) {
  switch (a) {
#define AF_ALG_CASE(name, onednn, gate) \
  case Alg::name: return dnnl::algorithm::onednn;
    AF_ALGS(AF_ALG_CASE)
#undef AF_ALG_CASE
  }
  throw std::runtime_error("no eltwise algorithm");
}

dnnl::algorithm binary_alg(Bin b) {
  using A = dnnl::algorithm;
  switch (b) {
    case Bin::Add: return A::binary_add;
    case Bin::Sub: return A::binary_sub;
    case Bin::Mul: return A::binary_mul;
    case Bin::Div: return A::binary_div;
    case Bin::Max: return A::binary_max;
    case Bin::Min: return A::binary_min;
  }
  throw std::runtime_error("no binary algorithm");
}

// a last SiLU or tanh-GELU the runtime computes itself, after the primitive (gated.h); the
// rest are oneDNN post-ops
Alg gate_after(const Acts& acts) {
  if (acts.empty() || !VECTORISED) return Alg::None;
  return runtime_gate(acts.back().alg) ? acts.back().alg : Alg::None;
}

const char* gate_name(Alg gate) { return gate == Alg::SiLU ? "runtime silu" : "runtime tanh-gelu"; }

Acts post_ops_of(const Acts& acts) {
  return gate_after(acts) != Alg::None ? Acts(acts.begin(), acts.end() - 1) : acts;
}

// `sum`: the destination's own values are added first (a residual the result is written over)
dnnl::primitive_attr Partition::Impl::attr(const Acts& acts, const std::vector<memory::desc>& binary_adds,
                                           bool sum) {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  if (sum) po.append_sum(1.f);
  for (const auto& md : binary_adds) po.append_binary(dnnl::algorithm::binary_add, md);
  for (const auto& act : post_ops_of(acts))
    if (act.alg != Alg::None) po.append_eltwise(eltwise_alg(act.alg), act.alpha, act.beta);
  a.set_post_ops(po);
  return a;
}

// a primitive; with `acts` (those its attr() was made from), the gate after it
// a choice this step made, with its reason, as the plan prints it
void Partition::Impl::decide(const std::string& choice) {
  if (int(choices.size()) <= step) choices.resize(step + 1);
  choices[step].push_back(choice);
}

void Partition::Impl::add(const dnnl::primitive_desc_base& pd, dnnl::primitive prim, std::vector<Arg> args,
                          const Acts& acts) {
  scratch_size = std::max(scratch_size, pd.scratchpad_desc().get_size());
  execs.push_back(Exec{std::move(prim), std::move(args), {}, node, step});
  const bool moves = pd.get_kind() == dnnl::primitive::kind::reorder;
  execs.back().kernel = std::string(moves ? "reorder " : "") + pd.impl_info_str();
  if (is_reference(pd))
    decide(std::string(moves ? "a reorder" : "the primitive") + " on oneDNN's reference kernel: no fast one takes these layouts");
  if (Alg gate = gate_after(acts); gate != Alg::None) gate_over_dst(gate);
}

// the gate over the last exec's DNNL_ARG_DST, in place, after its primitive
void Partition::Impl::gate_over_dst(Alg gate) {
  Exec& e = execs.back();
  for (const Arg& a : e.args)
    if (a.key == DNNL_ARG_DST) {
      dt type = (a.has_md ? a.md : md_of(a.value)).get_data_type();
      if (type != dt::f32 && type != dt::bf16) fail("an activation over a value neither f32 nor bf16");
      e.gate = gate;
      return;
    }
  fail("an activation after a step with no destination");
}

void Partition::Impl::finish(int dst, int written) {
  if (written != dst) reorder(written, md_of(written), dst, md_of(dst));
}

void Partition::node(const char* name, Precision precision) {
  impl_->node = name;
  impl_->step += 1;
  impl_->compute = type_of(precision);
}

void Partition::conv(int dst, int src, int w, int b, int residual, const Dims& strides,
                     const Dims& dilations, const Dims& pad_begin, const Dims& pad_end,
                     int64_t groups, const Acts& acts, bool in_place) {
  Impl& m = *impl_;
  if (groups == 1 && residual < 0 && std::all_of(dilations.begin(), dilations.end(), [](int64_t d) { return d == 1; }) &&
      m.conv_for_any_size(dst, src, w, b, strides, pad_begin, pad_end, acts))
    return;
  const Dims wdims = grouped_weight(m.val(w).shape, groups);
  memory::desc bias_md = b >= 0 ? plain(m.val(b).shape) : memory::desc();
  std::vector<memory::desc> adds;
  if (residual >= 0) {
    residual = m.dense(residual);
    adds.push_back(m.md_of(residual));
  }
  // a gate over a bf16 result runs on the f32 one, which is rounded once, after the gate:
  // rounding before it too cost EfficientNet-B4's SiLUs a fifth more error (a residual, which
  // the result's own bytes hold, keeps the bf16 result)
  const bool gate_in_f32 = gate_after(acts) != Alg::None && m.result_type(dst) == dt::bf16 && residual < 0;
  auto writing = [&](const memory::desc& dst_md) {
    return dnnl::convolution_forward::primitive_desc(
        m.eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        any(m.val(src).shape, m.compute), any(wdims, m.compute), bias_md, dst_md, strides,
        onednn_dilations(dilations), pad_begin, pad_end, m.attr(acts, adds));
  };
  const dt result = gate_in_f32 ? dt::f32 : m.result_type(dst);
  auto pd = writing(any(m.val(dst).shape, result));
  // oneDNN's fast convolutions add a residual only in a layout they write; one in another (a
  // model input, a value a plain-layout step wrote: NCHW) gets the reference kernel, hundreds of
  // times slower (a 1x1 of 160 channels at 7x7: 11 ms against 0.04). Reordered first, into the
  // layout the convolution writes without it.
  if (residual >= 0 && is_reference(pd)) {
    adds.clear();
    const memory::desc bare = writing(any(m.val(dst).shape, result)).dst_desc();
    residual = m.ensure(residual, retyped(bare, m.md_of(residual).get_data_type()));
    adds.push_back(m.md_of(residual));
    pd = writing(any(m.val(dst).shape, result));
    m.decide("residual reordered into the result's layout: oneDNN adds one in another on its reference kernel");
  }
  // channels innermost where oneDNN picked a blocked result (a network's first convolution, of
  // three channels): every convolution after it reads channels-last, and a blocked result
  // costs them a reorder each (MobileNetV3-L: 0.08 ms a run, EfficientNet-B4: 0.38)
  if (!strided(pd.dst_desc())) {
    try {
      auto last = writing(channels_last(m.val(dst).shape, result));
      if (!is_reference(last)) {
        pd = last;
        m.decide("result channels-last, not the blocked layout oneDNN picked: the convolutions after read it so");
      }
    } catch (const dnnl::error&) {
    }
  }
  const bool pointwise = groups == 1 && residual < 0 && m.val(w).kind == Kind::Constant &&
                         std::all_of(wdims.begin() + 2, wdims.end(), [](int64_t k) { return k == 1; }) &&
                         std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 1; }) &&
                         std::all_of(pad_begin.begin(), pad_begin.end(), [](int64_t p) { return p == 0; }) &&
                         std::all_of(pad_end.begin(), pad_end.end(), [](int64_t p) { return p == 0; });
  if (pointwise && m.gate_in_tiles(dst, src, w, b, bias_md, pd, acts)) return;
  // over the residual (the plan says this step reads it last): a sum post-op, which adds the
  // residual where the result goes instead of reading it from one buffer and writing another.
  // The kernel is as fast either way in cache (--program residual_cost); in a network one buffer
  // fewer passes through it (ResNet-50 bf16: 1.5-3% a run, BENCHMARKS.md 2026-12-04-in-place-residual)
  const bool over_residual = in_place && residual >= 0 && m.md_of(residual) == pd.dst_desc() &&
                             m.root(residual) != m.root(src);
  if (over_residual) {
    pd = dnnl::convolution_forward::primitive_desc(
        m.eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, pd.src_desc(),
        pd.weights_desc(), bias_md, pd.dst_desc(), strides, onednn_dilations(dilations), pad_begin,
        pad_end, m.attr(acts, {}, true));
    m.decide("result written over the residual (a sum post-op): this step reads it last");
  }
  int x = m.ensure(src, pd.src_desc());
  int y = over_residual ? m.write_over(dst, residual, true)
          : gate_in_f32 ? m.temp(pd.dst_desc())
                        : m.produce(dst, pd.dst_desc());
  // a computed weight (a gate folded into it, rules/conv.py) is reordered on every call
  const bool computed = m.val(w).kind != Kind::Constant;
  if (computed && groups > 1) m.fail("a computed weight of a grouped convolution");
  // the runtime's own depthwise loop where it fits (depthwise.h; no residual), else oneDNN's primitive
  if (residual >= 0 || !m.depthwise(y, x, w, b, pd, strides, dilations, pad_begin, groups, acts)) {
    std::vector<Arg> args{Impl::use(DNNL_ARG_SRC, x),
                          computed ? Impl::use(DNNL_ARG_WEIGHTS, m.ensure(w, pd.weights_desc()))
                                   : Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, pd.weights_desc())),
                          Impl::use(DNNL_ARG_DST, y)};
    if (b >= 0) args.push_back(Impl::owned(DNNL_ARG_BIAS, m.constant_as(b, pd.bias_desc())));
    if (residual >= 0 && !over_residual)
      args.push_back(Impl::use(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, residual));
    m.add(pd, dnnl::convolution_forward(pd), std::move(args), acts);
  }
  if (gate_in_f32) {   // the gate writes the bf16 result
    m.decide("activation over the f32 result, rounded to bf16 once after it");
    const int rounded = m.produce(dst, retyped(pd.dst_desc(), dt::bf16));
    m.execs.back().args.push_back(Impl::use(GATED_INTO, rounded));
    y = rounded;
  }
  m.finish(dst, y);
}

// oneDNN 3.2's brgemm deconvolution ("brg_conv:...") with a bias is wrong for some shapes where a
// kernel is longer than its stride (2-D 512 -> 17 channels, 4x4 stride 2, at 14x14: off by ~5;
// 256 -> 128 at 16x16; right without the bias, at 512 -> 16, 448 -> 17, and for HiFi-GAN's 1-D
// upsampling; found against ONNX Runtime in keypoint R-CNN's head). Which shapes is not documented,
// and its next implementation (the same kernels as a convolution) is right but up to 2.2x slower:
// so, once per process and shape, the two are run on the same pseudo-random tensors and the
// brgemm one kept where they agree.
static bool brgemm_deconv_agrees(const dnnl::engine& eng,
                                 const std::function<dnnl::deconvolution_forward::primitive_desc()>& make) {
  using dnnl::deconvolution_forward;
  auto brgemm = make(), other = make();
  while (std::string(other.impl_info_str()).rfind("brg_conv:", 0) == 0)
    if (!other.next_impl()) return true;   // no other implementation to compare with
  dnnl::stream s(eng);
  auto filled = [&](const memory::desc& md, uint32_t seed) {
    memory plain_memory(plain(md.get_dims()), eng);
    float* v = static_cast<float*>(plain_memory.get_data_handle());
    const size_t n = plain_memory.get_desc().get_size() / sizeof(float);
    for (size_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      v[i] = float(seed >> 8) / float(1u << 24) - 0.5f;
    }
    memory laid(md, eng);
    dnnl::reorder(plain_memory, laid).execute(s, plain_memory, laid);
    return laid;
  };
  memory x = filled(brgemm.src_desc(), 1), w = filled(brgemm.weights_desc(), 2);
  const bool biased = brgemm.bias_desc().get_size() > 0;
  memory bias = biased ? filled(brgemm.bias_desc(), 3) : memory();
  auto result = [&](const deconvolution_forward::primitive_desc& pd) {
    memory xs = x, ws = w;
    if (pd.src_desc() != x.get_desc()) {
      xs = memory(pd.src_desc(), eng);
      dnnl::reorder(x, xs).execute(s, x, xs);
    }
    if (pd.weights_desc() != w.get_desc()) {
      ws = memory(pd.weights_desc(), eng);
      dnnl::reorder(w, ws).execute(s, w, ws);
    }
    memory y(pd.dst_desc(), eng);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xs}, {DNNL_ARG_WEIGHTS, ws}, {DNNL_ARG_DST, y}};
    if (biased) args[DNNL_ARG_BIAS] = bias;
    deconvolution_forward(pd).execute(s, args);
    const memory::dims dims = pd.dst_desc().get_dims();
    memory plain_memory(plain(dims), eng);
    dnnl::reorder(y, plain_memory).execute(s, y, plain_memory);
    s.wait();
    const float* v = static_cast<const float*>(plain_memory.get_data_handle());
    return std::vector<float>(v, v + plain_memory.get_desc().get_size() / sizeof(float));
  };
  const std::vector<float> a = result(brgemm), b = result(other);
  float largest = 0.f, off = 0.f;
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::fabs(b[i]));
    off = std::max(off, std::fabs(a[i] - b[i]));
  }
  return off <= 1e-3f * largest + 1e-5f;
}

void Partition::deconv(int dst, int src, int w, int b, const Dims& strides, const Dims& dilations,
                       const Dims& pad_begin, const Dims& pad_end, int64_t groups, const Acts& acts) {
  Impl& m = *impl_;
  const DeconvWeight weight = deconv_weight(m.val(w).shape, groups);
  const memory::desc bias_md = b >= 0 ? plain(m.val(b).shape) : memory::desc();
  auto made = [&](const dnnl::primitive_attr& attr, const memory::desc& bias) {
    return dnnl::deconvolution_forward::primitive_desc(
        m.eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
        any(m.val(src).shape, m.compute), any(weight.dims, m.compute), bias,
        any(m.val(dst).shape, m.result_type(dst)), strides, onednn_dilations(dilations), pad_begin, pad_end, attr);
  };
  dnnl::deconvolution_forward::primitive_desc pd = made(m.attr(acts), bias_md);
  const Dims& kernel = m.val(w).shape;
  bool overlapping = false;
  for (size_t i = 0; i < strides.size(); ++i) overlapping |= kernel[2 + i] > strides[i];
  if (overlapping && strides.size() >= 2 && std::string(pd.impl_info_str()).rfind("brg_conv:", 0) == 0) {
    static std::mutex lock;
    static std::map<std::string, bool> agrees;   // per shape: whether the brgemm one is right
    std::ostringstream key;
    for (const Dims* d : std::initializer_list<const Dims*>{&m.val(src).shape, &kernel, &strides, &dilations,
                                                          &pad_begin, &pad_end})
      for (int64_t n : *d) key << n << ',';
    key << groups << ',' << int(m.compute) << ',' << int(m.result_type(dst)) << ',' << (b >= 0);
    std::lock_guard<std::mutex> held(lock);
    auto found = agrees.find(key.str());
    if (found == agrees.end())
      found = agrees.emplace(key.str(), brgemm_deconv_agrees(m.eng, [&] { return made({}, bias_md); })).first;
    if (!found->second) {
      while (std::string(pd.impl_info_str()).rfind("brg_conv:", 0) == 0 && pd.next_impl()) {
      }
      m.decide(std::string("not oneDNN's brgemm deconvolution, wrong at this shape (checked once against ") +
               pd.impl_info_str() + ")");
    }
  }
  int x = m.ensure(m.dense(src), pd.src_desc());
  int y = m.produce(dst, pd.dst_desc());
  std::vector<Arg> args{Impl::use(DNNL_ARG_SRC, x),
                        Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, weight.as_held, pd.weights_desc())),
                        Impl::use(DNNL_ARG_DST, y)};
  if (b >= 0) args.push_back(Impl::owned(DNNL_ARG_BIAS, m.constant_as(b, pd.bias_desc())));
  m.add(pd, dnnl::deconvolution_forward(pd), std::move(args), acts);
  m.finish(dst, y);
}

void Partition::pad(int dst, int src, const Dims& begin, const Dims& end, float value) {
  Impl& m = *impl_;
  const Dims& from = m.val(src).shape;
  const Dims& to = m.val(dst).shape;
  // the block of src that lands in dst (a negative pad crops it) and where it lands
  Dims extent(from.size()), at_src(from.size()), at_dst(from.size());
  for (size_t i = 0; i < from.size(); ++i) {
    at_src[i] = std::max<int64_t>(-begin[i], 0);
    at_dst[i] = std::max<int64_t>(begin[i], 0);
    extent[i] = from[i] - at_src[i] - std::max<int64_t>(-end[i], 0);
    if (extent[i] < 0 || at_dst[i] + extent[i] > to[i]) m.fail("pads that do not fit the output");
  }
  const int x = m.ensure(src, plain(from));
  const int y = m.produce(dst, plain(to));
  auto adds = [](int64_t n) { return n > 0; };
  if (std::any_of(begin.begin(), begin.end(), adds) || std::any_of(end.begin(), end.end(), adds))
    m.fill(y, value);   // the border; the block copied over its interior next
  if (std::all_of(extent.begin(), extent.end(), [](int64_t e) { return e > 0; }))
    m.reorder(x, plain(from).submemory_desc(extent, at_src), y, plain(to).submemory_desc(extent, at_dst));
  m.finish(dst, y);
}

void Partition::pad_from_input(int dst, int src, const Dims& begin, const Dims& end, PadMode mode) {
  Impl& m = *impl_;
  const Dims& from = m.val(src).shape;
  const int x = m.ensure(src, plain(from));
  const int y = m.produce(dst, plain(m.val(dst).shape));
  for (size_t a = 0; a < from.size(); ++a)
    if (from[a] - std::max<int64_t>(-begin[a], 0) - std::max<int64_t>(-end[a], 0) < 1)
      m.fail("a border read from an empty input");
  m.pad_from_input(x, y, begin, end, mode);
  m.finish(dst, y);
}

void Partition::pool(int dst, int src, Pool kind, const Dims& kernel, const Dims& strides,
                     const Dims& dilations, const Dims& pad_begin, const Dims& pad_end) {
  Impl& m = *impl_;
  dnnl::algorithm alg = kind == Pool::Max             ? dnnl::algorithm::pooling_max
                        : kind == Pool::AvgIncludePad ? dnnl::algorithm::pooling_avg_include_padding
                                                      : dnnl::algorithm::pooling_avg_exclude_padding;
  src = m.dense(src);
  dnnl::pooling_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, alg, m.md_of(src),
      any(m.val(dst).shape, m.md_of(src).get_data_type()), strides, kernel, onednn_dilations(dilations), pad_begin, pad_end, m.attr({}));
  int y = m.produce(dst, pd.dst_desc());
  m.add(pd, dnnl::pooling_forward(pd), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)});
  m.finish(dst, y);
}

void Partition::resample(int dst, int src, bool linear) {
  Impl& m = *impl_;
  src = m.dense(src);
  dnnl::resampling_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference,
      linear ? dnnl::algorithm::resampling_linear : dnnl::algorithm::resampling_nearest, m.md_of(src),
      any(m.val(dst).shape, m.md_of(src).get_data_type()), m.attr({}));
  int y = m.produce(dst, pd.dst_desc());
  m.add(pd, dnnl::resampling_forward(pd), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)});
  m.finish(dst, y);
}

void Partition::mean_in_gate(int dst, int src) {
  Impl& m = *impl_;
  if (m.sum_in_gate(dst, src)) return;
  const Dims& shape = m.val(src).shape;
  const Dims spatial(shape.begin() + 2, shape.end()), ones(spatial.size(), 1), zeros(spatial.size(), 0);
  pool(dst, src, Pool::AvgExcludePad, spatial, ones, ones, zeros, zeros);
}

void Partition::eltwise(int dst, int src, const Acts& acts, bool in_place) {
  Impl& m = *impl_;
  if (acts.empty()) m.fail("an eltwise step needs an activation");
  src = m.dense(src);
  const memory::desc md = m.md_of(src);
  int y = m.write_over(dst, src, in_place);
  if (acts.size() == 1 && gate_after(acts) != Alg::None) {
    // the gate alone: over src's bytes, or over a copy of them
    if (in_place)
      m.execs.push_back(Exec{dnnl::primitive(), {Impl::use(DNNL_ARG_DST, y)}, {}, m.node, m.step});
    else
      m.reorder(src, md, y, md);
    m.gate_over_dst(acts[0].alg);
    m.finish(dst, y);
    return;
  }
  // the first activation is the primitive, the rest its post-ops
  Acts rest(acts.begin() + 1, acts.end());
  dnnl::eltwise_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, eltwise_alg(acts[0].alg), md, md, acts[0].alpha,
      acts[0].beta, m.attr(rest));
  m.add(pd, dnnl::eltwise_forward(pd), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)},
        rest);
  m.finish(dst, y);
}

void Partition::binary(int dst, int a, int b, Bin op, const Acts& acts, bool in_place) {
  Impl& m = *impl_;
  a = m.dense(a);
  b = m.dense(b);
  const memory::desc md = m.md_of(a);
  if (m.md_of(b).get_ndims() < md.get_ndims()) {
    // a broadcast operand of lower rank: ones in front, row-major (oneDNN broadcasts one in
    // another order on its reference kernel only; the copy is at most one of the other's slices)
    const Dims given = m.md_of(b).get_dims();
    Dims ranked(md.get_ndims() - given.size(), 1);
    ranked.insert(ranked.end(), given.begin(), given.end());
    b = m.ensure(b, plain(given, m.md_of(b).get_data_type()));
    const memory::desc seen = m.md_of(b).reshape(ranked);
    const int viewed = m.temp(seen);
    m.view_of(viewed, b, seen);
    b = viewed;
  }
  int y = m.write_over(dst, a, in_place);
  if (op == Bin::Mul && acts.empty() && m.scale_channels(a, b, y)) return m.finish(dst, y);
  const memory::desc& given = m.md_of(b);
  if (given.get_data_type() != md.get_data_type() && given.get_dims() != md.get_dims()) {
    // a broadcast operand of another type (a bf16 gate scaling an f32 weight): converted to
    // a's type, plain, as oneDNN has only its reference kernel for mixed types
    b = m.ensure(b, memory::desc(given.get_dims(), md.get_data_type(), plain(given.get_dims()).get_strides()));
    m.decide("second operand converted to the first's type: oneDNN mixes types on its reference kernel only");
  }
  memory::desc b_md = in_order_of(m.md_of(b), md);
  if (b_md.get_dims() == md.get_dims() && b_md != md) {
    // the same shape in another layout (or type): oneDNN has only its reference kernel for
    // that, many times slower than one reorder of b into a's layout
    b = m.ensure(b, md);
    b_md = md;
    m.decide("second operand reordered into the first's layout: oneDNN mixes layouts on its reference kernel only");
  }
  dnnl::binary::primitive_desc pd(m.eng, binary_alg(op), md, b_md, md, m.attr(acts));
  m.add(pd, dnnl::binary(pd), {Impl::use(DNNL_ARG_SRC_0, a), Impl::view(DNNL_ARG_SRC_1, b, b_md),
                               Impl::use(DNNL_ARG_DST, y)}, acts);
  m.finish(dst, y);
}

void Partition::batch_norm(int dst, int src, int scale, int bias, int mean, int var,
                           float epsilon, const Acts& acts) {
  Impl& m = *impl_;
  src = m.dense(src);
  const memory::desc md = m.md_of(src);
  auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  dnnl::batch_normalization_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, md, md, epsilon, flags, m.attr(acts));
  int y = m.produce(dst, md);
  m.add(pd, dnnl::batch_normalization_forward(pd),
        {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_SCALE, scale),
         Impl::use(DNNL_ARG_SHIFT, bias), Impl::use(DNNL_ARG_MEAN, mean),
         Impl::use(DNNL_ARG_VARIANCE, var), Impl::use(DNNL_ARG_DST, y)}, acts);
  m.finish(dst, y);
}

void Partition::linear(int dst, int a, int w, int bias, const Acts& acts, int residual) {
  Impl& m = *impl_;
  const Dims& wshape = m.val(w).shape;   // [K, N]
  const Dims& xshape = m.val(a).shape;
  int64_t k = wshape[0], n = wshape[1];
  int64_t rows = std::accumulate(xshape.begin(), xshape.end() - 1, int64_t(1), std::multiplies<>());
  const memory::desc out = m.dense_result(dst);
  if (rows == 1 && post_ops_of(acts).empty() && residual < 0 && m.gemv_takes_rows()) {
    int y = m.gemv(dst, m.ensure(a, plain(xshape, m.compute)), w, bias, out, k, n);
    if (Alg gate = gate_after(acts); gate != Alg::None) m.gate_over_dst(gate);
    m.finish(dst, y);
    return;
  }
  memory::desc x_md = plain({rows, k}, m.compute), y_md = plain({rows, n}, out.get_data_type());
  memory::desc b_md = bias >= 0 ? plain({1, n}) : memory::desc();
  const int r = m.plain_residual(residual);
  std::vector<memory::desc> adds;   // the residual, seen as [rows, N] like the result
  if (r >= 0) adds.push_back(plain({rows, n}, m.md_of(r).get_data_type()));
  // oneDNN adds no binary operand to rows taken at run time: a residual is copied into the result
  // first and summed there (a sum post-op)
  std::optional<dnnl::matmul::primitive_desc> for_any;
  if (m.any_size && (r < 0 || m.md_of(r).get_data_type() == out.get_data_type()))
    for_any = m.product_for_any_rows(x_md, plain({k, n}), bias >= 0, y_md, acts, r >= 0);
  if (for_any) m.decide("a product, its rows taken at run time: a first call at these sizes");
  const dnnl::matmul::primitive_desc pd =
      for_any ? *for_any
              : dnnl::matmul::primitive_desc(m.eng, x_md, any({k, n}, m.compute), b_md, y_md, m.attr(acts, adds));
  int x = m.ensure(a, plain(xshape, m.compute));
  int y = m.produce(dst, out);
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, x, x_md),
                        Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, pd.weights_desc())),
                        Impl::view(DNNL_ARG_DST, y, y_md)};
  if (bias >= 0) args.push_back(Impl::owned(DNNL_ARG_BIAS, m.constant_as(bias, b_md)));
  if (r >= 0 && for_any) m.reorder(r, adds[0], y, y_md);
  else if (r >= 0) args.push_back(Impl::view(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, r, adds[0]));
  m.add(pd, dnnl::matmul(pd), std::move(args), acts);
  m.finish(dst, y);
}

void Partition::matmul(int dst, int a, int b, int c, bool trans_a, bool trans_b, float alpha,
                       const Acts& acts, int residual) {
  Impl& m = *impl_;
  auto operand = [&](int id, bool transposed) {
    memory::desc md = plain(m.val(id).shape, m.compute);
    if (!transposed) return md;
    std::vector<int> perm(md.get_ndims());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    return md.permute_axes(perm);
  };
  int x = m.ensure(a, plain(m.val(a).shape, m.compute));
  int wv = m.ensure(b, plain(m.val(b).shape, m.compute));
  memory::desc a_md = operand(x, trans_a), b_md = operand(wv, trans_b);
  Acts post;
  if (alpha != 1.f) post.push_back(Act{Alg::Linear, alpha, 0.f});
  std::vector<memory::desc> adds;
  int cv = -1;
  if (c >= 0) {
    cv = m.ensure(c, plain(m.val(c).shape));
    adds.push_back(plain(m.val(c).shape));
  }
  const int r = m.plain_residual(residual);
  if (r >= 0) adds.push_back(m.md_of(r));
  // the scale applies before the bias: act(alpha·ab + c + r) as [linear, add, add, act...] post-ops
  dnnl::primitive_attr at;
  at.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  for (const auto& p : post) po.append_eltwise(eltwise_alg(p.alg), p.alpha, p.beta);
  for (const auto& md : adds) po.append_binary(dnnl::algorithm::binary_add, md);
  for (const auto& act : post_ops_of(acts))
    if (act.alg != Alg::None) po.append_eltwise(eltwise_alg(act.alg), act.alpha, act.beta);
  at.set_post_ops(po);
  memory::desc y_md = m.dense_result(dst);
  dnnl::matmul::primitive_desc pd(m.eng, a_md, b_md, y_md, at);
  int y = m.produce(dst, y_md);
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, x, a_md), Impl::view(DNNL_ARG_WEIGHTS, wv, b_md),
                        Impl::use(DNNL_ARG_DST, y)};
  int index = int(post.size());
  for (int operand : {cv, r})
    if (operand >= 0) args.push_back(Impl::use(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index++) | DNNL_ARG_SRC_1, operand));
  m.add(pd, dnnl::matmul(pd), std::move(args), acts);
  m.finish(dst, y);
}

void Partition::concat(int dst, const std::vector<int>& srcs, int axis) {
  Impl& m = *impl_;
  // one data type for all: bf16 only where every source is bf16; integers (a quantized model's,
  // one scale for all) as they are
  dt type = m.val(dst).type != dt::f32 ? m.val(dst).type : dt::bf16;
  for (int s : srcs)
    if (m.md_of(s).get_data_type() != type) {
      if (type != dt::bf16) m.fail("a concat of integers and other values");
      type = dt::f32;
    }
  std::vector<int> ins;
  std::vector<memory::desc> mds;
  for (int s : srcs) {
    s = m.dense(s);
    ins.push_back(m.ensure(s, retyped(m.md_of(s), type)));
    mds.push_back(m.md_of(ins.back()));
  }
  dnnl::concat::primitive_desc pd(m.eng, any(m.val(dst).shape, type), axis, mds,
                                  Impl::reorder_attr());
  int y = m.produce(dst, pd.dst_desc());
  std::vector<Arg> args{Impl::use(DNNL_ARG_DST, y)};
  for (size_t i = 0; i < ins.size(); ++i)
    args.push_back(Impl::use(DNNL_ARG_MULTIPLE_SRC + int(i), ins[i]));
  m.add(pd, dnnl::concat(pd), std::move(args));
  m.finish(dst, y);
}

void Partition::reduce(int dst, int src, Reduce op) {
  Impl& m = *impl_;
  const Dims& from = m.val(src).shape;
  const Dims& to = m.val(dst).shape;
  // the reduced axes (size 1 in dst, not in src) are one run (the compiler's check): the runtime's
  // own loop over row-major f32 (reduce.h); oneDNN's reduction of any other set is its reference
  // kernel. At sizes reducing nothing (a batch of 1) the loop copies.
  int lo = int(from.size()), hi = lo - 1;
  for (int i = 0; i < int(from.size()); ++i)
    if (to[i] == 1 && from[i] != 1) {
      for (int j = hi + 1; lo < i && j < i; ++j)
        if (from[j] != 1) throw std::runtime_error("reduce: the reduced axes are not one run");
      lo = std::min(lo, i);
      hi = i;
    }
  const int x = m.ensure(src, plain(from));
  const int y = m.produce(dst, plain(to));
  m.reduction(x, y, op, product(from, 0, lo), product(from, lo, hi + 1), product(from, hi + 1, from.size()));
  m.finish(dst, y);
}

void Partition::softmax(int dst, int src, int axis, bool log) {
  Impl& m = *impl_;
  const Dims& shape = m.val(src).shape;
  if (axis + 1 < int(shape.size()) && m.md_of(src).get_data_type() == dt::f32) {
    // along an axis that is not the last, oneDNN's softmax is its reference kernel: the
    // runtime's loop over row-major f32 (softmax.h)
    const int x = m.ensure(src, plain(shape));
    const int y = m.produce(dst, plain(shape));
    m.column_softmax(x, y, product(shape, 0, axis), shape[axis], product(shape, axis + 1, shape.size()), log);
    m.finish(dst, y);
    return;
  }
  src = m.dense(src);
  const memory::desc md = m.md_of(src);
  int y = m.produce(dst, md);
  m.softmax(src, md, y, md, axis, log);
  m.finish(dst, y);
}

void Partition::layer_norm(int dst, int src, int scale, int bias, int residual, int axis,
                           float epsilon) {
  Impl& m = *impl_;
  const Dims& shape = m.val(src).shape;
  const int64_t rows = product(shape, 0, axis), cols = product(shape, axis, shape.size());
  int x = m.ensure(src, plain(shape));
  int r = residual >= 0 ? m.ensure(residual, plain(m.val(residual).shape)) : -1;
  const memory::desc out = m.dense_result(dst);
  if (VECTORISED && out == plain(shape, out.get_data_type())) {   // the runtime's own (layernorm.h)
    int y = m.produce(dst, out);
    m.row_layer_norm(x, r, scale, bias, y, rows, cols, epsilon);
    m.finish(dst, y);
    return;
  }
  auto constant = [&](int key, int id) { return Impl::owned(key, m.constant_as(id, plain({cols}))); };
  memory::desc md2 = plain({rows, cols});
  if (r >= 0) {   // x + residual first, into a temporary
    int sum = m.temp(plain(shape));
    dnnl::binary::primitive_desc add(m.eng, dnnl::algorithm::binary_add, plain(shape),
                                     m.md_of(r), plain(shape), m.attr({}));
    m.add(add, dnnl::binary(add), {Impl::use(DNNL_ARG_SRC_0, x), Impl::use(DNNL_ARG_SRC_1, r),
                                   Impl::use(DNNL_ARG_DST, sum)});
    x = sum;
  }
  auto flags = dnnl::normalization_flags::none;
  if (scale >= 0) flags = flags | dnnl::normalization_flags::use_scale;
  if (bias >= 0) flags = flags | dnnl::normalization_flags::use_shift;
  const memory::desc out2 = plain({rows, cols}, out.get_data_type());
  dnnl::layer_normalization_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, md2, out2, epsilon, flags, m.attr({}));
  int y = m.produce(dst, out);
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, x, md2), Impl::view(DNNL_ARG_DST, y, out2)};
  if (scale >= 0) args.push_back(constant(DNNL_ARG_SCALE, scale));
  if (bias >= 0) args.push_back(constant(DNNL_ARG_SHIFT, bias));
  m.add(pd, dnnl::layer_normalization_forward(pd), std::move(args));
  m.finish(dst, y);
}

void Partition::transpose(int dst, int src, const std::vector<int>& perm) {
  Impl& m = *impl_;
  // output axis i is input axis perm[i]: oneDNN's permute_axes wants where each input axis goes
  std::vector<int> where(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) where[perm[i]] = int(i);
  const dt type = m.md_of(src).get_data_type();
  int x = strided(m.md_of(src)) ? src : m.ensure(src, plain(m.val(src).shape, type));
  // x's bytes through permuted strides: a reader that needs them dense copies them (dense()),
  // one that reads strides (a reorder, another view) does not
  const memory::desc seen = m.md_of(x).permute_axes(where);
  if (m.val(dst).kind != Kind::Output) return m.view_of(dst, x, seen);
  int y = m.produce(dst, plain(m.val(dst).shape, type));
  m.reorder(x, seen, y, plain(m.val(dst).shape, type));
  m.finish(dst, y);
}

void Partition::slice(int dst, int src, const Dims& offsets, const Dims& sizes) {
  Impl& m = *impl_;
  const dt type = m.md_of(src).get_data_type();
  int x = strided(m.md_of(src)) ? src : m.ensure(src, plain(m.val(src).shape, type));
  const memory::desc& md = m.md_of(x);
  if (m.val(dst).kind == Kind::Output) {
    int y = m.produce(dst, plain(m.val(dst).shape, type));
    m.reorder(x, md.submemory_desc(sizes, offsets), y, plain(sizes, type));
    return m.finish(dst, y);
  }
  // x's bytes from the block's first value on, through x's strides
  const Dims strides = md.get_strides();
  int64_t first = 0;
  for (size_t i = 0; i < offsets.size(); ++i) first += offsets[i] * strides[i];
  Dims seen;
  if (!view_reshaped(sizes, strides, m.val(dst).shape, seen))
    m.fail("a block whose shape is not its output's with unit axes dropped");
  m.view_of(dst, x, memory::desc(m.val(dst).shape, md.get_data_type(), seen),
            size_t(first) * memory::data_type_size(md.get_data_type()));
}

void Partition::reshape(int dst, int src) {
  Impl& m = *impl_;
  const memory::desc& md = m.md_of(src);
  if (!strided(md)) m.fail("a reshape of a blocked layout");
  // src's values in row-major order with dst's shape: a view where src's strides allow it,
  // else a view of a dense copy
  Dims seen;
  if (!view_reshaped(m.val(src).shape, md.get_strides(), m.val(dst).shape, seen)) {
    src = m.ensure(src, plain(m.val(src).shape, md.get_data_type()));
    seen = plain(m.val(dst).shape).get_strides();
  }
  const memory::desc viewed(m.val(dst).shape, m.md_of(src).get_data_type(), seen);
  Val& d = m.val(dst);
  if (d.kind == Kind::Output) {   // the caller's buffer: copy the values
    d.md = plain(d.shape, viewed.get_data_type());
    d.has_md = true;
    m.reorder(src, viewed, dst, d.md);
    return;
  }
  m.view_of(dst, src, viewed);
}

// md without the axes `dropped` (each of size 1), and with one axis of size 1 in front, outermost
void Partition::kernel(KernelFn fn, const std::vector<int>& dsts, const std::vector<int>& srcs,
                       const Dims& sizes) {
  Impl& m = *impl_;
  Exec e{dnnl::primitive(), {}, {}, m.node, m.step, fn, {}, {}, sizes};
  e.kernel = "generated";
  // each operand dense, row-major or in the axis order the plan gave it (the kernel's strides)
  for (size_t i = 0; i < srcs.size(); ++i)
    e.args.push_back(Impl::use(DNNL_ARG_MULTIPLE_SRC + int(i), m.ensure(srcs[i], m.dense_result(srcs[i]))));
  std::vector<int> written;
  for (size_t j = 0; j < dsts.size(); ++j) {
    written.push_back(m.produce(dsts[j], m.dense_result(dsts[j])));
    e.args.push_back(Impl::use(DNNL_ARG_MULTIPLE_DST + int(j), written.back()));
  }
  m.execs.push_back(std::move(e));
  for (size_t j = 0; j < dsts.size(); ++j) m.finish(dsts[j], written[j]);
}

}  // namespace af
