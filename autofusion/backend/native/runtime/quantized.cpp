// The int8 steps: quantize and dequantize (the runtime's own loops, ONNX's rounding exactly), and
// the convolution and product of integers (oneDNN's, VNNI where the CPU has it) whose result is
// requantized as it is written, so int8 values flow from one int8 step to the next.
//
// ONNX's QuantizeLinear is saturate(round_half_even(x / scale) + zero_point), the division in
// f32; nearbyint rounds half to even in the default rounding mode. oneDNN's int8 primitives
// compute post_ops(src_scale·w_scale·Σ(src − src_zp)·w + bias) over s32 sums, then divide by the
// destination's scale and add its zero point, rounding the same way: what the Q/DQ graph computes
// in f32, up to the f32 rounding of its sums (ties can land one step apart; tests count them).
#include "partition.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

namespace af {

namespace {

dt onednn_type(Type t) {
  switch (t) {
    case Type::F32: return dt::f32;
    case Type::U8: return dt::u8;
    case Type::S8: return dt::s8;
  }
  return dt::undef;
}

// ONNX's QuantizeLinear of one value into Q (uint8_t, int8_t)
template <class Q>
inline Q quantized(float x, float scale, int zero_point) {
  constexpr float lo = std::is_signed<Q>::value ? -128.f : 0.f, hi = std::is_signed<Q>::value ? 127.f : 255.f;
  return Q(int32_t(std::min(hi, std::max(lo, std::nearbyint(x / scale) + float(zero_point)))));
}

template <class Q>
void quantize_into(const float* x, Q* y, int64_t n, float scale, int zero_point) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_FROM)   // (GCC vectorises it; `simd` stops it)
  for (int64_t i = 0; i < n; ++i) y[i] = quantized<Q>(x[i], scale, zero_point);
}

template <class Q>
void dequantize_into(const Q* x, float* y, int64_t n, float scale, int zero_point) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_FROM)   // (GCC vectorises it; `simd` stops it)
  for (int64_t i = 0; i < n; ++i) y[i] = float(int32_t(x[i]) - zero_point) * scale;
}

// Q(clamp(DQ(a) ∘ DQ(b), low, high)) over n values, ∘ + or ·, each step as the Q/DQ graph takes
// it in f32
template <bool Product, class A, class B, class Y>
void combined_into(const A* a, const B* b, Y* y, int64_t n, const float* scales, const int* zero_points, float low,
                   float high) {
  const float sa = scales[0], sb = scales[1], sy = scales[2];
  const int za = zero_points[0], zb = zero_points[1], zy = zero_points[2];
#pragma omp parallel for schedule(static) if (n >= PARALLEL_FROM)   // (GCC vectorises it; `simd` stops it)
  for (int64_t i = 0; i < n; ++i) {
    const float fa = float(int32_t(a[i]) - za) * sa, fb = float(int32_t(b[i]) - zb) * sb;
    y[i] = quantized<Y>(std::min(high, std::max(low, Product ? fa * fb : fa + fb)), sy, zy);
  }
}

// the same over n images of `pixels` positions of `channels` values, channels innermost, b one
// value per channel (of each image, b_per_image; else of all)
template <bool Product, class A, class B, class Y>
void combined_per_channel(const A* a, const B* b, Y* y, int64_t images, int64_t pixels, int64_t channels,
                          bool b_per_image, const float* scales, const int* zero_points, float low, float high) {
  const float sa = scales[0], sb = scales[1], sy = scales[2];
  const int za = zero_points[0], zb = zero_points[1], zy = zero_points[2];
#pragma omp parallel for schedule(static) if (images * pixels * channels >= PARALLEL_FROM)
  for (int64_t row = 0; row < images * pixels; ++row) {
    const B* g = b + (b_per_image ? row / pixels * channels : 0);
    const A* x = a + row * channels;
    Y* out = y + row * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float fa = float(int32_t(x[c]) - za) * sa, fb = float(int32_t(g[c]) - zb) * sb;
      out[c] = quantized<Y>(std::min(high, std::max(low, Product ? fa * fb : fa + fb)), sy, zy);
    }
  }
}

bool eight_bit(dt t) { return t == dt::u8 || t == dt::s8; }

