// The runtime's own loops as a partition's executables: where oneDNN has no fast kernel for a
// step, or a slower one (each loop's header says where and by how much).
#include "partition.h"
#include "channel_scale.h"
#include "depthwise.h"
#include "gemv.h"
#include "layernorm.h"
#include "reduce.h"
#include "softmax.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <numeric>
#include <type_traits>

namespace af {

// whether softmax() runs the runtime's own loop (softmax.h): src dense row-major f32 (scores:
// what the steps before a softmax write), dst f32 or bf16 (an attention's weights), the last axis
bool Partition::Impl::own_softmax(const memory::desc& src_md, const memory::desc& dst_md, int axis) const {
  const Dims dims = src_md.get_dims();
  return VECTORISED && axis == int(dims.size()) - 1 && src_md == plain(dims) &&
         (dst_md == plain(dims, dt::bf16) || dst_md == plain(dims));
}

// softmax (or log-softmax) of src into dst along axis: the runtime's own loop where it applies
// (own_softmax), else oneDNN's primitive. Own loop only: `mask` is added to src first, a plain
// f32 value of src's rank (mask_dims) whose axes are src's or 1, its last `cols`; `cols` > 0:
// only the first `cols` values of each row count, the rest is padding (0 in dst)
void Partition::Impl::softmax(int src, const memory::desc& src_md, int dst, const memory::desc& dst_md,
                               int axis, bool log, int mask, const Dims& mask_dims, int64_t cols) {
  const Dims dims = src_md.get_dims();
  if constexpr (VECTORISED) {   // the runtime's own loops need AVX-512 (vector.h)
    if (own_softmax(src_md, dst_md, axis)) {
      const bool to_bf16 = dst_md.get_data_type() == dt::bf16;
      const int64_t stride = dims.back();
      if (cols <= 0) cols = stride;
      const int64_t rows = std::accumulate(dims.begin(), dims.end() - 1, int64_t(1), std::multiplies<>());
      Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, src), view(DNNL_ARG_DST, dst, dst_md)}, {}, node, step};
      // where each row's mask row starts: the mask's strides, 0 along the axes it broadcasts
      auto mask_rows = std::make_shared<std::vector<int64_t>>();
      if (mask >= 0) {
        if (mask_dims.size() != dims.size() || mask_dims.back() != cols)
          fail("a mask that is not one row per row of the scores");
        own.args.push_back(view(DNNL_ARG_SRC_1, mask, plain(mask_dims)));
        const Dims strides = plain(mask_dims).get_strides();
        Dims at(dims.size() - 1, 0);
        do {
          int64_t o = 0;
          for (size_t i = 0; i < at.size(); ++i) o += mask_dims[i] == 1 ? 0 : at[i] * strides[i];
          mask_rows->push_back(o);
        } while (next_index(at, dims));
      }
      own.own = [=](Exec& e) {
        const float* x = static_cast<const float*>(e.bound[DNNL_ARG_SRC].get_data_handle());
        const float* add = mask >= 0 ? static_cast<const float*>(e.bound[DNNL_ARG_SRC_1].get_data_handle()) : nullptr;
        void* y = e.bound[DNNL_ARG_DST].get_data_handle();
        if (to_bf16) softmax_rows(x, static_cast<uint16_t*>(y), rows, cols, stride, log, add, mask_rows->data());
        else softmax_rows(x, static_cast<float*>(y), rows, cols, stride, log, add, mask_rows->data());
      };
      own.kernel = "runtime softmax";
      execs.push_back(std::move(own));
      return;
    }
  }
  if (mask >= 0 || (cols > 0 && cols != dims.back()))
    fail("a masked or padded softmax the runtime's loop does not take");
  dnnl::softmax_forward::primitive_desc pd(
      eng, dnnl::prop_kind::forward_inference,
      log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, src_md, dst_md, axis,
      attr({}));
  add(pd, dnnl::softmax_forward(pd), {view(DNNL_ARG_SRC, src, src_md), view(DNNL_ARG_DST, dst, dst_md)});
}