// a convolution's weight scales as oneDNN masks them: one (0), or per output channel, of each group
// where grouped (the weight [g, O/g, …]: axes 0 and 1)
int conv_weight_mask(const Val& w_scales, int64_t groups) {
  if (product(w_scales.shape, 0, w_scales.shape.size()) == 1) return 0;
  return groups > 1 ? 3 : 1;
}

// f(T{}) with T the C++ type of the 8-bit type t
template <class F>
void with_type(dt t, F f) {
  if (t == dt::u8) f(uint8_t{});
  else f(int8_t{});
}

// one f32 or s32 value, as a primitive's run-time scale or zero point reads it
memory scalar_memory(const dnnl::engine& eng, float scale) {
  memory m(memory::desc({1}, dt::f32, tag::a), eng);
  *static_cast<float*>(m.get_data_handle()) = scale;
  return m;
}

memory scalar_memory(const dnnl::engine& eng, int32_t zero_point) {
  memory m(memory::desc({1}, dt::s32, tag::a), eng);
  *static_cast<int32_t*>(m.get_data_handle()) = zero_point;
  return m;
}

}  // namespace

void Partition::typed(int id, Type type) {
  Impl& m = *impl_;
  Val& v = m.val(id);
  v.type = onednn_type(type);
  if (v.kind != Kind::Internal) v.md = plain(v.shape, v.type);   // bound by slot: dense
  if (v.kind == Kind::Input && v.type != dt::f32) m.input_elems[v.slot] = 0;   // integers are finite
}

void Partition::quantize(int dst, int src, float scale, int zero_point) {
  Impl& m = *impl_;
  src = m.dense(src);
  if (m.md_of(src).get_data_type() == dt::bf16)   // a bf16 product's result (a product the int8 guard kept in float)
    src = m.ensure(src, plain(m.val(src).shape, dt::f32));
  const memory::desc& from = m.md_of(src);
  if (from.get_data_type() != dt::f32) m.fail("quantize reads f32 or bf16");
  const dt type = m.val(dst).type;
  const int y = m.produce(dst, retyped(from, type));
  Exec own{dnnl::primitive(), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)}, {}, m.node, m.step};
  own.own = [=](Exec& e) {
    const float* x = static_cast<const float*>(e.bound[DNNL_ARG_SRC].get_data_handle());
    const int64_t n = int64_t(e.bound[DNNL_ARG_SRC].get_desc().get_size() / sizeof(float));
    void* out = e.bound[DNNL_ARG_DST].get_data_handle();
    if (type == dt::u8) quantize_into(x, static_cast<uint8_t*>(out), n, scale, zero_point);
    else quantize_into(x, static_cast<int8_t*>(out), n, scale, zero_point);
  };
  own.kernel = "runtime quantize";
  m.execs.push_back(std::move(own));
  m.finish(dst, y);
}

void Partition::dequantize(int dst, int src, float scale, int zero_point) {
  Impl& m = *impl_;
  src = m.dense(src);
  const memory::desc& from = m.md_of(src);
  const dt type = from.get_data_type();
  if (!eight_bit(type)) m.fail("dequantize reads u8 or s8");
  const int y = m.produce(dst, retyped(from, dt::f32));
  Exec own{dnnl::primitive(), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)}, {}, m.node, m.step};
  own.own = [=](Exec& e) {
    const void* x = e.bound[DNNL_ARG_SRC].get_data_handle();
    const int64_t n = int64_t(e.bound[DNNL_ARG_SRC].get_desc().get_size());
    float* out = static_cast<float*>(e.bound[DNNL_ARG_DST].get_data_handle());
    if (type == dt::u8) dequantize_into(static_cast<const uint8_t*>(x), out, n, scale, zero_point);
    else dequantize_into(static_cast<const int8_t*>(x), out, n, scale, zero_point);
  };
  own.kernel = "runtime dequantize";
  m.execs.push_back(std::move(own));
  m.finish(dst, y);
}

void Partition::qbinary(int dst, int a, int b, Bin op, float a_scale, int a_zero_point, float b_scale,
                        int b_zero_point, float y_scale, int y_zero_point, float low, float high) {
  Impl& m = *impl_;
  if (op != Bin::Add && op != Bin::Mul) m.fail("an int8 binary step adds or multiplies");
  const Dims shape = m.val(a).shape, b_shape = m.val(b).shape;
  // b one value per channel ([1 or N, C, 1, ...]: a squeeze-excitation's gate): a channels innermost
  const bool per_channel = b_shape != shape;
  a = per_channel ? m.ensure(a, channels_last(shape, m.md_of(a).get_data_type())) : m.dense(a);
  const memory::desc& layout = m.md_of(a);
  b = per_channel ? m.dense(b) : m.ensure(m.dense(b), retyped(layout, m.md_of(b).get_data_type()));   // b in a's layout
  const dt ta = layout.get_data_type(), tb = m.md_of(b).get_data_type(), ty = m.val(dst).type;
  if (!eight_bit(ta) || !eight_bit(tb) || !eight_bit(ty)) m.fail("an int8 binary step reads and writes u8 or s8");
  const int y = m.produce(dst, retyped(layout, ty));
  Exec own{dnnl::primitive(), {Impl::use(DNNL_ARG_SRC_0, a), Impl::use(DNNL_ARG_SRC_1, b), Impl::use(DNNL_ARG_DST, y)},
           {}, m.node, m.step};
  const int64_t images = shape[0], channels = shape.size() > 1 ? shape[1] : 1;
  const int64_t pixels = product(shape, 0, shape.size()) / std::max<int64_t>(1, images * channels);
  const bool b_per_image = per_channel && b_shape[0] == images && images > 1;
  const float scales[3] = {a_scale, b_scale, y_scale};
  const int zero_points[3] = {a_zero_point, b_zero_point, y_zero_point};
  const bool product = op == Bin::Mul;
  own.own = [=](Exec& e) {
    const void* pa = e.bound[DNNL_ARG_SRC_0].get_data_handle();
    const void* pb = e.bound[DNNL_ARG_SRC_1].get_data_handle();
    void* py = e.bound[DNNL_ARG_DST].get_data_handle();
    const int64_t n = int64_t(e.bound[DNNL_ARG_SRC_0].get_desc().get_size());
    with_type(ta, [&](auto va) {
      with_type(tb, [&](auto vb) {
        with_type(ty, [&](auto vy) {
          using A = decltype(va);
          using B = decltype(vb);
          using Y = decltype(vy);
          auto at = static_cast<const A*>(pa);
          auto bt = static_cast<const B*>(pb);
          auto yt = static_cast<Y*>(py);
          if (per_channel && product)
            combined_per_channel<true>(at, bt, yt, images, pixels, channels, b_per_image, scales, zero_points, low, high);
          else if (per_channel)
            combined_per_channel<false>(at, bt, yt, images, pixels, channels, b_per_image, scales, zero_points, low, high);
          else if (product) combined_into<true>(at, bt, yt, n, scales, zero_points, low, high);
          else combined_into<false>(at, bt, yt, n, scales, zero_points, low, high);
        });
      });
    });
  };
  own.kernel = std::string(product ? "runtime int8 mul" : "runtime int8 add") + (per_channel ? " per channel" : "");
  m.execs.push_back(std::move(own));
  m.finish(dst, y);
}

void Partition::lookup(int dst, int src, int table) {
  Impl& m = *impl_;
  src = m.dense(src);
  const memory::desc& from = m.md_of(src);
  const dt tx = from.get_data_type(), ty = m.val(dst).type;
  if (!eight_bit(tx) || !eight_bit(ty)) m.fail("a table of an int8 function reads and writes u8 or s8");
  Val& t = m.val(table);
  if (t.kind != Kind::Constant || product(t.shape, 0, t.shape.size()) != 256) m.fail("a table is 256 constants");
  std::array<uint8_t, 256> bytes;   // the results' bytes, by the input's byte
  const float* values = static_cast<const float*>(t.owned.get_data_handle());
  const int first = tx == dt::s8 ? -128 : 0;   // the table's first entry is for this input
  for (int k = 0; k < 256; ++k) {
    const int code = first + k;
    const int32_t result = int32_t(values[k]);
    bytes[uint8_t(code)] = ty == dt::s8 ? uint8_t(int8_t(result)) : uint8_t(result);
  }
  const int y = m.produce(dst, retyped(from, ty));
  Exec own{dnnl::primitive(), {Impl::use(DNNL_ARG_SRC, src), Impl::use(DNNL_ARG_DST, y)}, {}, m.node, m.step};
  own.own = [bytes](Exec& e) {
    const uint8_t* x = static_cast<const uint8_t*>(e.bound[DNNL_ARG_SRC].get_data_handle());
    uint8_t* out = static_cast<uint8_t*>(e.bound[DNNL_ARG_DST].get_data_handle());
    const int64_t n = int64_t(e.bound[DNNL_ARG_SRC].get_desc().get_size());
#pragma omp parallel for schedule(static) if (n >= PARALLEL_FROM)
    for (int64_t i = 0; i < n; ++i) out[i] = bytes[x[i]];
  };
  own.kernel = "runtime int8 table";
  m.execs.push_back(std::move(own));
  m.finish(dst, y);
}