// y = a·b (y in a's layout) by the runtime's own loop (channel_scale.h) where a is dense
// channels-last and b dense with one value per channel, for every batch or for each; false
// where not (oneDNN's binary then)
bool Partition::Impl::scale_channels(int a, int b, int y) {
  if constexpr (VECTORISED) {   // the runtime's own loops need AVX-512 (vector.h)
    const memory::desc &md = md_of(a), &b_md = md_of(b);
    const Dims dims = md.get_dims(), scales = b_md.get_dims();
    int64_t outer, pixels, channels;
    if (!channel_minor(md, outer, pixels, channels) || channels != dims[1] ||
        scales.size() != dims.size() || scales[1] != dims[1] || (scales[0] != 1 && scales[0] != dims[0]) ||
        b_md != plain(scales, b_md.get_data_type()))
      return false;
    for (size_t i = 2; i < scales.size(); ++i)
      if (scales[i] != 1) return false;
    const bool x_bf16 = md.get_data_type() == dt::bf16, s_bf16 = b_md.get_data_type() == dt::bf16;
    const bool per_batch = scales[0] != 1;
    Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC_0, a), use(DNNL_ARG_SRC_1, b), use(DNNL_ARG_DST, y)}, {}, node, step};
    own.own = [=](Exec& e) {
      const void* x = e.bound[DNNL_ARG_SRC_0].get_data_handle();
      const void* s = e.bound[DNNL_ARG_SRC_1].get_data_handle();
      void* out = e.bound[DNNL_ARG_DST].get_data_handle();
      auto run = [&](auto* xs) {
        using X = std::remove_const_t<std::remove_pointer_t<decltype(xs)>>;
        if (s_bf16) af::scale_channels(xs, static_cast<const uint16_t*>(s), static_cast<X*>(out), outer, pixels, channels, per_batch);
        else af::scale_channels(xs, static_cast<const float*>(s), static_cast<X*>(out), outer, pixels, channels, per_batch);
      };
      if (x_bf16) run(static_cast<const uint16_t*>(x));
      else run(static_cast<const float*>(x));
    };
    own.kernel = "runtime channel scale";
    execs.push_back(std::move(own));
    return true;
  }
  return false;
}

// y = x·W + b for one row x (gemv.h): x dense in the step's compute type, W and b constants;
// the id written, for finish()
int Partition::Impl::gemv(int dst, int x, int w, int bias, const memory::desc& out, int64_t k, int64_t n) {
  const bool bf16 = compute == dt::bf16, to_bf16 = out.get_data_type() == dt::bf16;
  const memory rows = constant_as(w, plain({k, n}, compute));
  auto panels_of = [&](auto zero) {   // W in gemv.h's panels, of W's element type
    using W = decltype(zero);
    memory out(memory::desc({panelled_size<W>(k, n)}, compute, tag::a), eng);
    panelled(static_cast<const W*>(rows.get_data_handle()), k, n, static_cast<W*>(out.get_data_handle()));
    return out;
  };
  const memory weights = bf16 ? panels_of(uint16_t(0)) : panels_of(0.f);
  int y = produce(dst, out);
  Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, x), owned(DNNL_ARG_WEIGHTS, weights), view(DNNL_ARG_DST, y, out)},
           {}, node, step};
  if (bias >= 0) own.args.push_back(owned(DNNL_ARG_BIAS, constant_as(bias, plain({n}))));
  auto padded = std::make_shared<std::vector<uint32_t>>((k + 1) / 2);
  const bool has_bias = bias >= 0;
  own.own = [=](Exec& e) {
    const void* xs = e.bound[DNNL_ARG_SRC].get_data_handle();
    const void* ws = e.bound[DNNL_ARG_WEIGHTS].get_data_handle();
    const float* b = has_bias ? static_cast<const float*>(e.bound[DNNL_ARG_BIAS].get_data_handle()) : nullptr;
    void* ys = e.bound[DNNL_ARG_DST].get_data_handle();
    auto run = [&](auto* y) {
      if (bf16)
        af::gemv(static_cast<const uint16_t*>(xs), static_cast<const uint16_t*>(ws), b, y, k, n, padded->data());
      else
        af::gemv(static_cast<const float*>(xs), static_cast<const float*>(ws), b, y, k, n);
    };
    if (to_bf16) run(static_cast<uint16_t*>(ys));
    else run(static_cast<float*>(ys));
  };
  own.kernel = "runtime gemv";
  execs.push_back(std::move(own));
  return y;
}

// act(conv(x, w) + b) for a 2-D depthwise convolution, x and y channels-last (depthwise.h), in
// place of oneDNN's primitive pd: where pd is oneDNN 3.2's older jit_dw kernel in a bf16 step
// (what it has for a bf16 result; for an f32 one, and in fp32, its brdgmm_dw is faster than
// this loop: `python -m autofusion.benchmarks.conv_floor --program depthwise_cost`), w is a constant
// [C, 1, k, k] of square taps, k and the stride are ones the loop has, the dilation is 1 and the
// post-ops are ones it computes. False, adding nothing, where not.
bool Partition::Impl::depthwise(int y, int x, int w, int b, const dnnl::convolution_forward::primitive_desc& pd,
                                const Dims& strides, const Dims& dilations, const Dims& pad_begin,
                                int64_t groups, const Acts& acts) {
  if constexpr (VECTORISED) {   // the runtime's own loops need AVX-512 (vector.h)
    const Dims in = val(x).shape, out = pd.dst_desc().get_dims(), ws = val(w).shape;
    const Acts post = post_ops_of(acts);
    const bool fits =
        compute == dt::bf16 && implemented_by(pd, "jit_dw") &&
        in.size() == 4 && groups == in[1] && groups == out[1] && val(w).kind == Kind::Constant &&
        ws[1] == 1 && ws[2] == ws[3] && strides[0] == strides[1] && depthwise_kernel_exists(ws[2], strides[0]) &&
        dilations[0] == 1 && dilations[1] == 1 &&
        std::all_of(post.begin(), post.end(), depthwise_act) &&
        pd.src_desc() == channels_last(in, pd.src_desc().get_data_type()) &&
        pd.dst_desc() == channels_last(out, pd.dst_desc().get_data_type());
    if (!fits) return false;
    const int64_t k = ws[2], stride = strides[0], c = in[1];
    // the weight as [k, k, C] f32: one vector of taps per channel block
    const memory taps = constant_as(w, memory::desc({c, 1, k, k}, dt::f32, Dims{1, 1, k * c, c}));
    memory bias = b >= 0 ? constant_as(b, plain({c})) : memory(plain({c}), eng);
    if (b < 0) std::fill_n(static_cast<float*>(bias.get_data_handle()), c, 0.f);
    const DepthwiseShape shape{in[0], c, in[2], in[3], out[2], out[3], pad_begin[0], pad_begin[1]};
    const bool x_bf16 = pd.src_desc().get_data_type() == dt::bf16, y_bf16 = pd.dst_desc().get_data_type() == dt::bf16;
    Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, x), owned(DNNL_ARG_WEIGHTS, taps), owned(DNNL_ARG_BIAS, bias),
                                 use(DNNL_ARG_DST, y)}, {}, node, step};
    own.own = [=](Exec& e) {
      const void* xs = e.bound[DNNL_ARG_SRC].get_data_handle();
      const float* wt = static_cast<const float*>(e.bound[DNNL_ARG_WEIGHTS].get_data_handle());
      const float* bs = static_cast<const float*>(e.bound[DNNL_ARG_BIAS].get_data_handle());
      void* ys = e.bound[DNNL_ARG_DST].get_data_handle();
      auto run = [&](auto* x_typed) {
        if (y_bf16) depthwise_for(k, stride, x_typed, wt, bs, post.data(), int(post.size()), static_cast<uint16_t*>(ys), shape);
        else depthwise_for(k, stride, x_typed, wt, bs, post.data(), int(post.size()), static_cast<float*>(ys), shape);
      };
      if (x_bf16) run(static_cast<const uint16_t*>(xs));
      else run(static_cast<const float*>(xs));
    };
    own.kernel = "runtime depthwise";
    execs.push_back(std::move(own));
    if (Alg gate = gate_after(acts); gate != Alg::None) gate_over_dst(gate);
    return true;
  }
  return false;
}