// the attributes of an int8 primitive: scales of src (per tensor), weights (per tensor, or per
// output channel: `weight_mask`) and dst, zero points of src and dst, the activations as post-ops
dnnl::primitive_attr Partition::Impl::int8_attr(const Acts& acts, int weight_mask, bool src_zero_point,
                                                bool dst_zero_point, bool dst_scale) {
  dnnl::primitive_attr a = attr(acts);
  a.set_scales_mask(DNNL_ARG_SRC, 0);
  a.set_scales_mask(DNNL_ARG_WEIGHTS, weight_mask);
  if (dst_scale) a.set_scales_mask(DNNL_ARG_DST, 0);
  if (src_zero_point) a.set_zero_points_mask(DNNL_ARG_SRC, 0);
  if (dst_zero_point) a.set_zero_points_mask(DNNL_ARG_DST, 0);
  return a;
}

// the run-time scales and zero points of an int8 primitive, as its arguments
void Partition::Impl::int8_args(std::vector<Arg>& args, int w_scales, const Quantization& q) {
  args.push_back(owned(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, scalar_memory(eng, q.src_scale)));
  const Dims count = val(w_scales).shape;
  args.push_back(owned(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS,
                       constant_as(w_scales, memory::desc({product(count, 0, count.size())}, dt::f32, tag::a))));
  if (q.dst_scale > 0) args.push_back(owned(DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, scalar_memory(eng, q.dst_scale)));
  if (q.src_zero_point) args.push_back(owned(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, scalar_memory(eng, q.src_zero_point)));
  if (q.dst_zero_point) args.push_back(owned(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, scalar_memory(eng, q.dst_zero_point)));
}

void Partition::qconv(int dst, int src, int w, int b, const Dims& strides, const Dims& dilations,
                      const Dims& pad_begin, const Dims& pad_end, int64_t groups, const Acts& acts,
                      int w_scales, float src_scale, int src_zero_point, float dst_scale, int dst_zero_point) {
  Impl& m = *impl_;
  const Quantization q{src_scale, src_zero_point, dst_scale, dst_zero_point};
  const Dims wdims = grouped_weight(m.val(w).shape, groups);
  const int weight_mask = conv_weight_mask(m.val(w_scales), groups);
  const memory::desc bias_md = b >= 0 ? plain(m.val(b).shape) : memory::desc();
  const dt src_type = m.md_of(src).get_data_type(), dst_type = m.val(dst).type;
  if (!eight_bit(src_type)) m.fail("an int8 convolution reads u8 or s8");
  auto writing = [&](const memory::desc& src_md, const memory::desc& dst_md) {
    return dnnl::convolution_forward::primitive_desc(
        m.eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
        any(wdims, dt::s8), bias_md, dst_md, strides, onednn_dilations(dilations), pad_begin, pad_end,
        m.int8_attr(acts, weight_mask, src_zero_point != 0, dst_zero_point != 0, dst_scale > 0));
  };
  // channels innermost, the layout oneDNN's int8 convolutions read and write fastest
  auto pd = writing(channels_last(m.val(src).shape, src_type), channels_last(m.val(dst).shape, dst_type));
  if (is_reference(pd)) pd = writing(any(m.val(src).shape, src_type), any(m.val(dst).shape, dst_type));
  const int x = m.ensure(src, pd.src_desc());
  const int y = m.produce(dst, pd.dst_desc());
  std::vector<Arg> args{Impl::use(DNNL_ARG_SRC, x), Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, pd.weights_desc())),
                        Impl::use(DNNL_ARG_DST, y)};
  if (b >= 0) args.push_back(Impl::owned(DNNL_ARG_BIAS, m.constant_as(b, pd.bias_desc())));
  m.int8_args(args, w_scales, q);
  m.add(pd, dnnl::convolution_forward(pd), std::move(args), acts);
  m.finish(dst, y);
}