// dst = src's mean over its pixels per batch and channel, summed by the gate of the step that
// wrote src as it writes (gated_summed_into), where that step has one and src's layout puts
// channels innermost; false where not (the plan sees neither the layout oneDNN picks nor
// whether this build vectorises the gate)
bool Partition::Impl::sum_in_gate(int dst, int src) {
  int64_t outer, pixels, inner;
  if (!channel_minor(md_of(src), outer, pixels, inner)) return false;
  for (auto it = execs.rbegin(); it != execs.rend(); ++it) {
    const bool writes = std::any_of(it->args.begin(), it->args.end(), [&](const Arg& a) {
      return (a.key == DNNL_ARG_DST || a.key == GATED_INTO) && a.value == src && !a.has_md;
    });
    if (!writes) continue;
    if (it->gate == Alg::None || it->means) return false;
    const int y = produce(dst, dense_result(dst));
    it->args.push_back(use(MEANS_INTO, y));
    it->means = ChannelMeans{outer, pixels, inner, val(src).shape[0], val(src).shape[1]};
    Val& v = val(y);   // written at the gate's step, not this one
    v.first = std::min(v.first, it->step);
    finish(dst, y);
    return true;
  }
  return false;
}

bool Partition::Impl::gate_in_tiles(int dst, int src, int w, int b, const memory::desc& bias_md,
                                    const dnnl::convolution_forward::primitive_desc& pd, const Acts& acts) {
  const Dims in = val(src).shape, out = val(dst).shape;
  const int threads = omp_get_max_threads();
  if (gate_after(acts) == Alg::None || out.size() != 4 ||
      pd.dst_desc() != channels_last(out, dt::f32) ||
      int64_t(pd.dst_desc().get_size()) < TILED_GATE_FROM)
    return false;
  // tiles of at most about TILE_BYTES, evenly long (a short last one would be another kernel)
  const int64_t pixels = out[0] * out[2] * out[3], even = (pixels * 4 * out[1] + TILE_BYTES - 1) / TILE_BYTES,
                tile = std::max<int64_t>(64, (pixels + even - 1) / even), tiles = (pixels + tile - 1) / tile,
                last = pixels - (tiles - 1) * tile;
  if (tiles < 8 * threads) return false;   // too few to share evenly
  auto tile_pd = [&](int64_t n) {   // [1, C, 1, n]: n pixels of the images, channels-last
    return dnnl::convolution_forward::primitive_desc(
        eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        channels_last({1, in[1], 1, n}, compute), pd.weights_desc(), bias_md,
        channels_last({1, out[1], 1, n}, dt::f32), {1, 1}, {0, 0}, {0, 0}, attr(post_ops_of(acts)));
  };
  std::optional<dnnl::convolution_forward::primitive_desc> whole_tile, last_tile;
  try {
    whole_tile = tile_pd(tile), last_tile = tile_pd(last);
  } catch (const dnnl::error&) {
    return false;   // the whole convolution's weight layout is not one a tile takes
  }
  for (const auto* t : {&*whole_tile, &*last_tile})
    if (is_reference(*t)) return false;
  struct Tiles {
    dnnl::convolution_forward whole, last;
    std::vector<memory> src_whole, src_last, f32, pads;   // per thread
    std::vector<dnnl::stream> streams;
  };
  auto t = std::make_shared<Tiles>(Tiles{dnnl::convolution_forward(*whole_tile), dnnl::convolution_forward(*last_tile)});
  const memory::desc pad = whole_tile->scratchpad_desc().get_size() >= last_tile->scratchpad_desc().get_size()
                               ? whole_tile->scratchpad_desc() : last_tile->scratchpad_desc();
  for (int i = 0; i < threads; ++i) {
    t->src_whole.emplace_back(whole_tile->src_desc(), eng, nullptr);
    t->src_last.emplace_back(last_tile->src_desc(), eng, nullptr);
    t->f32.emplace_back(whole_tile->dst_desc(), eng);
    t->pads.emplace_back(pad, eng);
    t->streams.emplace_back(eng);
  }
  const int y = produce(dst, channels_last(out, result_type(dst)));
  Exec e{{}, {use(DNNL_ARG_SRC, ensure(src, channels_last(in, compute))),
              owned(DNNL_ARG_WEIGHTS, constant_as(w, pd.weights_desc())), use(DNNL_ARG_DST, y)}, {}, node, step};
  if (b >= 0) e.args.push_back(owned(DNNL_ARG_BIAS, constant_as(b, pd.bias_desc())));
  const Alg gate = gate_after(acts);
  e.kernel = std::string(whole_tile->impl_info_str()) + " in tiles of " + std::to_string(tile) + " pixels + " +
             gate_name(gate);
  const size_t in_bytes = memory::data_type_size(compute) * in[1], out_values = out[1];
  e.own = [this, t, gate, tile, tiles, last, in_bytes, out_values](Exec& self) {
    auto& bound = self.bound;
    const char* x = static_cast<const char*>(bound[DNNL_ARG_SRC].get_data_handle());
    const memory& y = bound[DNNL_ARG_DST];
    const bool bf16 = y.get_desc().get_data_type() == dt::bf16;
    std::string error;
#pragma omp parallel num_threads(std::min<int>(omp_get_max_threads(), int(t->f32.size())))
    {
      const int k = omp_get_thread_num();
#pragma omp for schedule(static)
      for (int64_t i = 0; i < tiles; ++i) {
        const bool whole = i + 1 < tiles || last == tile;
        memory& in = whole ? t->src_whole[k] : t->src_last[k];
        in.set_data_handle(const_cast<char*>(x) + i * tile * in_bytes);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in}, {DNNL_ARG_WEIGHTS, bound.at(DNNL_ARG_WEIGHTS)},
                                             {DNNL_ARG_DST, t->f32[k]}, {DNNL_ARG_SCRATCHPAD, t->pads[k]}};
        if (auto bias = bound.find(DNNL_ARG_BIAS); bias != bound.end()) args[DNNL_ARG_BIAS] = bias->second;
        try {
          (whole ? t->whole : t->last).execute(t->streams[k], args);
        } catch (const std::exception& err) {   // not out of the parallel region
#pragma omp critical
          error = err.what();
          continue;
        }
        const float* f = static_cast<const float*>(t->f32[k].get_data_handle());
        const int64_t n = (whole ? tile : last) * int64_t(out_values), at = i * tile * int64_t(out_values);
        if (bf16) gate_into(gate, f, static_cast<uint16_t*>(y.get_data_handle()) + at, n);
        else gate_into(gate, f, static_cast<float*>(y.get_data_handle()) + at, n);
      }
    }
    if (!error.empty()) fail(error);   // naming the node, as a primitive's error does
  };
  execs.push_back(std::move(e));
  finish(dst, y);
  return true;
}

// dst = src reduced over the run of axes between `outer` and `inner` values (reduce.h), row-major f32
void Partition::Impl::reduction(int x, int y, Reduce op, int64_t outer, int64_t run, int64_t inner) {
  Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, x), use(DNNL_ARG_DST, y)}, {}, node, step};
  own.own = [=](Exec& e) {
    const float* xs = static_cast<const float*>(e.bound[DNNL_ARG_SRC].get_data_handle());
    float* ys = static_cast<float*>(e.bound[DNNL_ARG_DST].get_data_handle());
    switch (op) {
      case Reduce::Mean: return reduce_run<Fold::Sum>(xs, ys, outer, run, inner, 1.f / float(run));
      case Reduce::Sum: return reduce_run<Fold::Sum>(xs, ys, outer, run, inner, 1.f);
      case Reduce::Max: return reduce_run<Fold::Max>(xs, ys, outer, run, inner, 1.f);
      case Reduce::Min: return reduce_run<Fold::Min>(xs, ys, outer, run, inner, 1.f);
      case Reduce::Prod: return reduce_run<Fold::Prod>(xs, ys, outer, run, inner, 1.f);
    }
  };
  own.kernel = "runtime reduction";
  execs.push_back(std::move(own));
}

// every value of dense f32 y set to `value` (a Pad's border, before its interior is copied in)
void Partition::Impl::fill(int y, float value) {
  Exec own{dnnl::primitive(), {use(DNNL_ARG_DST, y)}, {}, node, step};
  own.own = [value](Exec& e) {
    const memory& m = e.bound[DNNL_ARG_DST];
    float* ys = static_cast<float*>(m.get_data_handle());
    const int64_t n = int64_t(m.get_desc().get_size() / sizeof(float));
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_FROM)
    for (int64_t i = 0; i < n; ++i) ys[i] = value;
  };
  own.kernel = "runtime fill";
  execs.push_back(std::move(own));
}