void Partition::qdeconv(int dst, int src, int w, int b, const Dims& strides, const Dims& dilations,
                        const Dims& pad_begin, const Dims& pad_end, int64_t groups, const Acts& acts,
                        int w_scales, float src_scale, int src_zero_point, float dst_scale, int dst_zero_point) {
  Impl& m = *impl_;
  const Quantization q{src_scale, src_zero_point, dst_scale, dst_zero_point};
  const DeconvWeight weight = deconv_weight(m.val(w).shape, groups);
  const memory::desc bias_md = b >= 0 ? plain(m.val(b).shape) : memory::desc();
  const dt src_type = m.md_of(src).get_data_type(), dst_type = m.val(dst).type;
  if (!eight_bit(src_type)) m.fail("an int8 transposed convolution reads u8 or s8");
  dnnl::deconvolution_forward::primitive_desc pd(
      m.eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
      any(m.val(src).shape, src_type), any(weight.dims, dt::s8), bias_md, any(m.val(dst).shape, dst_type), strides,
      onednn_dilations(dilations), pad_begin, pad_end,
      m.int8_attr(acts, conv_weight_mask(m.val(w_scales), groups), src_zero_point != 0, dst_zero_point != 0,
                  dst_scale > 0));
  const int x = m.ensure(m.dense(src), pd.src_desc());
  const int y = m.produce(dst, pd.dst_desc());
  std::vector<Arg> args{Impl::use(DNNL_ARG_SRC, x),
                        Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, weight.as_held, pd.weights_desc())),
                        Impl::use(DNNL_ARG_DST, y)};
  if (b >= 0) args.push_back(Impl::owned(DNNL_ARG_BIAS, m.constant_as(b, pd.bias_desc())));
  m.int8_args(args, w_scales, q);
  m.add(pd, dnnl::deconvolution_forward(pd), std::move(args), acts);
  m.finish(dst, y);
}

void Partition::qmatmul(int dst, int a, int w, int b, bool trans_b, const Acts& acts, int w_scales,
                        float a_scale, int a_zero_point, float dst_scale, int dst_zero_point) {
  Impl& m = *impl_;
  const Quantization q{a_scale, a_zero_point, dst_scale, dst_zero_point};
  a = m.ensure(a, plain(m.val(a).shape, m.md_of(a).get_data_type()));
  const dt a_type = m.md_of(a).get_data_type(), dst_type = m.val(dst).type;
  if (!eight_bit(a_type)) m.fail("an int8 product reads u8 or s8");
  const Dims& shape = m.val(a).shape;
  const int64_t k = shape.back(), rows = product(shape, 0, shape.size() - 1);
  const Dims wshape = m.val(w).shape;
  const int64_t n = trans_b ? wshape[0] : wshape[1];
  const bool per_channel = product(m.val(w_scales).shape, 0, m.val(w_scales).shape.size()) > 1;
  // a [rows, K] · w [K, N]: w's scales per column, the mask of its axis 1
  const memory::desc a_md = plain({rows, k}, a_type), dst_md = plain({rows, n}, dst_type);
  const memory::desc bias_md = b >= 0 ? plain({1, n}) : memory::desc();
  dnnl::matmul::primitive_desc pd(m.eng, a_md, memory::desc({k, n}, dt::s8, tag::any), bias_md, dst_md,
                                  m.int8_attr(acts, per_channel ? 2 : 0, a_zero_point != 0, dst_zero_point != 0,
                                              dst_scale > 0));
  const int y = m.produce(dst, plain(m.val(dst).shape, dst_type));
  const memory::desc given = trans_b ? plain({n, k}).permute_axes({1, 0}) : plain({k, n});
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, a, a_md),
                        Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, given, pd.weights_desc())),
                        Impl::view(DNNL_ARG_DST, y, dst_md)};
  if (b >= 0) args.push_back(Impl::owned(DNNL_ARG_BIAS, m.constant_as(b, pd.bias_desc())));
  m.int8_args(args, w_scales, q);
  m.add(pd, dnnl::matmul(pd), std::move(args), acts);
  m.finish(dst, y);
}