// where output index i (of the padded axis, less the count before) reads the input of n values:
// numpy's "reflect" (mirrored about the ends, again for pads longer than the input), "edge"
// (the end value), "wrap" (from the other end)
static int64_t padded_from(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::Edge: return i < 0 ? 0 : n - 1;
    case PadMode::Wrap: return ((i % n) + n) % n;
    case PadMode::Reflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      const int64_t k = ((i % period) + period) % period;
      return k < n ? k : period - k;
    }
  }
  return 0;
}

// Pad in a mode that reads its border from the input (row-major, any element size): each output
// row (all axes but the last) copies from the input row its index maps to, its interior in one
// memcpy and its border value by value. A negative count crops first: the border repeats what is
// left (as the PyTorch kernel does)
void Partition::Impl::pad_from_input(int x, int y, const Dims& begin, const Dims& end, PadMode mode) {
  const Dims from = md_of(x).get_dims(), to = md_of(y).get_dims();
  const int rank = int(to.size());
  const size_t size = memory::data_type_size(md_of(x).get_data_type());
  Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, x), use(DNNL_ARG_DST, y)}, {}, node, step};
  own.own = [=](Exec& e) {
    const char* xs = static_cast<const char*>(e.bound[DNNL_ARG_SRC].get_data_handle());
    char* ys = static_cast<char*>(e.bound[DNNL_ARG_DST].get_data_handle());
    // per axis: the first input index kept, how many are kept, the output index they start at
    auto kept = [&](int a) {
      const int64_t lo = std::max<int64_t>(-begin[a], 0);
      return std::array<int64_t, 3>{lo, from[a] - lo - std::max<int64_t>(-end[a], 0),
                                    std::max<int64_t>(begin[a], 0)};
    };
    if (rank == 0) {
      std::memcpy(ys, xs, size);
      return;
    }
    const auto [first, last_in, before] = kept(rank - 1);
    const int64_t last_out = to[rank - 1];
    int64_t rows = 1;
    for (int a = 0; a + 1 < rank; ++a) rows *= to[a];
    // the interior of a row: the outputs [lo, hi) that read inputs lo - before ...
    const int64_t lo = std::clamp<int64_t>(before, 0, last_out);
    const int64_t hi = std::clamp<int64_t>(before + last_in, lo, last_out);
#pragma omp parallel for schedule(static) if (rows * last_out >= PARALLEL_FROM)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t source = 0, rest = r, stride = 1;
      for (int a = rank - 2; a >= 0; --a) {   // the input row this output row reads
        const int64_t i = rest % to[a];
        rest /= to[a];
        const auto [skipped, n, at] = kept(a);
        source += (skipped + padded_from(i - at, n, mode)) * stride;
        stride *= from[a];
      }
      const char* in = xs + size_t(source * from[rank - 1] + first) * size;
      char* out = ys + size_t(r * last_out) * size;
      if (hi > lo) std::memcpy(out + lo * size, in + (lo - before) * size, size_t(hi - lo) * size);
      for (int64_t j = 0; j < lo; ++j)
        std::memcpy(out + j * size, in + padded_from(j - before, last_in, mode) * size, size);
      for (int64_t j = hi; j < last_out; ++j)
        std::memcpy(out + j * size, in + padded_from(j - before, last_in, mode) * size, size);
    }
  };
  own.kernel = "runtime pad";
  execs.push_back(std::move(own));
}

// the softmax of row-major f32 x into y along an axis of `run` values between `outer` and `inner`
// (softmax.h)
void Partition::Impl::column_softmax(int x, int y, int64_t outer, int64_t run, int64_t inner, bool log) {
  Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, x), use(DNNL_ARG_DST, y)}, {}, node, step};
  own.own = [=](Exec& e) {
    softmax_columns(static_cast<const float*>(e.bound[DNNL_ARG_SRC].get_data_handle()),
                    static_cast<float*>(e.bound[DNNL_ARG_DST].get_data_handle()), outer, run, inner, log);
  };
  own.kernel = "runtime softmax columns";
  execs.push_back(std::move(own));
}

// the layer norm of each of x's `rows` rows (+ the residual r's, -1 for none) into dense y, f32 or
// bf16, scale and bias constants or -1 (layernorm.h)
void Partition::Impl::row_layer_norm(int x, int r, int scale, int bias, int y, int64_t rows, int64_t cols,
                                     float epsilon) {
  Exec own{dnnl::primitive(), {use(DNNL_ARG_SRC, x), use(DNNL_ARG_DST, y)}, {}, node, step};
  if (r >= 0) own.args.push_back(use(DNNL_ARG_SRC_1, r));
  if (scale >= 0) own.args.push_back(owned(DNNL_ARG_SCALE, constant_as(scale, plain({cols}))));
  if (bias >= 0) own.args.push_back(owned(DNNL_ARG_SHIFT, constant_as(bias, plain({cols}))));
  const bool to_bf16 = md_of(y).get_data_type() == dt::bf16;
  own.own = [=](Exec& e) {
    auto data = [&](int key) {
      auto it = e.bound.find(key);
      return it == e.bound.end() ? nullptr : static_cast<const float*>(it->second.get_data_handle());
    };
    const float *xs = data(DNNL_ARG_SRC), *rs = data(DNNL_ARG_SRC_1);
    const float *g = data(DNNL_ARG_SCALE), *b = data(DNNL_ARG_SHIFT);
    void* ys = e.bound[DNNL_ARG_DST].get_data_handle();
    if (to_bf16) layer_norm_rows(xs, rs, g, b, static_cast<uint16_t*>(ys), rows, cols, epsilon);
    else layer_norm_rows(xs, rs, g, b, static_cast<float*>(ys), rows, cols, epsilon);
  };
  own.kernel = "runtime layernorm";
  execs.push_back(std::move(own));
}

// whether a product of one row runs on gemv() in this step's precision (AVX-512; bf16 needs its dot)
bool Partition::Impl::gemv_takes_rows() const { return VECTORISED && (compute == dt::f32 || BF16_DOT); }

}  // namespace af