// float(Σ (q − zp)·w)·(scale·w_scales), (q, scale, zp) = DynamicQuantizeLinear(a) made on each
// call: a's range with 0, scale (max − min)/255 in f32 (1 where a is all 0, as ONNX Runtime),
// zp round_half_even(−min/scale) saturated to [0, 255], q quantized into `quantized` (a u8 value
// of a's shape). The scales' product goes to the primitive as its run-time weight scales, so
// oneDNN's f32(sum)·scale is the graph's Mul(Cast(sum), Mul(scale, w_scale)) as it rounds.
void Partition::dynamic_qmatmul(int dst, int a, int quantized, int w, int w_scales) {
  Impl& m = *impl_;
  a = m.dense(a);
  if (m.md_of(a).get_data_type() == dt::bf16) a = m.ensure(a, plain(m.val(a).shape, dt::f32));
  if (m.md_of(a).get_data_type() != dt::f32) m.fail("a dynamically quantized product reads f32 or bf16");
  const Dims& shape = m.val(a).shape;
  const int64_t k = shape.back(), rows = product(shape, 0, shape.size() - 1), n = m.val(w).shape[1];
  const Val& ws = m.val(w_scales);
  if (ws.kind != Kind::Constant) m.fail("the weight's scales are constants");
  const float* given = static_cast<const float*>(ws.owned.get_data_handle());
  const std::vector<float> w_scale(given, given + product(ws.shape, 0, ws.shape.size()));
  memory scales(memory::desc({int64_t(w_scale.size())}, dt::f32, tag::a), m.eng);   // scale·w_scale, per call
  memory zero_point(memory::desc({1}, dt::s32, tag::a), m.eng);
  static constexpr int SCALES = DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, ZERO_POINT = DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC;

  const int q = m.produce(quantized, plain(m.val(quantized).shape, dt::u8));
  Exec own{dnnl::primitive(),
           {Impl::use(DNNL_ARG_SRC, a), Impl::use(DNNL_ARG_DST, q), Impl::owned(SCALES, scales),
            Impl::owned(ZERO_POINT, zero_point)},
           {}, m.node, m.step};
  own.own = [w_scale](Exec& e) {
    const float* x = static_cast<const float*>(e.bound[DNNL_ARG_SRC].get_data_handle());
    const int64_t count = int64_t(e.bound[DNNL_ARG_SRC].get_desc().get_size() / sizeof(float));
    float lo = 0.f, hi = 0.f;
#pragma omp parallel for schedule(static) reduction(min : lo) reduction(max : hi) if (count >= PARALLEL_FROM)
    for (int64_t i = 0; i < count; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float scale = hi == lo ? 1.f : (hi - lo) / 255.f;
    const int zp = int(std::min(255.f, std::max(0.f, std::nearbyint(-lo / scale))));
    quantize_into(x, static_cast<uint8_t*>(e.bound[DNNL_ARG_DST].get_data_handle()), count, scale, zp);
    float* combined = static_cast<float*>(e.bound[SCALES].get_data_handle());
    for (size_t j = 0; j < w_scale.size(); ++j) combined[j] = scale * w_scale[j];
    *static_cast<int32_t*>(e.bound[ZERO_POINT].get_data_handle()) = zp;
  };
  own.kernel = "runtime dynamic quantize";
  m.execs.push_back(std::move(own));
  m.finish(quantized, q);

  dnnl::primitive_attr attr = m.attr({});
  attr.set_scales_mask(DNNL_ARG_WEIGHTS, w_scale.size() > 1 ? 2 : 0);
  attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
  const memory::desc q_md = plain({rows, k}, dt::u8), dst_md = plain({rows, n}, dt::f32);
  dnnl::matmul::primitive_desc pd(m.eng, q_md, memory::desc({k, n}, dt::s8, tag::any), dst_md, attr);
  const int y = m.produce(dst, plain(m.val(dst).shape, dt::f32));
  std::vector<Arg> args{Impl::view(DNNL_ARG_SRC, q, q_md),
                        Impl::owned(DNNL_ARG_WEIGHTS, m.constant_as(w, plain({k, n}), pd.weights_desc())),
                        Impl::view(DNNL_ARG_DST, y, dst_md), Impl::owned(SCALES, scales),
                        Impl::owned(ZERO_POINT, zero_point)};
  m.add(pd, dnnl::matmul(pd), std::move(args), {});
  m.finish(dst, y);
}

}  // namespace af
